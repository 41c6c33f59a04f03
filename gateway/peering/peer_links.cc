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
};

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
  auto stub = v1::PeerService::NewStub(
      DialPeerGateway(link->endpoint, provider_, cfg.federation, link->site, 0,
                      core_->revocation()));

  const int64_t interval = cfg.advertise_interval_ms;
  const int64_t rpc_timeout = std::clamp<int64_t>(2 * interval, 500, 5000);
  const int64_t backoff_cap = std::clamp<int64_t>(2 * interval, 1000, 5000);
  // Pushes of relayed ads to one peer are at least this far apart: ads that
  // arrive close together (every origin refreshes each interval) travel in
  // one call instead of one call each, which is most of a large mesh's CPU.
  const int64_t min_gap = std::clamp<int64_t>(interval / 10, 10, 200);
  int64_t last_push_ms = 0;
  std::mt19937 rng(std::random_device{}());
  bool handshaken = false;
  int failures = 0;
  std::map<std::string, federation::AdVersion> sent;
  uint64_t seen_version = 0;
  std::string last_logged_error;

  auto fail = [&](const std::string& what, const grpc::Status& st) {
    const std::string err = fedgate::StrCat(what, ": ", st.error_message());
    core_->RecordError(link->site, err);
    if (err != last_logged_error) {
      spdlog::warn("peer {} ({}): {}", link->site, link->endpoint, err);
      last_logged_error = err;
    }
    handshaken = false;
    sent.clear();
    ++failures;
  };
  auto deadline_in = [](int64_t ms) {
    return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
  };

  while (!link->stop) {
    const bool draining = link->drain;
    if (draining && (!handshaken || core_->clock()->NowMs() >= link->drain_deadline_ms)) break;
    if (!handshaken) {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline_in(rpc_timeout));
      v1::HandshakeRequest req;
      req.set_site(cfg.site);
      req.set_version(kVersion);
      req.add_capabilities("ads.v1");
      if (core_->signs_ads()) req.add_capabilities("ads.signed.v1");
      v1::HandshakeResponse resp;
      auto st = stub->Handshake(&ctx, req, &resp);
      if (!st.ok()) {
        fail("handshake", st);
      } else if (resp.site() != link->site) {
        fail("handshake", grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       fedgate::StrCat("peer says it is ", resp.site())));
      } else {
        handshaken = true;
        failures = 0;
        last_logged_error.clear();
        spdlog::info("peer {} link up ({}, version {})", link->site, link->endpoint,
                     resp.version());
        if (on_up_) on_up_(link->site);
      }
    }
    if (handshaken) {
      auto ads = core_->Pending(link->site, sent);
      if (!ads.empty()) {
        v1::AdvertiseRequest req;
        req.set_site(cfg.site);
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
        ctx.set_deadline(deadline_in(draining ? std::min<int64_t>(rpc_timeout, 1000)
                                              : rpc_timeout));
        v1::AdvertiseResponse resp;
        const auto t0 = std::chrono::steady_clock::now();
        auto st = stub->Advertise(&ctx, req, &resp);
        const double rtt_ms = std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - t0)
                                  .count();
        if (st.ok()) {
          for (const auto& [origin, version] : versions) sent[origin] = version;
          core_->RecordPush(link->site, rtt_ms, req.ByteSizeLong());
          last_push_ms = core_->clock()->NowMs();
        } else {
          fail("advertise", st);
        }
      }
    }
    if (draining) break;  // one last push was made (or could not be)
    if (failures > 0) {
      // Jittered backoff; a stop or drain request interrupts it.
      std::uniform_int_distribution<int64_t> jitter(0, BackoffMs(failures, backoff_cap) / 5);
      const int64_t wait = BackoffMs(failures, backoff_cap) + jitter(rng);
      core_->WaitUntil(core_->clock()->NowMs() + wait,
                           [&] { return link->stop.load() || link->drain.load(); });
      continue;
    }
    seen_version = core_->WaitForChange(seen_version, core_->clock()->NowMs() + interval,
                                        [&] { return link->stop.load() || link->drain.load(); });
    // This site's own new ad (its capacity moved) goes at once, also while
    // waiting: a stale view makes coordinators plan on GPUs that are gone.
    // Relayed ads wait.
    auto own_news = [&] {
      auto own = sent.find(cfg.site);
      return own == sent.end() || own->second.second < core_->OwnSeq();
    };
    if (!own_news() && core_->clock()->NowMs() < last_push_ms + min_gap) {
      core_->WaitUntil(last_push_ms + min_gap, [&] {
        return link->stop.load() || link->drain.load() || own_news();
      });
    }
  }
}

}  // namespace fedgate::gateway
