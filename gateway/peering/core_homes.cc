// Tenant homes and their quotas as the federation's ads say (the logic is
// pure, in federation/tenant_homes); the last known ones are stored.
#include <spdlog/spdlog.h>

#include "gateway/peering/core.h"
#include "gateway/peering/core_keys.h"
#include "gateway/store/store.h"

namespace fedgate::gateway {

std::optional<GatewayCore::HomesSnapshot> GatewayCore::RefreshHomesLocked() {
  if (!federation::RefreshHomes(ads_.FreshRefs(), &known_homes_)) return std::nullopt;
  ++homes_gen_;
  return HomesLocked();
}

GatewayCore::HomesSnapshot GatewayCore::HomesLocked() {
  v1::QuotasResponse all;
  for (const auto& [t, q] : known_homes_) *all.add_quotas() = q;
  return {homes_gen_, all.SerializeAsString()};
}

void GatewayCore::PersistHomes(const std::optional<HomesSnapshot>& homes) {
  if (!homes) return;
  std::lock_guard writing(homes_write_mu_);
  if (homes->gen <= homes_written_gen_) return;  // a newer one was stored already
  if (auto st = store_->PutKv(kTenantHomesKey, homes->blob); !st.ok()) {
    spdlog::error("cannot store tenant homes: {}", std::string(st.message()));
    return;
  }
  homes_written_gen_ = homes->gen;
}

std::optional<GatewayCore::TenantHome> GatewayCore::HomeOf(const std::string& tenant) {
  std::lock_guard lock(mu_);
  return federation::HomeOf(tenant, config_.site, ads_.FreshRefs(), known_homes_, clock_->NowMs());
}

std::vector<v1::TenantQuota> GatewayCore::Quotas() {
  std::lock_guard lock(mu_);
  return federation::AllQuotas(ads_.FreshRefs(), known_homes_);
}

}  // namespace fedgate::gateway
