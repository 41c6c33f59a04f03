// The renewal pass: every fifth of the lease, every site of every running
// job is asked for its slice's state at once (which renews the slice's
// lease); the verdict on one job's answers is federation::JudgeRenewal, and
// Judge acts on it: re-sends lost commits, ends, retries or fails the job.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <set>

#include "base/str_cat.h"
#include "federation/round_verdict.h"
#include "federation/world_restart.h"
#include "gateway/jobs/coordinator.h"
#include "federation/service_spec.h"
#include "gateway/jobs/coordinator_key.h"
#include "gateway/jobs/fan_out.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/job_story.h"
#include "gateway/jobs/participant_calls.h"

namespace fedgate::gateway {

using federation::JobState;
using federation::RenewVerdict;

void Coordinator::RenewLoop() {
  while (!stop_) {
    const int64_t t0 = core_->clock()->NowMs();
    RenewPass();
    const int64_t spent = core_->clock()->NowMs() - t0;
    // A job just taken over is renewed at once (its sites hear the new
    // coordinator before a later successor's turn comes).
    std::unique_lock lock(wake_mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(20, lease_ms_ / 5 - spent)),
                   [&] { return stop_.load() || std::exchange(renew_now_, false); });
  }
}

void Coordinator::RenewPass() {
  auto jobs = store_->ListAllActive();
  if (!jobs.ok()) return;
  const auto down = core_->DownPeers();
  std::vector<std::unique_ptr<RenewWork>> work;
  FanOut fan;
  std::vector<std::function<void()>> local;  // inline calls, after the remote ones are out
  const int64_t sent = core_->clock()->NowMs();
  std::vector<std::unique_ptr<RenewWork>> queued_work;
  for (auto& j : *jobs) {
    // A service runs no slice of its own: its replicas are jobs.
    if (federation::IsService(j.spec)) continue;
    if (j.state == JobState::kPending || j.state == JobState::kReserving) {
      auto w = std::make_unique<RenewWork>();
      w->job = std::move(j);
      w->run.ParseFromString(w->job.run);
      const bool queued = w->job.state == JobState::kPending ? QueuedRecord(w->run)
                                                             : w->run.queued_members_size() > 0;
      if (!queued) continue;
      AskQueued(w.get(), down, &fan);
      queued_work.push_back(std::move(w));
      continue;
    }
    if (j.state != JobState::kRunning) continue;
    auto w = std::make_unique<RenewWork>();
    w->job = std::move(j);
    w->run.ParseFromString(w->job.run);
    AskRenewal(w.get(), down, &fan, &local);
    AskWitnesses(w.get(), down, &fan, &local);
    work.push_back(std::move(w));
  }
  for (auto& call : local) call();
  fan.Wait();
  const int64_t now = core_->clock()->NowMs();
  std::set<std::string> running;
  for (auto& w : work) {
    if (StepDownIfMoved(w->job, &w->answers, now) ||
        StepDownIfMoved(w->job, &w->witness_answers, now)) {
      continue;
    }
    running.insert(w->job.id);
    NoteSitesToTell(*w);
    GrantsAnswered(*w);
    NoteContacts(*w, sent, now);
    if (!HearsMajority(*w, sent)) continue;
    auto& acked = copy_acked_[w->job.id];
    for (int i = 0; i < w->run.sites_size() && i < static_cast<int>(w->answers.size()); ++i) {
      if (w->answers[i].ok()) acked[w->run.sites(i).site()] = w->answers[i]->copy_version();
    }
    for (size_t i = 0; i < w->witnesses.size(); ++i) {
      if (w->witness_answers[i].ok()) acked[w->witnesses[i]] = w->witness_answers[i]->copy_version();
    }
    if (!AdvanceMemberChange(w.get(), now)) continue;
    Judge(std::move(w->job), w->run, w->answers, now);
  }
  std::set<std::string> active = running;  // queued ones are told nothing yet
  NoteQueued(queued_work, sent, now, &active);
  std::erase_if(last_ok_, [&](const auto& e) { return !running.contains(e.first); });
  std::erase_if(heard_majority_, [&](const auto& id) { return !running.contains(id); });
  std::erase_if(copy_acked_, [&](const auto& e) { return !running.contains(e.first); });
  std::erase_if(contact_, [&](const auto& e) { return !running.contains(e.first); });
  std::erase_if(copy_asks_, [&](const auto& e) { return !running.contains(e.first); });
  TellMembersTheEnd(active);
  ++renew_passes_;
}

