// The plaintext ops endpoint: /healthz, /readyz and /metrics (Boost.Beast).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace fedgate::gateway {

class Metrics;

class OpsServer {
 public:
  // Binds `endpoint` (HOST:PORT, port 0 picks one) and serves on a thread.
  static absl::StatusOr<std::unique_ptr<OpsServer>> Start(const std::string& endpoint,
                                                           Metrics* metrics,
                                                           std::function<std::string()> not_ready);
  ~OpsServer();
  int port() const { return port_; }
  void Stop();

 private:
  struct Impl;
  explicit OpsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace fedgate::gateway
