// The probed side of link measurement: one-time fedbench listeners opened on
// a peer's request, each serving exactly one session for one token.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "fedgate/v1/federation.pb.h"
#include "transport/engine.h"

namespace fedgate::gateway {

class BenchHost {
 public:
  // How long an opened listener waits for its client.
  static constexpr int kIdleTimeoutMs = 30000;
  static constexpr size_t kMaxOpen = 4;

  ~BenchHost();
  absl::StatusOr<v1::OpenBenchResponse> Open(const std::string& for_site,
                                             const v1::OpenBenchRequest& req);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<transport::BenchServer>> servers_ ABSL_GUARDED_BY(mu_);
};

// 32 hex characters from OpenSSL's CSPRNG.
std::string RandomToken();

}  // namespace fedgate::gateway
