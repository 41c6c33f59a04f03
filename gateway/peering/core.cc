#include "gateway/peering/core.h"
#include "base/host_port.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <set>

#include "base/str_cat.h"
#include "federation/capacity_view.h"
#include "federation/job_spec.h"
#include "federation/placement.h"
#include "gateway/ops/metrics.h"
#include "gateway/store/store.h"

namespace fedgate::gateway {

namespace {
constexpr const char* kTenantHomesKey = "tenant_homes";
constexpr const char* kSeqKey = "ad_seq";
constexpr const char* kIncarnationKey = "ad_incarnation";
constexpr const char* kSignedAdsCapability = "ads.signed.v1";

// advertise.endpoint, else listen.grpc unless that is a wildcard address
// nobody can dial ("": the site cannot be reached beyond its peers).
std::string AdvertisedEndpoint(const Config& c) {
  if (!c.advertise_endpoint.empty()) return c.advertise_endpoint;
  const auto [host, port] = SplitHostPort(c.listen_grpc);
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*") return "";
  return c.listen_grpc;
}

int64_t DownAfterMs(const Config& c) {
  return federation::kMissedIntervalsForDown * c.advertise_interval_ms;
}
}  // namespace

GatewayCore::GatewayCore(const Config& config, const federation::Clock* clock, Store* store,
                         std::unique_ptr<federation::InventorySource> inventory, Metrics* metrics)
    : config_(config),
      clock_(clock),
      store_(store),
      inventory_(std::move(inventory)),
      metrics_(metrics),
      ads_(config.site, clock, config.advertise_max_skew_ms),
      peers_(config.site, clock, DownAfterMs(config)) {
  metrics_->Describe("fedgate_ads_received_total", "counter",
                     "Capacity ads received from peers, by result (accepted or why rejected).");
  metrics_->Describe("fedgate_ads_refused_total", "counter",
                     "Ads refused as hostile or broken, by reason: unsigned, bad_ad, "
                     "bad_certificate, untrusted_certificate, not_a_gateway, origin_mismatch, "
                     "bad_signature, revoked, invalid, future, foreign_link, seq_out_of_range.");
  metrics_->Describe("fedgate_ads_expired_total", "counter", "Ads dropped past their TTL.");
  metrics_->Describe("fedgate_ads_sent_bytes_total", "counter",
                     "Bytes of Advertise requests this gateway pushed to its peers.");
  metrics_->Describe("fedgate_ads_issued_total", "counter", "Ads this site issued.");
  metrics_->Describe("fedgate_peers_up", "gauge", "Approved peers heard within the window.");
  metrics_->Describe("fedgate_peers_approved", "gauge", "Approved peers.");
  metrics_->Describe("fedgate_ad_oldest_age_seconds", "gauge",
                     "Age of the oldest unexpired ad from another site.");
  metrics_->Describe("fedgate_ad_age_seconds", "gauge",
                     "Time since the newest ad of each other site arrived (gone once it expires).");
  metrics_->Describe("fedgate_sites_known", "gauge", "Sites with an unexpired ad, this one too.");
  metrics_->Describe("fedgate_peer_rpc_handled_total", "counter",
                     "Peer RPCs that passed authorization and reached their handler.");
  metrics_->Describe("fedgate_admin_rpc_handled_total", "counter",
                     "Admin RPCs that passed authorization and reached their handler.");
  metrics_->Describe("fedgate_job_rpc_handled_total", "counter",
                     "Job RPCs that passed authorization and reached their handler.");
  metrics_->Describe("fedgate_authz_refusals_total", "counter",
                     "Calls refused by per-call authorization.");
  metrics_->Describe("fedgate_peer_push_errors_total", "counter",
                     "Failed handshakes or pushes to a peer.");
  metrics_->Describe("fedgate_link_gbps", "gauge", "Measured payload Gbit/s per link.");
  metrics_->Describe("fedgate_link_age_seconds", "gauge", "Age of each link's measurement.");
  metrics_->Describe("fedgate_probes_total", "counter", "Link probes run, by result.");
  metrics_->Describe("fedgate_rpc_duration_seconds", "histogram",
                     "Handler time of gRPC calls that passed authorization, by method and code.",
                     {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5});
  metrics_->Describe("fedgate_site_gpus", "gauge",
                     "GPUs of every site in this gateway's view, by model; state free or total.");
  metrics_->Describe("fedgate_tenant_quota_gpus", "gauge",
                     "Quotas of the tenants this site governs: kind nominal, borrow, used "
                     "(guaranteed holds) or borrowed (holds beyond nominal).");
  metrics_->OnScrape([this](Metrics&) {
    std::lock_guard lock(mu_);
    UpdateGaugesLocked();
  });
}

absl::Status GatewayCore::Init() {
  std::lock_guard lock(mu_);
  for (const auto& p : config_.peers) {
    if (auto st = peers_.Add(p.site, p.endpoint, "config"); !st.ok()) return st;
  }
  auto stored = store_->LoadPeers();
  if (!stored.ok()) return stored.status();
  for (const auto& p : *stored) {
    if (peers_.IsApproved(p.site)) continue;  // the config wins
    if (auto st = peers_.Add(p.site, p.endpoint, "admin"); !st.ok()) {
      spdlog::warn("store: ignoring stored peer {}: {}", p.site, std::string(st.message()));
    }
  }
  auto seq = store_->GetKv(kSeqKey);
  if (!seq.ok()) return seq.status();
  if (seq->has_value()) seq_ = std::stoull(**seq);
  // A new incarnation per start, above the last even if the clock went back.
  auto inc = store_->GetKv(kIncarnationKey);
  if (!inc.ok()) return inc.status();
  const uint64_t last = inc->has_value() ? std::stoull(**inc) : 0;
  incarnation_ = std::max<uint64_t>(last + 1, static_cast<uint64_t>(clock_->NowMs()));
  if (auto st = store_->PutKv(kIncarnationKey, std::to_string(incarnation_)); !st.ok()) return st;
  if (config_.accept_jobs_from_federation && AdvertisedEndpoint(config_).empty()) {
    spdlog::warn("accept_jobs_from: federation, but listen.grpc {} is a wildcard address: set "
                 "advertise.endpoint so that sites other than the peers can dial this one",
                 config_.listen_grpc);
  }
  auto homes = store_->GetKv(kTenantHomesKey);
  if (!homes.ok()) return homes.status();
  v1::QuotasResponse known;
  if (homes->has_value() && known.ParseFromString(**homes)) {
    for (const auto& q : known.quotas()) known_homes_[q.tenant()] = q;
  }
  return absl::OkStatus();
}

void GatewayCore::RefreshHomesLocked() {
  bool changed = false;
  for (const federation::StoredAd* stored : ads_.FreshRefs()) {
    // A withdrawn ad (a home shutting down) changes nothing: it comes back.
    if (stored->ad.withdrawn()) continue;
    const std::string& origin = stored->ad.origin();
    std::set<std::string> claimed;
    for (const auto& t : stored->ad.tenants()) {
      claimed.insert(t.tenant());
      auto& k = known_homes_[t.tenant()];
      if (k.home() != origin && !k.home().empty()) continue;  // a conflict: the first stays
      changed = changed || k.home() != origin;
      k = t;
      k.set_home(origin);
    }
    // A live home that stopped governing a tenant releases it.
    for (auto it = known_homes_.begin(); it != known_homes_.end();) {
      if (it->second.home() == origin && !claimed.contains(it->first)) {
        it = known_homes_.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
  }
  if (changed) PersistHomesLocked();
}

void GatewayCore::PersistHomesLocked() {
  v1::QuotasResponse all;
  for (const auto& [t, q] : known_homes_) *all.add_quotas() = q;
  if (auto st = store_->PutKv(kTenantHomesKey, all.SerializeAsString()); !st.ok()) {
    spdlog::error("cannot store tenant homes: {}", std::string(st.message()));
  }
}

absl::StatusOr<v1::HandshakeResponse> GatewayCore::Handshake(const Identity& caller,
                                                             const v1::HandshakeRequest& req) {
  if (req.site() != caller.site) {
    return absl::InvalidArgumentError(fedgate::StrCat("handshake names site \"", req.site(),
                                                   "\" but the certificate is of \"",
                                                   caller.site, "\""));
  }
  const bool signs = std::find(req.capabilities().begin(), req.capabilities().end(),
                               kSignedAdsCapability) != req.capabilities().end();
  if (!signs && ad_authority_ != nullptr && config_.advertise_require_signed) {
    spdlog::warn("peer {} refused: it does not sign its ads (version {})", caller.site,
                 req.version());
    return absl::FailedPreconditionError(fedgate::StrCat(
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

absl::StatusOr<v1::AdvertiseResponse> GatewayCore::Advertise(const Identity& caller,
                                                             const v1::AdvertiseRequest& req) {
  if (req.site() != caller.site) {
    return absl::InvalidArgumentError(fedgate::StrCat("advertise names site \"", req.site(),
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
  const bool unsigned_ok = ad_authority_ == nullptr || !config_.advertise_require_signed;
  for (const auto& ad : req.ads()) {
    if (unsigned_ok) {
      offered.emplace_back(ad, nullptr);
    } else {
      refused("unsigned", fedgate::StrCat("an unsigned ad for ", ad.origin().substr(0, 64)));
    }
  }
  bool changed = false;
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
        refused(result, fedgate::StrCat("ad of ", ad.origin().substr(0, 64), " seq ", ad.seq()));
      } else {
        resp.set_rejected(resp.rejected() + 1);
      }
    }
    if (changed) RefreshHomesLocked();
  }
  if (changed) cv_.notify_all();
  return resp;
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
    std::lock_guard lock(mu_);
    // Validate first so a refused request changes nothing.
    if (auto st = peers_.Validate(site, endpoint); !st.ok()) return st;
    for (const auto& p : peers_.List()) {
      if (p.site == site && p.source == "config") {
        return absl::FailedPreconditionError(
            fedgate::StrCat("peer \"", site, "\" is declared in the config file; change it there"));
      }
    }
    StoredPeer sp{site, endpoint, clock_->NowMs()};
    if (auto st = store_->UpsertPeer(sp); !st.ok()) return st;
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
  {
    std::lock_guard lock(mu_);
    bool known = false;
    for (const auto& p : peers_.List()) {
      if (p.site != site) continue;
      known = true;
      if (p.source == "config") {
        return absl::FailedPreconditionError(fedgate::StrCat(
            "peer \"", site, "\" is declared in the config file; remove it there and restart"));
      }
    }
    if (!known) return absl::NotFoundError(fedgate::StrCat("no approved peer \"", site, "\""));
    if (auto st = store_->DeletePeer(site); !st.ok() && !absl::IsNotFound(st)) return st;
    if (auto st = peers_.Remove(site); !st.ok()) return st;
    own_links_.erase(site);
    ++own_links_gen_;
    // Its tenants are no longer governed by a site that left the federation.
    if (std::erase_if(known_homes_, [&](const auto& kv) { return kv.second.home() == site; }) > 0) {
      PersistHomesLocked();
    }
    metrics_->Remove("fedgate_peer_push_errors_total", {{"peer", site}});
    UpdateGaugesLocked();
  }
  spdlog::info("admin: removed peer {}", site);
  if (peers_changed_) peers_changed_();
  return absl::OkStatus();
}

v1::GetCapacityResponse GatewayCore::Capacity() {
  std::lock_guard lock(mu_);
  return federation::BuildCapacityView(config_.site, inventory_->Nodes(), ads_.FreshRefs(),
                                       clock_->NowMs(), LocalFree(), LocalExtras());
}

absl::Status GatewayCore::Tick() {
  absl::Status persisted;
  {
    std::lock_guard lock(mu_);
    const uint64_t next = seq_ + 1;
    // Persist before publishing: a restarted gateway must never reuse a seq.
    persisted = store_->PutKv(kSeqKey, std::to_string(next));
    if (persisted.ok()) {
      seq_ = next;
      auto ad = federation::MakeOwnAd(config_.site, inventory_->Nodes(), seq_, clock_->NowMs(),
                                      config_.advertise_ttl_ms, config_.advertise_interval_ms,
                                      LocalFree(), LocalExtras());
      for (const auto& [to, link] : own_links_) *ad.add_links() = link;
      if (tenants_fn_) {
        for (auto& t : tenants_fn_()) *ad.add_tenants() = std::move(t);
      }
      PublishLocked(std::move(ad));
      metrics_->Inc("fedgate_ads_issued_total");
    }
    int expired = ads_.ExpireNow();
    // Tenant homes follow the ads: they change only here and in Advertise,
    // not on every placement that asks for a home.
    RefreshHomesLocked();
    if (expired > 0) metrics_->Inc("fedgate_ads_expired_total", {}, expired);
    UpdateGaugesLocked();
  }
  cv_.notify_all();
  return persisted;
}

void GatewayCore::Withdraw() {
  {
    std::lock_guard lock(mu_);
    const uint64_t next = seq_ + 1;
    if (!store_->PutKv(kSeqKey, std::to_string(next)).ok()) return;
    seq_ = next;
    auto ad = federation::MakeOwnAd(config_.site, {}, seq_, clock_->NowMs(),
                                    config_.advertise_ttl_ms, config_.advertise_interval_ms);
    ad.set_withdrawn(true);
    PublishLocked(std::move(ad));
  }
  cv_.notify_all();
}

void GatewayCore::PublishLocked(v1::CapacityAd ad) {
  ad.set_incarnation(incarnation_);
  ad.set_accepts_federation_jobs(config_.accept_jobs_from_federation);
  ad.set_endpoint(AdvertisedEndpoint(config_));
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

std::vector<std::string> GatewayCore::SitesLeftOut() {
  // The sites of the capacity view (fresh, not withdrawn ads) that are not
  // SitesForJobs, read straight from the ads: Submit and Get ask this for
  // every pending job, and building the whole view for a list of names
  // cost a view build per call.
  const auto reachable = SitesForJobs();
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const federation::StoredAd* stored : ads_.FreshRefs()) {
    const auto& ad = stored->ad;
    if (ad.origin() == config_.site || ad.withdrawn() || reachable.contains(ad.origin())) continue;
    out.push_back(ad.origin());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string GatewayCore::LeftOutNote(const std::vector<std::string>& sites) {
  if (sites.empty()) return "";
  std::string list;
  for (const auto& s : sites) list += fedgate::StrCat(list.empty() ? "" : ", ", s);
  return fedgate::StrCat("; left out: ", list,
                         " (not peers of this site and accepting jobs only from their peers)");
}

absl::StatusOr<v1::PlanResponse> GatewayCore::PlanForJobs(const v1::JobSpec& spec,
                                                          std::string* note) {
  const auto left_out = SitesLeftOut();
  v1::JobSpec avoiding = spec;
  for (const auto& s : left_out) avoiding.add_avoided_sites(s);
  auto plan = Plan(avoiding);
  if (note != nullptr && plan.ok() && !plan->placeable()) *note = LeftOutNote(left_out);
  return plan;
}

std::set<std::string> GatewayCore::SitesForJobs() {
  std::lock_guard lock(mu_);
  std::set<std::string> out = {config_.site};
  for (const auto& p : peers_.List()) out.insert(p.site);
  for (const federation::StoredAd* stored : ads_.FreshRefs()) {
    const auto& ad = stored->ad;
    if (ad.accepts_federation_jobs() && !ad.endpoint().empty() && !ad.withdrawn()) {
      out.insert(ad.origin());
    }
  }
  return out;
}

std::string GatewayCore::ReservationEndpoint(const std::string& site) {
  std::lock_guard lock(mu_);
  for (const auto& p : peers_.List()) {
    if (p.site == site) return p.endpoint;
  }
  // Not a peer: where its signed ad says it is dialled, if it takes jobs
  // from the whole federation.
  if (auto stored = ads_.Get(site); stored && stored->ad.accepts_federation_jobs()) {
    return stored->ad.endpoint();
  }
  return "";
}

void GatewayCore::RecordLink(const v1::Link& link) {
  {
    std::lock_guard lock(mu_);
    own_links_[link.to()] = link;
    ++own_links_gen_;
  }
  // A new measurement travels in the next ad: issue it now.
  (void)Tick();
}

const federation::LinkMatrix& GatewayCore::LinksLocked() {
  // The ads it reads are the same when the store's version is (every
  // accepted ad bumps it) and the same ads are still fresh (expiry drops
  // some without a bump); a link's age is judged when it is read.
  auto fresh = ads_.FreshRefs();
  auto& c = links_cache_;
  if (c.links && c.ads_version == ads_.version() && c.own_links_gen == own_links_gen_ &&
      c.fresh == fresh) {
    return *c.links;
  }
  federation::LinkMatrix m(config_.bench_link_max_age_ms);
  for (const auto& [to, link] : own_links_) m.Merge(link);
  for (const federation::StoredAd* stored : fresh) {
    if (stored->ad.origin() == config_.site || stored->ad.withdrawn()) continue;
    m.MergeAll(stored->ad.links());
  }
  c = {ads_.version(), own_links_gen_, std::move(fresh), std::move(m)};
  return *c.links;
}

v1::ListLinksResponse GatewayCore::ListLinks() {
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMs();
  v1::ListLinksResponse resp;
  for (const auto& l : LinksLocked().All(now)) {
    auto* v = resp.add_links();
    v->set_from(l.from());
    v->set_to(l.to());
    v->set_gbps(l.gbps());
    v->set_latency_ms(l.latency_ms());
    v->set_method(l.method());
    v->set_streams(l.streams());
    v->set_age_seconds(std::max<double>(0, (now - l.measured_at_unix_ms()) / 1000.0));
  }
  return resp;
}

std::optional<GatewayCore::TenantHome> GatewayCore::HomeOf(const std::string& tenant) {
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMs();
  std::optional<TenantHome> home;
  for (const federation::StoredAd* stored : ads_.FreshRefs()) {
    if (stored->ad.withdrawn()) continue;
    for (const auto& t : stored->ad.tenants()) {
      if (t.tenant() != tenant) continue;
      if (home) {
        home->error = fedgate::StrCat("tenant ", tenant, " is claimed by both ", home->site,
                                      " and ", stored->ad.origin(),
                                      " (remove it from the tenants: of one)");
        continue;
      }
      home = TenantHome{stored->ad.origin(),
                        stored->ad.origin() == config_.site || !federation::IsSilent(*stored, now),
                        t, ""};
      home->quota.set_home(stored->ad.origin());
    }
  }
  if (!home) {
    // Its home's ad expired: the home is down, not gone.
    if (auto k = known_homes_.find(tenant); k != known_homes_.end()) {
      home = TenantHome{k->second.home(), false, k->second, ""};
    }
  }
  return home;
}

std::vector<v1::TenantQuota> GatewayCore::Quotas() {
  std::map<std::string, std::vector<v1::TenantQuota>> claims;
  {
    std::lock_guard lock(mu_);
    for (const federation::StoredAd* stored : ads_.FreshRefs()) {
      if (stored->ad.withdrawn()) continue;
      for (auto t : stored->ad.tenants()) {
        t.set_home(stored->ad.origin());
        claims[t.tenant()].push_back(std::move(t));
      }
    }
    for (const auto& [tenant, q] : known_homes_) {
      if (claims.contains(tenant)) continue;
      auto& last = claims[tenant].emplace_back(q);
      last.set_error(fedgate::StrCat("home site ", q.home(),
                                     " is down: last known quota; new guaranteed work waits"));
    }
  }
  std::vector<v1::TenantQuota> out;
  for (auto& [tenant, list] : claims) {
    for (auto& t : list) {
      if (list.size() > 1) {
        std::string sites;
        for (const auto& o : list) sites += fedgate::StrCat(sites.empty() ? "" : ", ", o.home());
        t.set_error(fedgate::StrCat("tenant ", tenant, " is claimed by ", list.size(),
                                    " sites (", sites, "): new guaranteed work waits"));
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

absl::StatusOr<v1::PlanResponse> GatewayCore::Plan(const v1::JobSpec& raw,
                                                   const federation::OfferFor& whom) {
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMs();
  const auto offers = federation::BuildOffers(config_.site, inventory_->Nodes(),
                                              ads_.FreshRefs(), now, LocalFree(), LocalExtras(),
                                              whom);
  std::set<std::string> models;
  for (const auto& o : offers) {
    for (const auto& n : o.nodes) models.insert(n.gpu_model);
  }
  if (auto st = federation::ValidateJobSpec(raw, models); !st.ok()) return st;
  const v1::JobSpec spec = federation::WithDefaults(raw);
  const federation::LinkMatrix& links = LinksLocked();
  std::vector<std::optional<uint32_t>> ids;
  ids.reserve(offers.size());
  for (const auto& o : offers) ids.push_back(links.SiteId(o.site));
  auto result = federation::PlaceByIndex(
      federation::ToJobRequest(spec), offers,
      [&](size_t a, size_t b) -> std::optional<double> {
        if (!ids[a] || !ids[b]) return std::nullopt;
        return links.PairGbps(*ids[a], *ids[b], now);
      });
  v1::PlanResponse resp;
  resp.set_summary(result.summary);
  if (result.placement) {
    const auto& p = *result.placement;
    resp.set_placeable(true);
    for (const auto& s : p.sites) resp.add_sites(s);
    for (const auto& s : p.slices) {
      auto* out = resp.add_slices();
      out->set_site(s.site);
      out->set_node(s.node);
      out->set_gpus(s.gpus);
      out->set_first_rank(s.first_rank);
      for (const auto& o : offers) {
        if (o.site != s.site) continue;
        for (const auto& n : o.nodes) {
          if (n.name == s.node) out->set_gpu_model(n.gpu_model);
        }
      }
    }
    resp.set_bottleneck_gbps(std::isfinite(p.bottleneck_gbps) ? p.bottleneck_gbps : 0);
    resp.set_leftover_gpus(p.leftover_gpus);
  }
  for (const auto& e : result.explanation) {
    auto* d = resp.add_explanation();
    d->set_site(e.site);
    d->set_used(e.used);
    d->set_reason(e.reason);
  }
  return resp;
}

std::string GatewayCore::NodeAddress(const std::string& site, const std::string& node) {
  std::lock_guard lock(mu_);
  if (site == config_.site) {
    for (const auto& n : inventory_->Nodes()) {
      if (n.name == node) return n.address;
    }
    return "";
  }
  auto ad = ads_.Get(site);
  if (!ad) return "";
  for (const auto& n : ad->ad.nodes()) {
    if (n.name() == node) return n.address();
  }
  return "";
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

void GatewayCore::UpdateGaugesLocked() {
  metrics_->Set("fedgate_peers_up", {}, peers_.CountUp());
  metrics_->Set("fedgate_peers_approved", {}, static_cast<double>(peers_.List().size()));
  metrics_->Set("fedgate_ad_oldest_age_seconds", {}, ads_.OldestAgeSeconds());
  int known = 0;
  for (const federation::StoredAd* a : ads_.FreshRefs()) known += a->ad.withdrawn() ? 0 : 1;
  metrics_->Set("fedgate_sites_known", {}, known);
  // Whole families: a removed peer's or an expired link's series disappear.
  std::vector<std::pair<Labels, double>> up, gbps, age;
  for (const auto& p : peers_.List()) {
    up.push_back({{{"peer", p.site}}, peers_.StateOf(p.site) == federation::PeerState::kUp ? 1.0 : 0.0});
  }
  const int64_t now = clock_->NowMs();
  for (const auto& l : LinksLocked().All(now)) {
    const Labels labels = {{"from", l.from()}, {"to", l.to()}};
    gbps.push_back({labels, l.gbps()});
    age.push_back({labels, (now - l.measured_at_unix_ms()) / 1000.0});
  }
  metrics_->SetFamily("fedgate_peer_up", up);
  std::vector<std::pair<Labels, double>> gpus;
  const auto view = federation::BuildCapacityView(config_.site, inventory_->Nodes(),
                                                  ads_.FreshRefs(), clock_->NowMs(), LocalFree());
  for (const auto& s : view.sites()) {
    for (const auto& m : s.models()) {
      gpus.push_back({{{"site", s.site()}, {"model", m.model()}, {"state", "free"}},
                      static_cast<double>(m.free_gpus())});
      gpus.push_back({{{"site", s.site()}, {"model", m.model()}, {"state", "total"}},
                      static_cast<double>(m.total_gpus())});
    }
  }
  metrics_->SetFamily("fedgate_site_gpus", gpus);
  std::vector<std::pair<Labels, double>> quota;
  for (const federation::StoredAd* a : ads_.FreshRefs()) {
    if (a->ad.origin() != config_.site) continue;
    for (const auto& t : a->ad.tenants()) {
      quota.push_back({{{"tenant", t.tenant()}, {"kind", "nominal"}}, static_cast<double>(t.gpus())});
      quota.push_back({{{"tenant", t.tenant()}, {"kind", "borrow"}}, static_cast<double>(t.borrow())});
      quota.push_back({{{"tenant", t.tenant()}, {"kind", "used"}}, static_cast<double>(t.used_gpus())});
      quota.push_back({{{"tenant", t.tenant()}, {"kind", "borrowed"}},
                       static_cast<double>(t.borrowed_gpus())});
    }
  }
  metrics_->SetFamily("fedgate_tenant_quota_gpus", quota);
  std::vector<std::pair<Labels, double>> ad_age;
  for (const federation::StoredAd* a : ads_.FreshRefs()) {
    if (a->ad.origin() == config_.site) continue;
    ad_age.push_back({{{"origin", a->ad.origin()}},
                      std::max<int64_t>(0, now - a->received_at_ms) / 1000.0});
  }
  metrics_->SetFamily("fedgate_ad_age_seconds", ad_age);
  metrics_->SetFamily("fedgate_link_gbps", gbps);
  metrics_->SetFamily("fedgate_link_age_seconds", age);
}

}  // namespace fedgate::gateway
