// A job's record before its first world. Peers named witnesses at submit
// keep the queued record, so a job this gateway acknowledged outlives it
// even before it ever ran: they take it over and place it. A placement's
// record goes to a majority of the new world's members, and of the queued
// record's, before any site commits, so a coordinator lost right after its
// decision leaves a majority that holds it. chaos_bench (seed 2028) lost
// one job each way before this: one still PENDING, one whose world's record
// only one of its three members had when its coordinator was lost.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "base/str_cat.h"
#include "federation/coordinator_term.h"
#include "federation/service_spec.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/coordinator_key.h"
#include "gateway/jobs/fan_out.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/participant_calls.h"

namespace fedgate::gateway {

using federation::JobState;

std::vector<std::string> Coordinator::UpPeers() const {
  const auto down = core_->DownPeers();
  std::vector<std::string> up;
  for (const auto& p : core_->Peers()) {
    if (p.last_heard_ms >= 0 && !down.contains(p.site)) up.push_back(p.site);
  }
  return up;
}

void Coordinator::NameQueueWitnesses(JobRecord* job) const {
  const auto& jobs = core_->config().jobs;
  if (jobs.takeover_after_ms <= 0 || federation::IsService(job->spec)) return;
  auto witnesses = federation::ChooseWitnesses(job->id, {core_->config().site}, UpPeers());
  if (witnesses.size() < 2) return;  // no majority to spare: nobody could take it over
  v1::RunPlan queued;
  for (auto& w : witnesses) queued.add_witnesses(std::move(w));
  queued.set_takeover_after_ms(jobs.takeover_after_ms);
  queued.set_takeover_stagger_ms(jobs.takeover_stagger_ms);
  job->run = queued.SerializeAsString();
}

void Coordinator::TellQueueWitnesses(const JobRecord& job, std::function<void()> then) {
  v1::RunPlan run;
  const std::string& self = core_->config().site;
  if (!run.ParseFromString(job.run) || !QueuedRecord(run)) {
    then();
    return;
  }
  std::vector<std::string> others;
  for (auto& m : MembersOf(run, self)) {
    if (m != self) others.push_back(std::move(m));
  }
  if (others.empty()) {
    then();
    return;
  }
  // Shared with the answers: `then` runs once, at a majority or the last answer.
  struct Round {
    std::mutex mu;
    size_t acked = 0, answered = 0;
    bool done = false;
    std::function<void()> then;
  };
  auto round = std::make_shared<Round>();
  round->then = std::move(then);
  const size_t need = federation::Majority(others.size() + 1) - 1;  // this site keeps it
  const size_t total = others.size();
  for (const auto& site : others) {
    v1::SliceStatusRequest req;
    *req.mutable_key() = Key(job, 0);
    req.set_lease_ms(lease_ms_);
    *req.mutable_copy() = CopyOf(job, self, run);
    participants_->SliceStatus(
        site, std::move(req), rpc_timeout_ms(),
        [this, round, need, total, id = job.id, version = job.version,
         site](absl::StatusOr<v1::SliceStatusResponse> r) {
          const bool kept = r.ok() && r->copy_version() >= version;
          if (!kept) {
            spdlog::warn("job {}: witness {} did not take the queued record: {}", id, site,
                         r.ok() ? StrCat("it keeps version ", r->copy_version())
                                : std::string(r.status().message()));
          }
          std::function<void()> fire;
          {
            std::lock_guard lock(round->mu);
            round->acked += kept ? 1 : 0;
            ++round->answered;
            if (!round->done && (round->acked >= need || round->answered == total)) {
              round->done = true;
              fire = std::move(round->then);
              if (round->acked >= need) {
                std::lock_guard q(queue_mu_);
                queue_heard_ms_[id] = core_->clock()->NowMs();
              }
            }
          }
          if (fire) fire();
        });
  }
}

v1::RunPlan Coordinator::QueuedPlanOf(const v1::RunPlan& next, const std::vector<std::string>& queued,
                                      const std::string& self) {
  v1::RunPlan back;
  back.add_members(self);
  for (const auto& m : queued) {
    back.add_members(m);
    back.add_witnesses(m);
  }
  back.set_takeover_after_ms(next.takeover_after_ms());
  back.set_takeover_stagger_ms(next.takeover_stagger_ms());
  *back.mutable_avoided_sites() = next.avoided_sites();
  back.set_preemptions(next.preemptions());
  return back;
}

v1::RunPlan Coordinator::RequeuedPlanOf(const v1::RunPlan& run) const {
  const std::string& self = core_->config().site;
  if (SuccessorsOf(run, self).empty()) return run;
  std::vector<std::string> others;
  for (auto& m : MembersOf(run, self)) {
    if (m != self) others.push_back(std::move(m));
  }
  return QueuedPlanOf(run, others, self);
}

std::string Coordinator::RecordAtMajorities(const JobRecord& job, const v1::RunPlan& run,
                                            const std::vector<std::string>& queued) {
  const std::string& self = core_->config().site;
  const auto members = MembersOf(run, self);
  const bool takeover = !SuccessorsOf(run, self).empty();
  if (!takeover && queued.empty()) return "";
  std::vector<std::string> to;
  if (takeover) {
    for (const auto& m : members) {
      if (m != self) to.push_back(m);
    }
  }
  for (const auto& m : queued) {
    if (m != self && std::find(to.begin(), to.end(), m) == to.end()) to.push_back(m);
  }
  std::vector<absl::StatusOr<v1::SliceStatusResponse>> answers(to.size(),
                                                               absl::UnknownError("no answer"));
  FanOut fan;
  for (size_t i = 0; i < to.size(); ++i) {
    v1::SliceStatusRequest req;
    *req.mutable_key() = Key(job, run.epoch());  // a new world: each site at the run's epoch
    req.set_lease_ms(lease_ms_);
    AttachGrants(job, to[i], &req);
    *req.mutable_copy() = CopyOf(job, self, run);
    // On the placement thread, as Prepare and Commit: their deadline.
    participants_->SliceStatus(to[i], std::move(req), reserve_timeout_ms(),
                               fan.Collect(&answers[i]));
  }
  fan.Wait();
  std::set<std::string> kept = {self};
  for (size_t i = 0; i < to.size(); ++i) {
    const auto& a = answers[i];
    if (a.ok() && a->moved_term() == 0 && a->copy_version() >= job.version) kept.insert(to[i]);
  }
  auto short_of = [&](const std::vector<std::string>& of) -> std::string {
    const size_t n = std::count_if(of.begin(), of.end(), [&](const auto& m) { return kept.contains(m); });
    if (n >= federation::Majority(of.size())) return "";
    std::string list;
    for (const auto& m : of) list += StrCat(list.empty() ? "" : ", ", m);
    return StrCat("the record reached ", n, " of its ", of.size(), " members (", list,
                  "), no majority");
  };
  if (takeover) {
    if (auto why = short_of(members); !why.empty()) return StrCat("not committed: ", why);
  }
  if (!queued.empty()) {
    std::vector<std::string> was = queued;
    was.push_back(self);
    if (auto why = short_of(was); !why.empty()) {
      return StrCat("not committed: of the queued record's members, ", why);
    }
  }
  return "";
}

void Coordinator::AskQueued(RenewWork* w, const std::set<std::string>& down, FanOut* fan) {
  const std::string& self = core_->config().site;
  // Before any reservation, the queued record's members; while one runs,
  // the members it keeps for the decision (no copy: heard, not rewritten).
  const bool reserving = w->job.state == JobState::kReserving;
  if (reserving) {
    w->witnesses.assign(w->run.queued_members().begin(), w->run.queued_members().end());
  } else {
    for (auto& m : MembersOf(w->run, self)) {
      if (m != self) w->witnesses.push_back(std::move(m));
    }
  }
  w->witness_answers.assign(w->witnesses.size(),
                            absl::UnavailableError("not asked: the witness is down"));
  RenewMembers(w, down, fan, reserving ? w->run.epoch() : 0,
               reserving ? nullptr : &queued_acked_[w->job.id]);
}

void Coordinator::NoteQueued(const std::vector<std::unique_ptr<RenewWork>>& work, int64_t sent,
                             int64_t now, std::set<std::string>* queued) {
  for (const auto& w : work) {
    if (StepDownIfMoved(w->job, &w->witness_answers, now)) continue;
    queued->insert(w->job.id);
    GrantsAnswered(*w);
    size_t heard = 1;
    auto& acked = queued_acked_[w->job.id];
    for (size_t i = 0; i < w->witnesses.size(); ++i) {
      const auto& a = w->witness_answers[i];
      if (!a.ok()) continue;
      ++heard;
      acked[w->witnesses[i]] = a->copy_version();
    }
    if (heard >= federation::Majority(w->witnesses.size() + 1)) {
      std::lock_guard lock(queue_mu_);
      queue_heard_ms_[w->job.id] = sent;
    }
    // Told the end if it ends before its first world (a cancel): they would
    // take a job that is over over. Keyed at epoch 0 for the whole queued
    // time; the first world's renewals hand what is left to superseded_.
    std::lock_guard lock(witness_mu_);
    Witnessed& seen = witnessed_[w->job.id];
    seen.key = Key(w->job, 0);
    seen.left = {w->witnesses.begin(), w->witnesses.end()};
    seen.passes = 0;
  }
  std::erase_if(queued_acked_, [&](const auto& e) { return !queued->contains(e.first); });
  std::lock_guard lock(queue_mu_);
  std::erase_if(queue_heard_ms_, [&](const auto& e) {
    return !queued->contains(e.first) && now - e.second >= lease_ms_;
  });
}

void Coordinator::HoldOff(const JobRecord& job, const v1::RunPlan& run) {
  // The late commit comes within a commit's deadline of its own, and its
  // ranks stop by their fence: the bound a silent slice is lost after.
  const int64_t until = core_->clock()->NowMs() + reserve_timeout_ms() +
                        SiteLostAfterMs(run, core_->config().site, lease_ms_, false);
  spdlog::warn("job {}: a commit went unanswered: its next world waits {} ms for that slice to stop",
               job.id, until - core_->clock()->NowMs());
  std::lock_guard lock(queue_mu_);
  held_off_ms_[job.id] = until;
}

bool Coordinator::HeldOff(const std::string& job_id, int64_t now) {
  std::lock_guard lock(queue_mu_);
  const auto it = held_off_ms_.find(job_id);
  if (it == held_off_ms_.end()) return false;
  if (now < it->second) return true;
  held_off_ms_.erase(it);
  return false;
}

bool Coordinator::QueueHeard(const std::string& job_id, int64_t now) {
  std::lock_guard lock(queue_mu_);
  const auto it = queue_heard_ms_.find(job_id);
  return it != queue_heard_ms_.end() && now - it->second < lease_ms_;
}

}  // namespace fedgate::gateway
