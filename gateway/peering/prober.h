// Measures links from this site to its peers: on peer-up, every
// bench.probe_interval (jittered), and on demand. One probe at a time, so
// probes from one site never measure each other.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/security/tls_certificate_provider.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "fedgate/v1/bench.pb.h"

namespace fedgate::gateway {

class GatewayCore;
class Metrics;

class Prober {
 public:
  Prober(GatewayCore* core, Metrics* metrics, std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider);
  ~Prober();
  void Start();
  void Stop();

  // Queues a probe of `site` (dropped if one is already queued).
  void Enqueue(const std::string& site);
  using Done = std::function<void(const absl::StatusOr<v1::Link>&)>;
  // Queues a probe; `done` runs on the prober's thread (or with CANCELLED at
  // Stop), always before Stop() returns.
  void ProbeAsync(const std::string& site, Done done);
  // Queues a probe and waits for its result.
  absl::StatusOr<v1::Link> ProbeNow(const std::string& site);

 private:
  struct Request {
    std::string site;
    Done done;
  };
  void Loop();
  absl::StatusOr<v1::Link> Probe(const std::string& site);
  int64_t NextDue(int64_t now_ms);

  GatewayCore* core_;
  Metrics* metrics_;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> next_periodic_ms_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fedgate::gateway
