// In-process stand-ins for the coordinator's calls to participants: each
// site's real Participant is called directly on the caller's thread, and a
// site (or one method of it) can be frozen, so that its calls wait until the
// test thaws them or lets their deadlines pass. Races between a coordinator
// and a silent site replay deterministically.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "gateway/jobs/participant.h"
#include "gateway/jobs/participant_calls.h"

namespace fedgate::testing {

class FakeParticipants final : public gateway::ParticipantCalls {
 public:
  // `from`: the coordinator's site, as the participants will see it.
  explicit FakeParticipants(std::string from) : from_(std::move(from)) {}

  void AddSite(const std::string& site, gateway::Participant* p);
  // Calls of `method` ("" = every method) to `site` wait from now on.
  void Freeze(const std::string& site, const std::string& method = "");
  // Delivers what waited, in order, and stops freezing the site.
  void Thaw(const std::string& site);
  // Answers what waited with DEADLINE_EXCEEDED (never delivered); stays frozen.
  void Expire(const std::string& site);
  // Waits (5 s at most, real time) until `n` calls to `site` wait.
  bool WaitForQueued(const std::string& site, size_t n);
  // Calls of `method` that reached the participant of `site`.
  int Delivered(const std::string& method, const std::string& site);
  // Waits (5 s at most, real time) until `n` such calls have reached it:
  // calls to several sites are issued one after another.
  bool WaitForDelivered(const std::string& method, const std::string& site, int n);

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

 private:
  struct Waiting {
    std::function<void()> deliver;
    std::function<void()> expire;
  };
  // Runs `call` on the site's participant now, or queues it if frozen.
  template <typename Resp>
  void Route(const std::string& method, const std::string& site,
             std::function<absl::StatusOr<Resp>(gateway::Participant*, const std::string&)> call,
             Done<Resp> done);

  const std::string from_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, gateway::Participant*> sites_;
  std::map<std::string, std::set<std::string>> frozen_;  // site -> methods ("" = all)
  std::map<std::string, std::deque<Waiting>> queued_;
  std::map<std::string, int> delivered_;  // "method site"
};

}  // namespace fedgate::testing
