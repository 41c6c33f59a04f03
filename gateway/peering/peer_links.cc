#include "gateway/peering/peer_links.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "base/str_cat.h"
#include "fedgate/v1/federation.grpc.pb.h"
#include "gateway/peering/core.h"
#include "gateway/security/tls.h"

namespace fedgate::gateway {

int64_t BackoffMs(int failures, int64_t cap_ms) {
  if (failures <= 0) return 0;
  const int shift = std::min(failures - 1, 20);
  return std::min<int64_t>(cap_ms, int64_t{100} << shift);
}

struct PeerLinks::Link {
  std::string site;
  std::string endpoint;
  std::atomic<bool> stop{false};
  std::atomic<bool> drain{false};
  std::atomic<int64_t> drain_deadline_ms{0};
  std::thread thread;
  // The link's own state, touched by its thread only.
  std::unique_ptr<v1::PeerService::Stub> stub;
  int64_t rpc_timeout_ms = 0, backoff_cap_ms = 0, min_gap_ms = 0;
  int64_t last_push_ms = 0;
  std::mt19937 rng{std::random_device{}()};
  bool handshaken = false;
  int failures = 0;
  std::map<std::string, federation::AdVersion> sent;
  uint64_t seen_version = 0;
  std::string last_logged_error;
  bool interrupted() const { return stop.load() || drain.load(); }
};

namespace {
std::chrono::system_clock::time_point DeadlineIn(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}
}  // namespace

PeerLinks::PeerLinks(GatewayCore* core, std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider)
    : core_(core), provider_(std::move(provider)) {}

PeerLinks::~PeerLinks() { Shutdown(0); }

void PeerLinks::Reconcile() {
  std::lock_guard lock(mu_);
  if (shut_down_) return;
  std::map<std::string, std::string> want;
  for (const auto& p : core_->Peers()) want[p.site] = p.endpoint;
  for (auto it = links_.begin(); it != links_.end();) {
    auto w = want.find(it->first);
    if (w == want.end() || w->second != it->second->endpoint) {
      it->second->stop = true;
      core_->NotifyAll();
      it->second->thread.join();
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [site, endpoint] : want) {
    if (links_.contains(site)) continue;
    auto link = std::make_unique<Link>();
    link->site = site;
    link->endpoint = endpoint;
    Link* raw = link.get();
    link->thread = std::thread([this, raw] { Run(raw); });
    links_[site] = std::move(link);
  }
}

void PeerLinks::Shutdown(int64_t flush_ms) {
  std::lock_guard lock(mu_);
  shut_down_ = true;
  const int64_t deadline = core_->clock()->NowMs() + flush_ms;
  for (auto& [site, link] : links_) {
    link->drain_deadline_ms = deadline;
    link->drain = true;
  }
  core_->NotifyAll();
  for (auto& [site, link] : links_) {
    link->thread.join();
  }
  links_.clear();
}

void PeerLinks::Run(Link* link) {
  const Config& cfg = core_->config();
  // One channel for the link's life: gRPC reconnects it (DefaultChannelArgs
  // bounds the backoff and gives each connection attempt a real deadline).
  link->stub = v1::PeerService::NewStub(DialPeerGateway(
      link->endpoint, provider_, cfg.federation, link->site, 0, core_->revocation()));
  const int64_t interval = cfg.advertise.interval_ms;
  link->rpc_timeout_ms = std::clamp<int64_t>(2 * interval, 500, 5000);
  link->backoff_cap_ms = std::clamp<int64_t>(2 * interval, 1000, 5000);
  // Pushes of relayed ads to one peer are at least this far apart: ads that
  // arrive close together (every origin refreshes each interval) travel in
  // one call instead of one call each, which is most of a large mesh's CPU.
  link->min_gap_ms = std::clamp<int64_t>(interval / 10, 10, 200);
  while (!link->stop) {
    const bool draining = link->drain;
    if (draining && (!link->handshaken || core_->clock()->NowMs() >= link->drain_deadline_ms)) {
      break;
    }
    if (!link->handshaken) Handshake(link);
    if (link->handshaken) Push(link, draining);
    if (draining) break;  // one last push was made (or could not be)
    if (link->failures > 0) {
      // Jittered backoff; a stop or drain request interrupts it.
      const int64_t backoff = BackoffMs(link->failures, link->backoff_cap_ms);
      std::uniform_int_distribution<int64_t> jitter(0, backoff / 5);
      core_->WaitUntil(core_->clock()->NowMs() + backoff + jitter(link->rng),
                       [link] { return link->interrupted(); });
      continue;
    }
    WaitForNews(link);
  }
}

void PeerLinks::Fail(Link* link, const std::string& what, const grpc::Status& st) {
  const std::string err = StrCat(what, ": ", st.error_message());
  core_->RecordError(link->site, err);
  if (err != link->last_logged_error) {
    spdlog::warn("peer {} ({}): {}", link->site, link->endpoint, err);
    link->last_logged_error = err;
  }
  link->handshaken = false;
  link->sent.clear();
  ++link->failures;
}

void PeerLinks::Handshake(Link* link) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(link->rpc_timeout_ms));
  v1::HandshakeRequest req;
  req.set_site(core_->config().site);
  req.set_version(kVersion);
  req.add_capabilities("ads.v1");
  if (core_->signs_ads()) req.add_capabilities("ads.signed.v1");
  v1::HandshakeResponse resp;
  auto st = link->stub->Handshake(&ctx, req, &resp);
  if (!st.ok()) return Fail(link, "handshake", st);
  if (resp.site() != link->site) {
    return Fail(link, "handshake",
                grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                             StrCat("peer says it is ", resp.site())));
  }
  link->handshaken = true;
  link->failures = 0;
  link->last_logged_error.clear();
  spdlog::info("peer {} link up ({}, version {})", link->site, link->endpoint, resp.version());
  if (on_up_) on_up_(link->site);
}

