#include "gateway/peering/core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "base/number.h"
#include "base/str_cat.h"
#include "gateway/peering/core_keys.h"
#include "gateway/ops/metrics.h"
#include "gateway/store/store.h"

namespace fedgate::gateway {
namespace {

int64_t DownAfterMs(const Config& c) {
  return federation::kMissedIntervalsForDown * c.advertise.interval_ms;
}

// A stored counter (ad seq, incarnation); 0 when there is none. A row that
// is not a number is an error that names it, not an exception.
absl::StatusOr<uint64_t> StoredCounter(Store* store, const char* key) {
  auto v = store->GetKv(key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return 0;
  auto n = ParseNumber<uint64_t>(**v);
  if (!n) {
    return absl::DataLossError(StrCat("store: \"", key, "\" holds \"", (**v).substr(0, 32),
                                      "\", not a number"));
  }
  return *n;
}

}  // namespace

GatewayCore::GatewayCore(const Config& config, const federation::Clock* clock, Store* store,
                         std::unique_ptr<federation::InventorySource> inventory, Metrics* metrics)
    : config_(config),
      clock_(clock),
      store_(store),
      inventory_(std::move(inventory)),
      metrics_(metrics),
      ads_(config.site, clock, config.advertise.max_skew_ms),
      peers_(config.site, clock, DownAfterMs(config)) {
  DescribeMetrics();
  metrics_->OnScrape([this](Metrics&) {
    const LocalState local = ReadLocal();
    std::lock_guard lock(mu_);
    UpdateGaugesLocked(local.free);
  });
}

GatewayCore::LocalState GatewayCore::ReadLocal() const {
  return {free_fn_ ? free_fn_() : std::map<std::string, uint32_t>{},
          extras_fn_ ? extras_fn_() : federation::NodeExtras{}};
}

absl::Status GatewayCore::Init() {
  auto stored = store_->LoadPeers();
  if (!stored.ok()) return stored.status();
  auto seq = StoredCounter(store_, kSeqKey);
  if (!seq.ok()) return seq.status();
  // A new incarnation per start, above the last even if the clock went back.
  auto last = StoredCounter(store_, kIncarnationKey);
  if (!last.ok()) return last.status();
  incarnation_ = std::max<uint64_t>(*last + 1, static_cast<uint64_t>(clock_->NowMs()));
  if (auto st = store_->PutKv(kIncarnationKey, std::to_string(incarnation_)); !st.ok()) return st;
  auto homes = store_->GetKv(kTenantHomesKey);
  if (!homes.ok()) return homes.status();
  v1::QuotasResponse known;
  if (homes->has_value() && !known.ParseFromString(**homes)) known.Clear();
  {
    std::lock_guard publishing(publish_mu_);
    seq_ = *seq;
  }
  std::lock_guard lock(mu_);
  for (const auto& p : config_.peers) {
    if (auto st = peers_.Add(p.site, p.endpoint, "config"); !st.ok()) return st;
  }
  for (const auto& p : *stored) {
    if (peers_.IsApproved(p.site)) continue;  // the config wins
    if (auto st = peers_.Add(p.site, p.endpoint, "admin"); !st.ok()) {
      spdlog::warn("store: ignoring stored peer {}: {}", p.site, std::string(st.message()));
    }
  }
  if (config_.accept_jobs_from_federation && AdvertisedEndpoint(config_).empty()) {
    spdlog::warn("accept_jobs_from: federation, but listen.grpc {} is a wildcard address: set "
                 "advertise.endpoint so that sites other than the peers can dial this one",
                 config_.listen.grpc);
  }
  for (const auto& q : known.quotas()) known_homes_[q.tenant()] = q;
  return absl::OkStatus();
}

absl::StatusOr<v1::HandshakeResponse> GatewayCore::Handshake(const Identity& caller,
                                                             const v1::HandshakeRequest& req) {
  if (req.site() != caller.site) {
    return absl::InvalidArgumentError(StrCat("handshake names site \"", req.site(),
                                                   "\" but the certificate is of \"",
                                                   caller.site, "\""));
  }
  const bool signs = std::find(req.capabilities().begin(), req.capabilities().end(),
                               kSignedAdsCapability) != req.capabilities().end();
  if (!signs && ad_authority_ != nullptr && config_.advertise.require_signed) {
    spdlog::warn("peer {} refused: it does not sign its ads (version {})", caller.site,
                 req.version());
    return absl::FailedPreconditionError(StrCat(
        "site ", config_.site, " requires signed ads and ", caller.site, " (version ",
        req.version().substr(0, 32), ") lacks the \"", kSignedAdsCapability,
        "\" capability: upgrade it, or set advertise.require_signed: false at ", config_.site,
        " for the upgrade"));
  }
  {
    std::lock_guard lock(mu_);
    peers_.Heard(caller.site);
  }
  spdlog::info("peer {} handshake (version {})", caller.site, req.version());
  v1::HandshakeResponse resp;
  resp.set_site(config_.site);
  resp.set_version(kVersion);
  resp.add_capabilities("ads.v1");
  if (ad_authority_ != nullptr) resp.add_capabilities(kSignedAdsCapability);
  return resp;
}

bool GatewayCore::FollowsTo(const std::string& coordinator) {
  return !coordinator.empty() && coordinator != config().site && !DownPeers().contains(coordinator);
}

std::set<std::string> GatewayCore::DownPeers() {
  std::lock_guard lock(mu_);
  std::set<std::string> out;
  for (const auto& p : peers_.List()) {
    if (peers_.StateOf(p.site) == federation::PeerState::kDown) out.insert(p.site);
  }
  return out;
}

v1::ListPeersResponse GatewayCore::ListPeers() {
  std::lock_guard lock(mu_);
  v1::ListPeersResponse resp;
  const int64_t now = clock_->NowMs();
  for (const auto& p : peers_.List()) {
    auto* out = resp.add_peers();
    out->set_site(p.site);
    out->set_endpoint(p.endpoint);
    switch (peers_.StateOf(p.site)) {
      case federation::PeerState::kConnecting: out->set_state(v1::Peer::connecting); break;
      case federation::PeerState::kUp: out->set_state(v1::Peer::up); break;
      case federation::PeerState::kDown: out->set_state(v1::Peer::down); break;
    }
    out->set_last_heard_seconds(p.last_heard_ms < 0 ? -1 : (now - p.last_heard_ms) / 1000.0);
    out->set_rtt_ms(p.rtt_ms);
    out->set_source(p.source);
    out->set_last_error(p.last_error);
  }
  return resp;
}

absl::StatusOr<v1::Peer> GatewayCore::AddPeer(const std::string& site,
                                              const std::string& endpoint) {
  {
    std::lock_guard admin(admin_mu_);
    {
      std::lock_guard lock(mu_);
      // Validate first so a refused request changes nothing.
      if (auto st = peers_.Validate(site, endpoint); !st.ok()) return st;
      for (const auto& p : peers_.List()) {
        if (p.site == site && p.source == "config") {
          return absl::FailedPreconditionError(
              StrCat("peer \"", site, "\" is declared in the config file; change it there"));
        }
      }
    }
    // Durable before it counts: a restart must not forget an approval.
    if (auto st = store_->UpsertPeer({site, endpoint, clock_->NowMs()}); !st.ok()) return st;
    std::lock_guard lock(mu_);
    if (auto st = peers_.Add(site, endpoint, "admin"); !st.ok()) return st;
  }
  spdlog::info("admin: approved peer {} at {}", site, endpoint);
  if (peers_changed_) peers_changed_();
  const auto listed = ListPeers();
  for (const auto& p : listed.peers()) {
    if (p.site() == site) return p;
  }
  return absl::InternalError("peer vanished after add");
}

absl::Status GatewayCore::RemovePeer(const std::string& site) {
  const LocalState local = ReadLocal();
  std::optional<HomesSnapshot> homes;
  {
    std::lock_guard admin(admin_mu_);
    {
      std::lock_guard lock(mu_);
      bool known = false;
      for (const auto& p : peers_.List()) {
        if (p.site != site) continue;
        known = true;
        if (p.source == "config") {
          return absl::FailedPreconditionError(StrCat(
              "peer \"", site, "\" is declared in the config file; remove it there and restart"));
        }
      }
      if (!known) return absl::NotFoundError(StrCat("no approved peer \"", site, "\""));
    }
    if (auto st = store_->DeletePeer(site); !st.ok() && !absl::IsNotFound(st)) return st;
    std::lock_guard lock(mu_);
    if (auto st = peers_.Remove(site); !st.ok()) return st;
    own_links_.erase(site);
    ++own_links_gen_;
    // Its tenants are no longer governed by a site that left the federation.
    if (std::erase_if(known_homes_, [&](const auto& kv) { return kv.second.home() == site; }) > 0) {
      ++homes_gen_;
      homes = HomesLocked();
    }
    metrics_->Remove("fedgate_peer_push_errors_total", {{"peer", site}});
    UpdateGaugesLocked(local.free);
  }
  PersistHomes(homes);
  spdlog::info("admin: removed peer {}", site);
  if (peers_changed_) peers_changed_();
  return absl::OkStatus();
}

bool GatewayCore::IsApprovedPeer(std::string_view site) {
  std::lock_guard lock(mu_);
  return peers_.IsApproved(site);
}

std::vector<federation::PeerInfo> GatewayCore::Peers() {
  std::lock_guard lock(mu_);
  return peers_.List();
}

std::vector<federation::StoredAd> GatewayCore::Pending(
    const std::string& peer, const std::map<std::string, federation::AdVersion>& sent) {
  std::lock_guard lock(mu_);
  return ads_.Pending(peer, sent);
}

void GatewayCore::RecordPush(const std::string& peer, double rtt_ms, size_t bytes) {
  metrics_->Inc("fedgate_ads_sent_bytes_total", {}, static_cast<double>(bytes));
  std::lock_guard lock(mu_);
  peers_.RecordPush(peer, rtt_ms);
}

void GatewayCore::RecordError(const std::string& peer, const std::string& error) {
  metrics_->Inc("fedgate_peer_push_errors_total", {{"peer", peer}});
  std::lock_guard lock(mu_);
  peers_.RecordError(peer, error);
}

uint64_t GatewayCore::WaitForChange(uint64_t seen, int64_t deadline_ms,
                                    const std::function<bool()>& wake) {
  std::unique_lock lock(mu_);
  while (ads_.version() == seen && !wake()) {
    const int64_t left = deadline_ms - clock_->NowMs();
    if (left <= 0) break;
    cv_.wait_for(lock, std::chrono::milliseconds(left));
  }
  return ads_.version();
}

void GatewayCore::WaitUntil(int64_t deadline_ms, const std::function<bool()>& wake) {
  std::unique_lock lock(mu_);
  while (!wake()) {
    const int64_t left = deadline_ms - clock_->NowMs();
    if (left <= 0) break;
    cv_.wait_for(lock, std::chrono::milliseconds(left));
  }
}

void GatewayCore::NotifyAll() {
  { std::lock_guard lock(mu_); }
  cv_.notify_all();
}

}  // namespace fedgate::gateway
