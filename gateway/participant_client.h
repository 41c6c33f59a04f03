// How a coordinator reaches the participant of each site of a job: this
// gateway's own participant directly, a peer's over mTLS gRPC. Every call is
// asynchronous with a deadline, so one silent site never holds a thread or
// delays the calls to other sites. One channel per site, kept while the
// site's endpoint stays the same.
#pragma once

#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/security/tls_certificate_provider.h>

#include "absl/status/statusor.h"
#include "fedgate/v1/federation.grpc.pb.h"

namespace fedgate::gateway {

class GatewayCore;
class Participant;

class ParticipantClient {
 public:
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;

  ParticipantClient(GatewayCore* core, Participant* local,
                    std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider);

  // `done` runs exactly once, on a gRPC thread or (local site, unknown
  // site) on the caller's thread. Each request's `site` is set to ours.
  void Prepare(const std::string& site, v1::PrepareRequest req, int64_t timeout_ms,
               Done<v1::PrepareResponse> done);
  void Commit(const std::string& site, v1::CommitRequest req, int64_t timeout_ms,
              Done<v1::CommitResponse> done);
  void Abort(const std::string& site, v1::AbortRequest req, int64_t timeout_ms,
             Done<v1::AbortResponse> done);
  void SliceStatus(const std::string& site, v1::SliceStatusRequest req, int64_t timeout_ms,
                   Done<v1::SliceStatusResponse> done);
  void ReadLog(const std::string& site, v1::ReadLogRequest req, int64_t timeout_ms,
               Done<v1::ReadLogResponse> done);

  // The same, waiting for the answer.
  template <typename Resp, typename Req>
  absl::StatusOr<Resp> Wait(void (ParticipantClient::*call)(const std::string&, Req, int64_t,
                                                            Done<Resp>),
                            const std::string& site, Req req, int64_t timeout_ms) {
    auto p = std::make_shared<std::promise<absl::StatusOr<Resp>>>();
    auto f = p->get_future();
    (this->*call)(site, std::move(req), timeout_ms,
                  [p](absl::StatusOr<Resp> r) { p->set_value(std::move(r)); });
    return f.get();
  }

  // Waits (at most `timeout_ms`) until no call is in flight: calls end by
  // their deadlines, so shutdown leaves no call (or its memory) behind.
  bool Drain(int64_t timeout_ms);

  // Largest reply accepted from a peer (ReadLog chunks stay well below it).
  static constexpr int kMaxReplyBytes = 16 << 20;

 private:
  std::shared_ptr<v1::PeerService::Stub> Stub(const std::string& site);

  GatewayCore* core_;
  Participant* local_;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  std::mutex mu_;
  std::map<std::string, std::pair<std::string, std::shared_ptr<v1::PeerService::Stub>>> stubs_;
  std::mutex flight_mu_;
  std::condition_variable flight_cv_;
  int in_flight_ = 0;
};

}  // namespace fedgate::gateway
