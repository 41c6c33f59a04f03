// The REST/JSON job API on listen.http: HTTPS with the same client
// certificates and roles as gRPC (Boost.Beast over Asio SSL). Bodies are the
// protobuf JSON mapping of the gRPC messages.
//   POST /v1/jobs                    SubmitJobRequest -> SubmitJobResponse
//   GET  /v1/jobs?state=&page_size=&page_token=       -> ListJobsResponse
//   GET  /v1/jobs/{id}                                -> GetJobResponse
//   POST /v1/jobs/{id}:cancel                         -> CancelJobResponse
//   GET  /v1/jobs/{id}/logs?rank=N                    -> the rank's raw output
//   GET  /v1/jobs/{id}/vc                             -> the job's RunPlan (= fedctl vc get)
//   GET  /v1/sites                                    -> GetCapacityResponse
//   GET  /v1/links                                    -> ListLinksResponse
//   GET  /v1/nodes (this site's admins)               -> ListNodesResponse
//   GET  /v1/usage, /v1/quotas                        -> UsageResponse, QuotasResponse
//   ANY  /v1/services/{name}/{path}  -> the service's replicas (docs/services.md;
//        no body limit of its own: the service's max_body)
// Bad JSON or unknown fields: 400; bodies over 1 MiB: 413; refused callers:
// 401/403; all with {"error": {"code", "message"}}.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gateway/config/config.h"

namespace fedgate::gateway {

class GatewayCore;
class JobManager;
class Metrics;
class Participant;
class ServiceController;
class ServiceTokens;

class RestServer {
 public:
  static constexpr size_t kMaxBodyBytes = 1 << 20;
  // Open connections (one thread each) and requests served on one of them.
  static constexpr int kMaxConnections = 512;
  static constexpr int kMaxRequestsPerConnection = 1000;
  // The TLS handshake, and each request's headers and body, must arrive
  // within api.read_timeout (slowloris); handling a request and writing its
  // reply within this.
  static constexpr std::chrono::milliseconds kHandleDeadline{60000};
  // `core` (capacity, links) and `participant` (nodes) may be null: those
  // endpoints then answer 503.
  static absl::StatusOr<std::unique_ptr<RestServer>> Start(const Config& config, JobManager* jobs,
                                                          GatewayCore* core,
                                                          Participant* participant,
                                                          Metrics* metrics,
                                                          ServiceController* services = nullptr);
  // listen.serve: only /v1/services/{name}/{path}, for holders of the
  // service's bearer token (no client certificate asked): 401 without a
  // valid token, 403 with another service's.
  static absl::StatusOr<std::unique_ptr<RestServer>> StartServe(const Config& config,
                                                               GatewayCore* core, Metrics* metrics,
                                                               ServiceController* services,
                                                               ServiceTokens* tokens);
  ~RestServer();
  int port() const;
  void Stop();

 private:
  static absl::StatusOr<std::unique_ptr<RestServer>> Open(const Config& config, JobManager* jobs,
                                                         GatewayCore* core, Participant* participant,
                                                         Metrics* metrics, ServiceController* services,
                                                         ServiceTokens* tokens);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedgate::gateway
