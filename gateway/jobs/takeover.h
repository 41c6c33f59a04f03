// The successor loop of coordinator takeover (docs/coordinator_takeover.md):
// for each job whose record this site keeps and whose coordinator it has not
// heard for as long as its place in the succession asks, a pre-vote round
// to every member at once, then a real vote (its own first), then, with a
// majority of signed grants, adoption: the job is written into this site's
// job store at the new term and its coordinator loop drives it from then
// on, its first renewal to each site carrying the grants.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "gateway/jobs/participant.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

class Coordinator;
class GatewayCore;
class ParticipantCalls;

class Takeover {
 public:
  Takeover(GatewayCore* core, Participant* participant, ParticipantCalls* calls,
           Coordinator* coordinator);
  ~Takeover();
  void Start();
  void Stop();
  // One pass over the jobs due (the thread runs it; tests call it).
  void Pass();
  // Elections this site started and won, since start.
  uint64_t elections() const { return elections_; }
  uint64_t won() const { return won_; }
  // Silences a majority confirmed, so that slices here kept running.
  uint64_t silences_confirmed() const { return silences_confirmed_; }

 private:
  // takeover_silence.cc: for each slice past its lease, a pre-vote round to
  // the job's members at once; a majority keeps the slice running until a
  // successor can take over (Participant::ConfirmSilence).
  void ConfirmSilences(const std::vector<Participant::SilenceDue>& due);
  void Elect(const Participant::TakeoverDue& due);
  // Asks every member at once; the answers in member order.
  std::vector<absl::StatusOr<v1::VoteResponse>> AskAll(const Participant::TakeoverDue& due,
                                                       uint64_t term, bool pre_vote);
  // The job as this site's store will hold it, from the kept record.
  absl::StatusOr<JobRecord> Adopted(const Participant::TakeoverDue& due, uint64_t term,
                                    size_t granted);

  GatewayCore* core_;
  Participant* participant_;
  ParticipantCalls* calls_;
  Coordinator* coordinator_;
  std::map<std::string, int64_t> next_try_ms_;  // by job id (loop thread)
  std::atomic<uint64_t> elections_{0}, won_{0}, silences_confirmed_{0};
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fedgate::gateway