void PeerLinks::Push(Link* link, bool draining) {
  auto ads = core_->Pending(link->site, link->sent);
  if (ads.empty()) return;
  v1::AdvertiseRequest req;
  req.set_site(core_->config().site);
  std::vector<std::pair<std::string, federation::AdVersion>> versions;
  for (auto& stored : ads) {
    versions.emplace_back(stored.ad.origin(), federation::VersionOf(stored.ad));
    if (!stored.signed_ad.ad().empty()) {
      *req.add_signed_ads() = std::move(stored.signed_ad);
    } else {
      *req.add_ads() = std::move(stored.ad);
    }
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(draining ? std::min<int64_t>(link->rpc_timeout_ms, 1000)
                                       : link->rpc_timeout_ms));
  v1::AdvertiseResponse resp;
  const auto t0 = std::chrono::steady_clock::now();
  auto st = link->stub->Advertise(&ctx, req, &resp);
  const double rtt_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) return Fail(link, "advertise", st);
  for (const auto& [origin, version] : versions) link->sent[origin] = version;
  core_->RecordPush(link->site, rtt_ms, req.ByteSizeLong());
  link->last_push_ms = core_->clock()->NowMs();
}

void PeerLinks::WaitForNews(Link* link) {
  const std::string& self = core_->config().site;
  link->seen_version =
      core_->WaitForChange(link->seen_version,
                           core_->clock()->NowMs() + core_->config().advertise.interval_ms,
                           [link] { return link->interrupted(); });
  // This site's own new ad (its capacity moved) goes at once, also while
  // waiting: a stale view makes coordinators plan on GPUs that are gone.
  // Relayed ads wait.
  auto own_news = [&] {
    auto own = link->sent.find(self);
    return own == link->sent.end() || own->second.second < core_->OwnSeq();
  };
  if (!own_news() && core_->clock()->NowMs() < link->last_push_ms + link->min_gap_ms) {
    core_->WaitUntil(link->last_push_ms + link->min_gap_ms,
                     [&] { return link->interrupted() || own_news(); });
  }
}

}  // namespace fedgate::gateway
