// The scheduling pass: the queue policy fedsim replays picks which pending
// jobs to try, and each is reserved by the reservation round
// (coordinator_reserve.cc). Also the fair-share usage it ranks tenants by.
#include <spdlog/spdlog.h>

#include <chrono>
#include <set>
#include <utility>

#include "base/str_cat.h"
#include "federation/duration.h"
#include "federation/saturating.h"
#include "federation/scheduler.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/job_copy.h"
#include "federation/service_spec.h"

namespace fedgate::gateway {
namespace {
constexpr int64_t kPlacePassMs = 250;
}  // namespace

using federation::JobState;

void Coordinator::LoadFairShare() {
  // The decayed usage survives a restart: it is rebuilt from the jobs that
  // ended here (their last attempt, from its placement to its end).
  size_t jobs = 0;
  for (const char* state : {"SUCCEEDED", "FAILED", "CANCELLED"}) {
    std::string after;
    for (;;) {
      auto page = store_->List("", state, after, 1000);
      if (!page.ok() || page->empty()) break;
      for (const auto& j : *page) {
        v1::RunPlan run;
        if (j.run.empty() || !run.ParseFromString(j.run) || run.epoch() == 0) continue;
        const int64_t ran_ms = std::max<int64_t>(0, j.updated_at_unix_ms - static_cast<int64_t>(run.epoch()));
        std::lock_guard lock(share_mu_);
        share_.Add(j.tenant, j.spec.gpus() * (ran_ms / 1000.0), j.updated_at_unix_ms);
        ++jobs;
      }
      after = page->back().id;
    }
  }
  if (jobs > 0) spdlog::info("fair share: usage of {} ended job(s) loaded", jobs);
}

federation::FairShare Coordinator::CurrentShare() {
  federation::FairShare share;
  {
    std::lock_guard lock(share_mu_);
    share = share_;
  }
  // Tenant weights come from their home sites' ads.
  for (const auto& q : core_->Quotas()) {
    if (q.weight() > 0) share.SetWeight(q.tenant(), q.weight());
  }
  return share;
}

void Coordinator::PlaceLoop() {
  while (!stop_) {
    PlacePass();
    // A world restart ready for its replacement or its new world wakes it.
    std::unique_lock lock(wake_mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(kPlacePassMs),
                   [&] { return stop_.load() || std::exchange(place_now_, false); });
  }
}

void Coordinator::PlacePass() {
  // The queue policy fedsim replays (federation/scheduler.h): guaranteed
  // before spot, shortest per GPU with aging, fair-share ties, EASY backfill.
  federation::Scheduler sched(federation::SchedPolicy::kFedgate);
  auto jobs = store_->ListAllActive();
  if (!jobs.ok()) return;
  std::map<std::string, JobRecord> pending;
  std::vector<federation::RunningJob> running;
  std::vector<JobRecord> replacing;
  const int64_t pass_start = core_->clock()->NowMs();
  for (auto& j : *jobs) {
    // A service is never placed itself: the service controller keeps its
    // replicas, which are jobs, running.
    if (federation::IsService(j.spec)) continue;
    auto est = federation::ParseDurationMs(j.spec.estimated_duration());
    const int64_t est_ms = est.ok() ? *est : 3600000;
    if (j.state == JobState::kReserving) {
      // Only this thread reserves and it finishes every reservation it
      // starts (or hands it to a staging thread), so a job left RESERVING
      // otherwise is one a crash interrupted.
      if (IsStaging(j.id)) continue;
      UndoReservation(j, "reservation interrupted by a coordinator restart; will retry");
    } else if (j.state == JobState::kPending) {
      // A queued record is placed only by a coordinator a majority of its
      // members heard within the lease: one they may have voted out since
      // (a restart, a cut) learns so at its next renewal pass instead.
      if (v1::RunPlan queued; queued.ParseFromString(j.run) && QueuedRecord(queued) &&
                              !QueueHeard(j.id, pass_start)) {
        Wait(&j, "waiting for a majority of the job's members to hear its coordinator", pass_start);
        continue;
      }
      if (HeldOff(j.id, pass_start)) {
        Wait(&j, StrCat(j.reason.substr(0, j.reason.find("; waiting for")),
                        "; waiting for its last attempt's slices to stop (a commit went unanswered)"),
             pass_start);
        continue;
      }
      federation::SchedJob q{j.id, j.tenant, j.spec.gpus(), est_ms, j.spec.priority() == "spot",
                             j.created_at_unix_ms, {}};
      q.models.assign(j.spec.gpu_models().begin(), j.spec.gpu_models().end());
      sched.Enqueue(q);
      std::string id = j.id;
      pending.emplace(std::move(id), std::move(j));  // moved: a pass holds one copy of each job
    } else if (j.state == JobState::kRunning) {
      // Its estimated end, from the reservation's epoch (the time it was
      // placed, in ms); GPUs of unknown model count for any waiting job.
      v1::RunPlan run;
      run.ParseFromString(j.run);
      // A world restart's replacement slices and new world go before any
      // new job: the survivors' GPUs wait for them.
      if (run.has_replacing() && (run.replacing().stage() == v1::Replacement::RESERVING ||
                                  run.replacing().stage() == v1::Replacement::RELAUNCH)) {
        replacing.push_back(j);
      }
      running.push_back({federation::SatAdd(static_cast<int64_t>(run.epoch()), est_ms),
                         {{"*", j.spec.gpus()}}});
    }
  }
  if (pending.empty() && replacing.empty()) return;
  // Only this site, its approved peers and sites that accept jobs from the
  // whole federation can be asked to run ranks: every other known site is
  // avoided. Computed once per pass.
  std::vector<std::string> unreachable;
  federation::GpusByModel free;
  const std::set<std::string> reachable = core_->SitesForJobs();
  const auto capacity = core_->Capacity();
  for (const auto& s : capacity.sites()) {
    if (!reachable.contains(s.site())) unreachable.push_back(s.site());
  }
  for (auto& j : replacing) {
    if (stop_) return;
    DriveReplacement(std::move(j), unreachable);
  }
  if (pending.empty()) return;
  for (const auto& s : capacity.sites()) {
    if (!reachable.contains(s.site())) continue;
    if (s.state() == v1::SiteCapacity::down) continue;
    // Preemptible GPUs count too: a guaranteed job may take them (a spot
    // job tried on them just finds no placement).
    for (const auto& m : s.models()) free[m.model()] += m.free_gpus() + m.preemptible_gpus();
  }
  const int64_t now = core_->clock()->NowMs();
  federation::FairShare share = CurrentShare();
  auto result = sched.Pass(
      now, free, std::move(running),
      [&](const federation::SchedJob& q) -> std::optional<federation::GpusByModel> {
        if (stop_ || !TryStart(pending[q.id], unreachable)) return std::nullopt;
        return federation::GpusByModel{{"*", q.gpus}};
      },
      &share);
  // Jobs that would fit but would delay the reserved head job say so.
  for (const auto& id : result.held_back) {
    Wait(&pending[id],
         StrCat("waiting: starting now would delay job ", result.reserved_for.value_or("?"),
                ", which holds the reservation (backfill)"),
         now);
  }
}

}  // namespace fedgate::gateway
