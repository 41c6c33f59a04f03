// Which site governs each tenant's quota, from the sites' fresh ads: pure
// functions over the ads and the homes known so far (kept when a home's ad
// expires, so that a home site that is down blocks its tenants' new
// guaranteed work instead of leaving them ungoverned).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "federation/ad_store.h"
#include "fedgate/v1/admin.pb.h"

namespace fedgate::federation {

// tenant -> its last known quota, home() naming the governing site.
using KnownHomes = std::map<std::string, v1::TenantQuota>;

// Folds the fresh ads into `known`; true when it changed. A withdrawn ad (a
// home shutting down) changes nothing; a live home that stopped governing a
// tenant releases it; a tenant claimed by two sites keeps its first home.
bool RefreshHomes(const std::vector<const StoredAd*>& fresh, KnownHomes* known);

struct TenantHome {
  std::string site;
  bool up = true;
  v1::TenantQuota quota;
  std::string error;  // set when two sites claim the tenant
};

// The tenant's home as the fresh ads say, else its last known home (down);
// nullopt when no site governs it (so it has no quota limit).
std::optional<TenantHome> HomeOf(const std::string& tenant, const std::string& self_site,
                                 const std::vector<const StoredAd*>& fresh,
                                 const KnownHomes& known, int64_t now_ms);

// Every governed tenant's quota as the homes advertise it (home() set), the
// last known one of a home that is down, and an error where two sites claim
// the same tenant.
std::vector<v1::TenantQuota> AllQuotas(const std::vector<const StoredAd*>& fresh,
                                       const KnownHomes& known);

}  // namespace fedgate::federation
