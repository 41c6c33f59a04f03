// Confirmed silence, the asking side: every job due is asked at once (one
// pre-vote per member and job, as a successor's round asks), each round
// ending at a majority of grants, so that a member cut off from this site
// delays no job by its timeout beyond the window.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "federation/coordinator_term.h"
#include "gateway/jobs/participant_calls.h"
#include "gateway/jobs/takeover.h"
#include "gateway/peering/core.h"

namespace fedgate::gateway {

void Takeover::ConfirmSilences(const std::vector<Participant::SilenceDue>& due) {
  if (due.empty()) return;
  struct Round {
    std::mutex mu;
    std::condition_variable cv;
    size_t answered = 0, granted = 0;
  };
  const int64_t timeout = std::max<int64_t>(300, core_->config().jobs.lease_ms / 4);
  std::vector<std::shared_ptr<Round>> rounds;
  for (const auto& d : due) {
    auto round = std::make_shared<Round>();
    rounds.push_back(round);
    for (const auto& m : d.members) {
      // "Would you grant this site the next term?": granted only by a
      // member that has not heard the coordinator for a lease either.
      v1::VoteRequest req;
      req.set_job_id(d.job_id);
      req.set_term(d.term + 1);
      req.set_pre_vote(true);
      req.set_silence_only(true);
      calls_->Vote(m, std::move(req), timeout, [round](absl::StatusOr<v1::VoteResponse> a) {
        std::lock_guard lock(round->mu);
        round->granted += a.ok() && a->granted() ? 1 : 0;
        ++round->answered;
        round->cv.notify_all();
      });
    }
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout + 100);
  for (size_t i = 0; i < due.size(); ++i) {
    const size_t majority = federation::Majority(due[i].members.size());
    bool confirmed = false;
    {
      std::unique_lock lock(rounds[i]->mu);
      rounds[i]->cv.wait_until(lock, until, [&] {
        return rounds[i]->granted >= majority || rounds[i]->answered >= due[i].members.size();
      });
      confirmed = rounds[i]->granted >= majority;
    }
    if (confirmed && participant_->ConfirmSilence(due[i].job_id, due[i].heard_ms)) {
      ++silences_confirmed_;
    }
  }
}

}  // namespace fedgate::gateway
