// How a coordinator reaches the participant of each site of a job: this
// gateway's own participant directly, a peer's over mTLS gRPC. Every call is
// asynchronous with a deadline, so one silent site never holds a thread or
// delays the calls to other sites. One channel per site, kept while the
// site's endpoint stays the same.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/security/tls_certificate_provider.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "fedgate/v1/federation.grpc.pb.h"
#include "gateway/jobs/participant_calls.h"

namespace fedgate::gateway {

class GatewayCore;
class Participant;

class ParticipantClient final : public ParticipantCalls {
 public:
  ParticipantClient(GatewayCore* core, Participant* local,
                    std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider);

  // Each request's `site` is set to ours. Calls to this site go to the local
  // participant directly (`done` on the caller's thread), as does a refusal
  // of an unknown site.
  void Prepare(const std::string& site, v1::PrepareRequest req, int64_t timeout_ms,
               Done<v1::PrepareResponse> done) override;
  void Commit(const std::string& site, v1::CommitRequest req, int64_t timeout_ms,
              Done<v1::CommitResponse> done) override;
  void Abort(const std::string& site, v1::AbortRequest req, int64_t timeout_ms,
             Done<v1::AbortResponse> done) override;
  void SliceStatus(const std::string& site, v1::SliceStatusRequest req, int64_t timeout_ms,
                   Done<v1::SliceStatusResponse> done) override;
  void ReadLog(const std::string& site, v1::ReadLogRequest req, int64_t timeout_ms,
               Done<v1::ReadLogResponse> done) override;

  // A site's usage records (not part of a job's lifecycle).
  void ListUsage(const std::string& site, v1::ListUsageRequest req, int64_t timeout_ms,
                 Done<v1::ListUsageResponse> done);
  void Stage(const std::string& site, v1::StageRequest req, int64_t timeout_ms,
             Done<v1::StageResponse> done) override;
  void Vote(const std::string& site, v1::VoteRequest req, int64_t timeout_ms,
            Done<v1::VoteResponse> done) override;

  // Waits (at most `timeout_ms`) until no call is in flight: calls end by
  // their deadlines, so shutdown leaves no call (or its memory) behind.
  bool Drain(int64_t timeout_ms);

  // Largest reply accepted from a peer (ReadLog chunks stay well below it).
  static constexpr int kMaxReplyBytes = 16 << 20;

  // The channel to a site's gateway (nullptr when it is not reachable for
  // jobs); checkpoint copies share it.
  std::shared_ptr<v1::PeerService::Stub> Stub(const std::string& site);

 private:

  GatewayCore* core_;
  Participant* local_;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  std::mutex mu_;
  std::map<std::string, std::pair<std::string, std::shared_ptr<v1::PeerService::Stub>>> stubs_
      ABSL_GUARDED_BY(mu_);
  std::mutex flight_mu_;
  std::condition_variable flight_cv_;
  int in_flight_ ABSL_GUARDED_BY(flight_mu_) = 0;
};

}  // namespace fedgate::gateway
