// A job's witnesses (peers named at commit so that a job of fewer than three
// members has a majority to spare; federation::ChooseWitnesses): renewed with
// each pass like a slice site, but with no hold and no ranks, so that they
// keep the job's record and its term, vote, and may take the job over. Told
// when the job ended or left RUNNING, like the job's slice sites, so that
// they forget it rather than take over a job that is over.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/coordinator_key.h"
#include "gateway/jobs/fan_out.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/participant_calls.h"
#include "gateway/jobs/participant_limits.h"

namespace fedgate::gateway {
namespace {
// How many renewal passes a coordinator keeps telling a member that a job
// ended (one that never hears forgets the record after
// participant_limits::kFinishedSliceKeepMs).
constexpr int kEndNoticePasses = 50;
}  // namespace

void Coordinator::AskWitnesses(RenewWork* w, const std::set<std::string>& down, FanOut* fan,
                               std::vector<std::function<void()>>* local) {
  const std::string& self = core_->config().site;
  for (const auto& s : w->run.witnesses()) {
    if (s != self) w->witnesses.push_back(s);
  }
  // A member with no slice and no witness (the lost site while a change of
  // members removes it) is renewed like a witness: alive, it keeps the
  // record and counts towards the majority the change's steps need.
  if (w->run.members_size() > 0) {
    for (const auto& m : MembersOf(w->run, self)) {
      const bool site = std::any_of(w->run.sites().begin(), w->run.sites().end(),
                                    [&](const v1::SiteRun& r) { return r.site() == m; });
      if (m != self && !site &&
          std::find(w->witnesses.begin(), w->witnesses.end(), m) == w->witnesses.end()) {
        w->witnesses.push_back(m);
      }
    }
  }
  w->witness_answers.assign(w->witnesses.size(),
                            absl::UnavailableError("not asked: the witness is down"));
  if (w->witnesses.empty()) return;
  const bool all_here = std::all_of(w->run.sites().begin(), w->run.sites().end(),
                                    [&](const v1::SiteRun& r) { return r.site() == self; });
  if (all_here) {
    // A job that ran only here: its witnesses are asked once this site's
    // own answers are in, and not at all when they say it ended (a short
    // job costs its witnesses nothing).
    local->push_back([this, w, down, fan] {
      // Not after a restart, where the job may have moved: its members say
      // first whether it did (a job nobody may take over cannot move).
      if (!heard_majority_.contains(w->job.id) &&
          !SuccessorsOf(w->run, core_->config().site).empty()) {
        return CallWitnesses(w, down, fan);
      }
      for (int i = 0; i < w->run.sites_size() && i < static_cast<int>(w->answers.size()); ++i) {
        const auto& a = w->answers[i];
        if (a.ok() && (a->state() == v1::SliceStatusResponse::SUCCEEDED ||
                       a->state() == v1::SliceStatusResponse::FAILED)) {
          return;
        }
      }
      CallWitnesses(w, down, fan);
    });
    return;
  }
  CallWitnesses(w, down, fan);
}

void Coordinator::CallWitnesses(RenewWork* w, const std::set<std::string>& down, FanOut* fan) {
  {
    std::lock_guard lock(witness_mu_);
    SupersedeLocked(w->job.id, w->run.epoch());
    Witnessed& seen = witnessed_[w->job.id];
    seen.key = Key(w->job, w->run.epoch());
    seen.left = {w->witnesses.begin(), w->witnesses.end()};
    seen.passes = 0;
  }
  RenewMembers(w, down, fan, w->run.epoch(), &copy_acked_[w->job.id]);
}

void Coordinator::RenewMembers(RenewWork* w, const std::set<std::string>& down, FanOut* fan,
                               uint64_t epoch, const std::map<std::string, uint64_t>* acked) {
  const std::string& self = core_->config().site;
  for (size_t i = 0; i < w->witnesses.size(); ++i) {
    const std::string& site = w->witnesses[i];
    if (down.contains(site)) continue;
    v1::SliceStatusRequest req;
    *req.mutable_key() = Key(w->job, epoch);
    req.set_lease_ms(lease_ms_);
    AttachGrants(w->job, site, &req);
    if (acked != nullptr) {
      if (const auto at = acked->find(site); at == acked->end() || at->second < w->job.version) {
        *req.mutable_copy() = CopyOf(w->job, self, w->run);
      }
    }
    participants_->SliceStatus(site, std::move(req), rpc_timeout_ms(),
                               fan->Collect(&w->witness_answers[i]));
  }
}

void Coordinator::NoteSitesToTell(const RenewWork& w) {
  const std::string& self = core_->config().site;
  // A site that keeps the record of a slice whose end its coordinator did
  // not see (fenced, or ended by itself meanwhile) would take a job that is
  // over over; where nobody may take the job over, nothing is kept for long.
  if (SuccessorsOf(w.run, self).empty()) return;
  std::lock_guard lock(witness_mu_);
  SupersedeLocked(w.job.id, w.run.epoch());
  Witnessed& seen = witnessed_[w.job.id];
  seen.key = Key(w.job, w.run.epoch());
  seen.passes = 0;
  for (const auto& s : w.run.sites()) {
    if (s.site() != self) seen.left.insert(s.site());
  }
}

void Coordinator::SupersedeLocked(const std::string& job_id, uint64_t epoch) {
  auto it = witnessed_.find(job_id);
  if (it == witnessed_.end() || it->second.key.epoch() == epoch) return;
  if (!it->second.left.empty()) {
    Witnessed& old = superseded_[job_id];
    old.key = it->second.key;
    old.left.insert(it->second.left.begin(), it->second.left.end());
    old.passes = 0;
  }
  witnessed_.erase(it);
}

std::vector<std::pair<std::string, Coordinator::Witnessed>> Coordinator::NoticesDueLocked(
    std::map<std::string, Witnessed>* notices, const std::set<std::string>& running) {
  std::vector<std::pair<std::string, Witnessed>> due;
  for (auto it = notices->begin(); it != notices->end();) {
    if (running.contains(it->first)) {
      ++it;
      continue;
    }
    if (it->second.left.empty() || ++it->second.passes > kEndNoticePasses) {
      it = notices->erase(it);
      continue;
    }
    due.emplace_back(it->first, it->second);
    ++it;
  }
  return due;
}

void Coordinator::SendNotice(std::map<std::string, Witnessed>* notices, const std::string& id,
                             const std::string& site, const v1::ReservationKey& key,
                             const v1::JobCopy& copy) {
  v1::SliceStatusRequest req;
  *req.mutable_key() = key;
  *req.mutable_copy() = copy;
  {
    // A member that has not accepted this term yet (it was frozen through
    // the takeover) takes the notice only with the term's grants, and its
    // holds of the job become this coordinator's, so a next attempt can
    // prepare there (a second takeover found a site whose stale holds
    // refused every Prepare of the new coordinator).
    std::lock_guard lock(grants_mu_);
    if (auto it = grants_.find(id); it != grants_.end() && it->second.term == key.term() &&
                                    !it->second.accepted.contains(site)) {
      for (const auto& g : it->second.grants) *req.add_grants() = g;
    }
  }
  participants_->SliceStatus(
      site, std::move(req), rpc_timeout_ms(),
      [this, notices, id, site, epoch = key.epoch()](absl::StatusOr<v1::SliceStatusResponse> r) {
        if (!r.ok()) return;
        std::lock_guard lock(witness_mu_);
        // A late answer about an earlier run (the job back in the queue,
        // then placed again) leaves the new run's member to be told.
        if (auto it = notices->find(id); it != notices->end() && it->second.key.epoch() == epoch) {
          it->second.left.erase(site);
        }
      });
}

void Coordinator::TellEarlierWorlds() {
  std::vector<std::pair<std::string, Witnessed>> to_tell;
  {
    std::lock_guard lock(witness_mu_);
    to_tell = NoticesDueLocked(&superseded_, {});
  }
  const std::string& self = core_->config().site;
  for (auto& [id, seen] : to_tell) {
    auto job = store_->Get(id);
    if (!job.ok()) continue;  // the store is busy: the next pass tries again
    if (!job->has_value() || !(*job)->moved_to.empty()) {
      std::lock_guard lock(witness_mu_);
      superseded_.erase(id);
      continue;
    }
    v1::RunPlan run;
    run.ParseFromString((*job)->run);
    const auto members = MembersOf(run, self);
    for (const auto& site : seen.left) {
      // A member of the current world hears it with the renewals.
      if ((*job)->state == federation::JobState::kRunning &&
          std::find(members.begin(), members.end(), site) != members.end()) {
        std::lock_guard lock(witness_mu_);
        if (auto it = superseded_.find(id); it != superseded_.end()) it->second.left.erase(site);
        continue;
      }
      SendNotice(&superseded_, id, site, seen.key, CopyOf(**job, self, run));
    }
  }
}

void Coordinator::TellMembersTheEnd(const std::set<std::string>& running) {
  TellEarlierWorlds();
  std::vector<std::pair<std::string, Witnessed>> to_tell;
  {
    std::lock_guard lock(witness_mu_);
    to_tell = NoticesDueLocked(&witnessed_, running);
  }
  const std::string& self = core_->config().site;
  for (auto& [id, seen] : to_tell) {
    auto job = store_->Get(id);
    if (!job.ok()) continue;  // the store is busy: the next pass tries again
    // Moved away: the new coordinator renews them. Running again (a new
    // attempt): the next pass renews them.
    if (!job->has_value() || !(*job)->moved_to.empty() ||
        (*job)->state == federation::JobState::kRunning) {
      std::lock_guard lock(witness_mu_);
      if (!job->has_value() || !(*job)->moved_to.empty()) witnessed_.erase(id);
      continue;
    }
    v1::RunPlan run;
    run.ParseFromString((*job)->run);
    for (const auto& site : seen.left) {
      SendNotice(&witnessed_, id, site, seen.key, CopyOf(**job, self, run));
    }
  }
}

void Coordinator::RememberEndsToTell() {
  const std::string& self = core_->config().site;
  auto ended = store_->ListEndedSince(core_->clock()->NowMs() -
                                      participant_limits::kFinishedSliceKeepMs);
  if (!ended.ok()) {
    spdlog::error("cannot read the jobs that ended lately (their members are not told again): {}",
                  std::string(ended.status().message()));
    return;
  }
  size_t told = 0;
  std::lock_guard lock(witness_mu_);
  for (const auto& job : *ended) {
    v1::RunPlan run;
    if (!run.ParseFromString(job.run) || SuccessorsOf(run, self).empty()) continue;
    Witnessed& seen = witnessed_[job.id];
    seen.key = Key(job, run.epoch());
    for (const auto& s : run.sites()) {
      if (s.site() != self) seen.left.insert(s.site());
    }
    for (const auto& s : run.witnesses()) {
      if (s != self) seen.left.insert(s);
    }
    if (seen.left.empty()) {
      witnessed_.erase(job.id);
    } else {
      ++told;
    }
  }
  if (told > 0) spdlog::info("telling the members of {} job(s) that ended lately again", told);
}

}  // namespace fedgate::gateway
