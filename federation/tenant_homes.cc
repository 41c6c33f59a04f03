#include "federation/tenant_homes.h"

#include <set>

#include "base/str_cat.h"
#include "federation/capacity_view.h"

namespace fedgate::federation {

bool RefreshHomes(const std::vector<const StoredAd*>& fresh, KnownHomes* known) {
  bool changed = false;
  for (const StoredAd* stored : fresh) {
    if (stored->ad.withdrawn()) continue;
    const std::string& origin = stored->ad.origin();
    std::set<std::string> claimed;
    for (const auto& t : stored->ad.tenants()) {
      claimed.insert(t.tenant());
      auto& k = (*known)[t.tenant()];
      if (k.home() != origin && !k.home().empty()) continue;  // a conflict: the first stays
      changed = changed || k.home() != origin;
      k = t;
      k.set_home(origin);
    }
    changed = std::erase_if(*known, [&](const auto& kv) {
                return kv.second.home() == origin && !claimed.contains(kv.first);
              }) > 0 || changed;
  }
  return changed;
}

std::optional<TenantHome> HomeOf(const std::string& tenant, const std::string& self_site,
                                 const std::vector<const StoredAd*>& fresh,
                                 const KnownHomes& known, int64_t now_ms) {
  std::optional<TenantHome> home;
  for (const StoredAd* stored : fresh) {
    if (stored->ad.withdrawn()) continue;
    for (const auto& t : stored->ad.tenants()) {
      if (t.tenant() != tenant) continue;
      if (home) {
        home->error = StrCat("tenant ", tenant, " is claimed by both ", home->site, " and ",
                             stored->ad.origin(), " (remove it from the tenants: of one)");
        continue;
      }
      const std::string& origin = stored->ad.origin();
      home = TenantHome{origin, origin == self_site || !IsSilent(*stored, now_ms), t, ""};
      home->quota.set_home(origin);
    }
  }
  if (!home) {
    // Its home's ad expired: the home is down, not gone.
    if (auto k = known.find(tenant); k != known.end()) {
      home = TenantHome{k->second.home(), false, k->second, ""};
    }
  }
  return home;
}

std::vector<v1::TenantQuota> AllQuotas(const std::vector<const StoredAd*>& fresh,
                                       const KnownHomes& known) {
  std::map<std::string, std::vector<v1::TenantQuota>> claims;
  for (const StoredAd* stored : fresh) {
    if (stored->ad.withdrawn()) continue;
    for (auto t : stored->ad.tenants()) {
      t.set_home(stored->ad.origin());
      claims[t.tenant()].push_back(std::move(t));
    }
  }
  for (const auto& [tenant, q] : known) {
    if (claims.contains(tenant)) continue;
    auto& last = claims[tenant].emplace_back(q);
    last.set_error(
        StrCat("home site ", q.home(), " is down: last known quota; new guaranteed work waits"));
  }
  std::vector<v1::TenantQuota> out;
  for (auto& [tenant, list] : claims) {
    // Every claimant named in each entry's error (before any entry moves out).
    std::string sites;
    for (const auto& o : list) sites += StrCat(sites.empty() ? "" : ", ", o.home());
    for (auto& t : list) {
      if (list.size() > 1) {
        t.set_error(StrCat("tenant ", tenant, " is claimed by ", list.size(), " sites (", sites,
                           "): new guaranteed work waits"));
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

}  // namespace fedgate::federation
