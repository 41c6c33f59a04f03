// The calls a coordinator makes to the participant of a site, asynchronous
// with a deadline: ParticipantClient sends them (locally or over mTLS gRPC);
// unit tests put in-process fakes in its place.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "fedgate/v1/federation.pb.h"

namespace fedgate::gateway {

class ParticipantCalls {
 public:
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;

  virtual ~ParticipantCalls() = default;
  // `done` runs exactly once, by the deadline at the latest, on any thread
  // (the caller's own included).
  virtual void Prepare(const std::string& site, v1::PrepareRequest req, int64_t timeout_ms,
                       Done<v1::PrepareResponse> done) = 0;
  virtual void Commit(const std::string& site, v1::CommitRequest req, int64_t timeout_ms,
                      Done<v1::CommitResponse> done) = 0;
  virtual void Abort(const std::string& site, v1::AbortRequest req, int64_t timeout_ms,
                     Done<v1::AbortResponse> done) = 0;
  virtual void SliceStatus(const std::string& site, v1::SliceStatusRequest req,
                           int64_t timeout_ms, Done<v1::SliceStatusResponse> done) = 0;
  virtual void ReadLog(const std::string& site, v1::ReadLogRequest req, int64_t timeout_ms,
                       Done<v1::ReadLogResponse> done) = 0;
  // A site chosen without the job's datasets stages them (fakes need not).
  virtual void Stage(const std::string& site, v1::StageRequest req, int64_t timeout_ms,
                     Done<v1::StageResponse> done) {
    (void)site, (void)req, (void)timeout_ms;
    done(absl::UnimplementedError("no staging here"));
  }
  // A member of a job asks another member for its vote (coordinator
  // takeover; fakes need not).
  virtual void Vote(const std::string& site, v1::VoteRequest req, int64_t timeout_ms,
                    Done<v1::VoteResponse> done) {
    (void)site, (void)req, (void)timeout_ms;
    done(absl::UnimplementedError("no votes here"));
  }
};

}  // namespace fedgate::gateway
