#include "gateway/peering/prober.h"
#include "base/host_port.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "base/str_cat.h"
#include "fedgate/v1/federation.grpc.pb.h"
#include "gateway/peering/core.h"
#include "gateway/ops/metrics.h"
#include "gateway/security/tls.h"
#include "transport/engine.h"

namespace fedgate::gateway {

Prober::Prober(GatewayCore* core, Metrics* metrics, std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider)
    : core_(core), metrics_(metrics), provider_(std::move(provider)) {}

Prober::~Prober() { Stop(); }

void Prober::Start() { thread_ = std::thread([this] { Loop(); }); }

void Prober::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    for (auto& r : queue_) {
      if (r.done) r.done(absl::CancelledError("gateway shutting down"));
    }
    queue_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prober::Enqueue(const std::string& site) {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    for (const auto& r : queue_) {
      if (r.site == site) return;
    }
    queue_.push_back({site, nullptr});
  }
  cv_.notify_all();
}

void Prober::ProbeAsync(const std::string& site, Done done) {
  {
    std::lock_guard lock(mu_);
    if (!stop_) {
      queue_.push_back({site, std::move(done)});
      done = nullptr;
    }
  }
  if (done) {
    done(absl::CancelledError("gateway shutting down"));
    return;
  }
  cv_.notify_all();
}

absl::StatusOr<v1::Link> Prober::ProbeNow(const std::string& site) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<v1::Link>>>();
  auto fut = promise->get_future();
  ProbeAsync(site, [promise](const absl::StatusOr<v1::Link>& l) { promise->set_value(l); });
  return fut.get();
}

int64_t Prober::NextDue(int64_t now_ms) {
  // +-10% jitter so a federation's probes do not line up.
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const int64_t interval = core_->config().bench.probe_interval_ms;
  std::uniform_int_distribution<int64_t> jitter(-interval / 10, interval / 10);
  return now_ms + interval + jitter(rng);
}

void Prober::Loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const int64_t now = core_->clock()->NowMs();
    // Periodic probes of every approved peer.
    lock.unlock();
    auto peers = core_->Peers();
    lock.lock();
    for (const auto& p : peers) {
      auto [it, inserted] = next_periodic_ms_.try_emplace(p.site, NextDue(now));
      if (!inserted && it->second <= now) {
        it->second = NextDue(now);
        bool queued = false;
        for (const auto& r : queue_) queued = queued || r.site == p.site;
        if (!queued) queue_.push_back({p.site, nullptr});
      }
    }
    if (queue_.empty()) {
      cv_.wait_for(lock, std::chrono::seconds(1));
      continue;
    }
    Request req = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    auto link = Probe(req.site);
    metrics_->Inc("fedgate_probes_total", {{"result", link.ok() ? "ok" : "error"}});
    if (link.ok()) {
      core_->RecordLink(*link);
      spdlog::info("probe {} -> {}: {:.4f} Gbit/s, latency {:.3f} ms", link->from(), link->to(),
                   link->gbps(), link->latency_ms());
    } else {
      spdlog::warn("probe of {} failed: {}", req.site, std::string(link.status().message()));
    }
    if (req.done) req.done(link);
    lock.lock();
    next_periodic_ms_[req.site] = NextDue(core_->clock()->NowMs());
  }
}

absl::StatusOr<v1::Link> Prober::Probe(const std::string& site) {
  const Config& cfg = core_->config();
  std::string endpoint;
  for (const auto& p : core_->Peers()) {
    if (p.site == site) endpoint = p.endpoint;
  }
  if (endpoint.empty()) {
    return absl::NotFoundError(StrCat("\"", site, "\" is not an approved peer"));
  }
  auto stub = v1::PeerService::NewStub(DialPeerGateway(endpoint, provider_, cfg.federation, site, 0,
                                                                core_->revocation()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::OpenBenchRequest req;
  req.set_site(cfg.site);
  req.set_transport("tcp");
  req.set_streams(1);
  v1::OpenBenchResponse resp;
  auto st = stub->OpenBench(&ctx, req, &resp);
  if (!st.ok()) {
    return absl::UnavailableError(StrCat("peer ", site, " did not open a bench listener: ",
                                         st.error_message()));
  }
  const std::string host = SplitHostPort(endpoint).host;
  transport::RunOptions ro;
  ro.target = host.find(':') == std::string::npos ? StrCat(host, ":", resp.port())
                                                  : StrCat("[", host, "]:", resp.port());
  ro.token = resp.token();
  ro.transport = "tcp";
  ro.streams = 1;
  ro.sizes = {1 << 20};
  ro.duration_ms = static_cast<uint32_t>(cfg.bench.probe_duration_ms);
  ro.warmup_ms = static_cast<uint32_t>(std::min<int64_t>(500, cfg.bench.probe_duration_ms / 3));
  ro.latency_only_size = 4096;
  ro.latency_iterations = 20;
  auto report = transport::RunBenchmark(ro);
  if (!report.ok()) return report.status();
  v1::Link link;
  link.set_from(cfg.site);
  link.set_to(site);
  link.set_gbps(report->gbps());
  link.set_latency_ms(report->results(0).latency_us_p50() / 1000.0);
  link.set_method("tcp");
  link.set_streams(1);
  link.set_measured_at_unix_ms(core_->clock()->NowMs());
  return link;
}

}  // namespace fedgate::gateway