void Coordinator::AskRenewal(RenewWork* w, const std::set<std::string>& down, FanOut* fan,
                             std::vector<std::function<void()>>* local) {
  const int asked = w->run.sites_size() + (federation::QuotaOnly(w->run) ? 1 : 0);
  w->answers.assign(asked, absl::UnavailableError("not asked: the site is down"));
  // A quota-only home whose job ran only here: ask it after this site's
  // own answers (inline, no wait), and not at all when they say the job
  // ended (it is released next). A short job then costs the home one
  // call fewer; a job still running, or never committed, asks as before.
  const bool all_here = std::all_of(w->run.sites().begin(), w->run.sites().end(),
                                    [&](const v1::SiteRun& r) {
                                      return r.site() == core_->config().site;
                                    });
  const bool home_after_local = federation::QuotaOnly(w->run) && all_here;
  for (int i = 0; i < asked; ++i) {
    const std::string& site =
        i < w->run.sites_size() ? w->run.sites(i).site() : w->run.quota_site();
    if (down.contains(site)) continue;
    // Without a majority last pass, this site's own slice is not renewed
    // either: it fences like any other, so a coordinator cut off from its
    // job's members does not run ranks beside a successor's.
    if (site == core_->config().site && frozen_.contains(w->job.id)) continue;
    if (home_after_local && i == w->run.sites_size()) {
      bool ended = true;
      for (int k = 0; k < w->run.sites_size(); ++k) {
        const auto& a = w->answers[k];
        ended = ended && a.ok() &&
                (a->state() == v1::SliceStatusResponse::SUCCEEDED ||
                 a->state() == v1::SliceStatusResponse::FAILED);
      }
      if (ended) continue;
    }
    v1::SliceStatusRequest req;
    *req.mutable_key() =
        Key(w->job, i < w->run.sites_size() ? federation::SiteEpoch(w->run, i) : w->run.epoch());
    req.set_lease_ms(lease_ms_);
    if (i < w->run.sites_size()) {
      AttachGrants(w->job, site, &req);
      const auto& acked = copy_acked_[w->job.id];
      const auto at = acked.find(site);
      if (at == acked.end() || at->second < w->job.version) {
        *req.mutable_copy() = CopyOf(w->job, core_->config().site, w->run);
      }
    }
    // A checkpoint the new world needs, asked of its fastest holder.
    if (auto asks = copy_asks_.find(w->job.id); asks != copy_asks_.end()) {
      if (auto to = asks->second.find(site); to != asks->second.end()) {
        req.set_checkpoint_step(w->run.replacing().checkpoint_step());
        for (const auto& s : to->second) req.add_checkpoint_to(s);
      }
    }
    auto call = [this, site, req = std::move(req), done = fan->Collect(&w->answers[i])]() mutable {
      participants_->SliceStatus(site, std::move(req), rpc_timeout_ms(), std::move(done));
    };
    if (site == core_->config().site && !home_after_local) {
      local->push_back(std::move(call));
    } else {
      call();  // remote, or local ahead of its home (inline: answered on return)
    }
  }
}

void Coordinator::Judge(JobRecord job, const v1::RunPlan& run,
                        const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                        int64_t now) {
  // A site is lost only once its slice has surely stopped (past its fence).
  const int64_t lost_after = LostAfterMs(job, run, answers);
  if (job.spec.recovery() == "replace" && !federation::PastTimeLimit(job.spec, run, now)) {
    JudgeReplace(std::move(job), run, answers, now, lost_after);
    return;
  }
  const RenewVerdict v = federation::JudgeRenewal(job.spec, job.attempt, run, answers, now,
                                                  lost_after, &last_ok_[job.id]);
  int64_t worst = worst_gap_ms_.load();
  while (v.worst_gap_ms > worst && !worst_gap_ms_.compare_exchange_weak(worst, v.worst_gap_ms)) {
  }
  if (v.kind == RenewVerdict::kTimeLimit) {
    StopRun(job, StrCat("ran past its time_limit of ", job.spec.time_limit()),
            core_->config().preemption.grace_ms);
    RecordUsage(job, run, now);
    job.state = JobState::kFailed;
    job.reason = v.reason;
    job.updated_at_unix_ms = now;
    job.new_events.push_back(StoryEvent(now, "finished", "", StrCat("FAILED: ", v.reason)));
    if (Save(&job)) spdlog::warn("job {}: {}", job.id, job.reason);
    last_ok_.erase(job.id);
    return;
  }
  if (v.recommit_quota) {
    spdlog::info("job {}: re-sending the quota commit to {}", job.id, run.quota_site());
    if (auto c = CommitAll(job, run, {}, QuotaCommit::kAwait); !c.ok()) {
      Fail(job, run, std::string(c.message()), "");
      return;
    }
  }
  switch (v.kind) {
    case RenewVerdict::kFailed:
      Fail(job, run, v.reason, v.bad_site);
      return;
    case RenewVerdict::kPreempted:
      Preempted(job, run, v.preempted_at, v.preempted_by);
      return;
    case RenewVerdict::kSucceeded:
      Succeeded(job, run, v.reason, now);
      return;
    case RenewVerdict::kRunning:
    case RenewVerdict::kTimeLimit:
      break;
  }
  if (v.recommit.empty()) return;
  for (int i : v.recommit) {
    spdlog::info("job {}: re-sending the commit to {}", job.id, run.sites(i).site());
  }
  if (auto c = CommitAll(job, run, v.recommit, QuotaCommit::kNone); !c.ok()) {
    HoldOff(job, run);
    Fail(job, run, std::string(c.message()), "");
  }
}

}  // namespace fedgate::gateway
