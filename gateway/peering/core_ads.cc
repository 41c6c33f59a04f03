// Ads in and out: a peer's ads (signatures checked without the lock), this
// site's own ad on every tick, and the final withdrawn one.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/str_cat.h"
#include "federation/capacity_view.h"
#include "gateway/ops/metrics.h"
#include "gateway/peering/core.h"
#include "gateway/peering/core_keys.h"
#include "gateway/store/store.h"

namespace fedgate::gateway {

absl::StatusOr<v1::AdvertiseResponse> GatewayCore::Advertise(const Identity& caller,
                                                             const v1::AdvertiseRequest& req) {
  if (req.site() != caller.site) {
    return absl::InvalidArgumentError(StrCat("advertise names site \"", req.site(),
                                                   "\" but the certificate is of \"",
                                                   caller.site, "\""));
  }
  v1::AdvertiseResponse resp;
  auto refused = [&](const std::string& reason, const std::string& detail) {
    metrics_->Inc("fedgate_ads_refused_total", {{"reason", reason}});
    resp.set_rejected(resp.rejected() + 1);
    spdlog::warn("ad from peer {} refused ({}): {}", caller.site, reason, detail);
  };
  // Signatures are checked outside the lock: they cost the most. An ad
  // that is no news (each arrives from every neighbour) is dropped as stale
  // without one: it could change nothing.
  std::vector<std::pair<v1::CapacityAd, const v1::SignedAd*>> offered;
  for (const auto& s : req.signed_ads()) {
    v1::CapacityAd peek;
    if (peek.ParseFromString(s.ad()) && !peek.origin().empty()) {
      const bool own = peek.origin() == config_.site;
      bool newer = false;
      if (!own) {
        std::lock_guard lock(mu_);
        newer = ads_.IsNewer(peek.origin(), federation::VersionOf(peek));
      }
      if (!newer) {
        metrics_->Inc("fedgate_ads_received_total", {{"result", own ? "own_origin" : "stale"}});
        resp.set_rejected(resp.rejected() + 1);
        continue;
      }
    }
    if (ad_authority_ == nullptr) {
      if (!peek.origin().empty()) offered.emplace_back(std::move(peek), &s);
      continue;
    }
    AdRefusal why;
    auto ad = ad_authority_->Verify(s, &why);
    if (!ad.ok()) {
      refused(why.reason, why.detail);
      continue;
    }
    offered.emplace_back(std::move(*ad), &s);
  }
  const bool unsigned_ok = ad_authority_ == nullptr || !config_.advertise.require_signed;
  for (const auto& ad : req.ads()) {
    if (unsigned_ok) {
      offered.emplace_back(ad, nullptr);
    } else {
      refused("unsigned", StrCat("an unsigned ad for ", ad.origin().substr(0, 64)));
    }
  }
  bool changed = false;
  std::optional<HomesSnapshot> homes;
  {
    std::lock_guard lock(mu_);
    peers_.Heard(caller.site);
    static const v1::SignedAd kNone;
    for (const auto& [ad, signed_ad] : offered) {
      auto verdict = ads_.Offer(ad, caller.site, signed_ad != nullptr ? *signed_ad : kNone);
      const std::string result(federation::AdVerdictName(verdict));
      metrics_->Inc("fedgate_ads_received_total", {{"result", result}});
      if (verdict == federation::AdVerdict::kAccepted) {
        resp.set_accepted(resp.accepted() + 1);
        changed = true;
      } else if (federation::IsRefusal(verdict)) {
        refused(result, StrCat("ad of ", ad.origin().substr(0, 64), " seq ", ad.seq()));
      } else {
        resp.set_rejected(resp.rejected() + 1);
      }
    }
    if (changed) homes = RefreshHomesLocked();
  }
  if (changed) cv_.notify_all();
  PersistHomes(homes);
  return resp;
}

absl::StatusOr<uint64_t> GatewayCore::NextSeq() {
  const uint64_t next = seq_ + 1;
  // Persist before publishing: a restarted gateway must never reuse a seq.
  if (auto st = store_->PutKv(kSeqKey, std::to_string(next)); !st.ok()) return st;
  seq_ = next;
  return next;
}

absl::Status GatewayCore::Tick() {
  const LocalState local = ReadLocal();
  std::vector<v1::TenantQuota> tenants;
  if (tenants_fn_) tenants = tenants_fn_();
  std::vector<v1::DatasetAd> datasets;
  if (datasets_fn_) datasets = datasets_fn_();
  std::vector<v1::ServiceAd> services;
  if (services_fn_) services = services_fn_();
  absl::Status persisted;
  std::optional<HomesSnapshot> homes;
  {
    std::lock_guard publishing(publish_mu_);
    auto seq = NextSeq();
    persisted = seq.status();
    std::lock_guard lock(mu_);
    if (seq.ok()) {
      auto ad = federation::MakeOwnAd(config_.site, inventory_->Nodes(), *seq, clock_->NowMs(),
                                      config_.advertise.ttl_ms, config_.advertise.interval_ms,
                                      local.free, local.extras);
      for (const auto& [to, link] : own_links_) *ad.add_links() = link;
      for (auto& t : tenants) *ad.add_tenants() = std::move(t);
      for (auto& d : datasets) *ad.add_datasets() = std::move(d);
      for (auto& sv : services) *ad.add_services() = std::move(sv);
      PublishLocked(std::move(ad));
      metrics_->Inc("fedgate_ads_issued_total");
    }
    int expired = ads_.ExpireNow();
    // Tenant homes follow the ads: they change only here and in Advertise,
    // not on every placement that asks for a home.
    homes = RefreshHomesLocked();
    if (expired > 0) metrics_->Inc("fedgate_ads_expired_total", {}, expired);
    UpdateGaugesLocked(local.free);
  }
  cv_.notify_all();
  PersistHomes(homes);
  return persisted;
}

void GatewayCore::Withdraw() {
  {
    std::lock_guard publishing(publish_mu_);
    auto seq = NextSeq();
    if (!seq.ok()) return;
    auto ad = federation::MakeOwnAd(config_.site, {}, *seq, clock_->NowMs(),
                                    config_.advertise.ttl_ms, config_.advertise.interval_ms);
    ad.set_withdrawn(true);
    std::lock_guard lock(mu_);
    PublishLocked(std::move(ad));
  }
  cv_.notify_all();
}

void GatewayCore::PublishLocked(v1::CapacityAd ad) {
  ad.set_incarnation(incarnation_);
  ad.set_accepts_federation_jobs(config_.accept_jobs_from_federation);
  ad.set_endpoint(AdvertisedEndpoint(config_));
  ad.set_http_endpoint(http_endpoint_);
  v1::SignedAd signed_ad;
  if (ad_authority_ != nullptr) {
    auto s = ad_authority_->Sign(ad);
    if (s.ok()) {
      signed_ad = std::move(*s);
    } else {
      // Peers that require signatures refuse it; this site still sees itself.
      spdlog::error("cannot sign this site's ad: {}", std::string(s.status().message()));
    }
  }
  ads_.Publish(ad, signed_ad);
  own_seq_ = ad.seq();
}

}  // namespace fedgate::gateway
