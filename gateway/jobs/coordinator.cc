// The coordinator's life (its two threads), the compare-and-set write, and
// how a run ends: stopped everywhere, failed or retried, preempted, its
// quota released, its usage counted. The scheduling pass, the reservation
// round and the renewal pass have files of their own.
#include "gateway/jobs/coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "base/str_cat.h"
#include "federation/round_verdict.h"
#include "federation/world_restart.h"
#include "gateway/jobs/coordinator_key.h"
#include "gateway/jobs/crash_point.h"
#include "gateway/jobs/fan_out.h"
#include "gateway/jobs/job_story.h"
#include "gateway/jobs/participant_calls.h"

namespace fedgate::gateway {

using federation::JobState;

Coordinator::Coordinator(GatewayCore* core, JobStore* store, ParticipantCalls* participants)
    : core_(core),
      store_(store),
      participants_(participants),
      lease_ms_(core->config().jobs.lease_ms),
      share_(core->config().queue.fair_share_half_life_ms) {}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Start() {
  LoadFairShare();
  RememberEndsToTell();
  placer_ = std::thread([this] { PlaceLoop(); });
  renewer_ = std::thread([this] { RenewLoop(); });
}

void Coordinator::Stop() {
  {
    std::lock_guard lock(wake_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (placer_.joinable()) placer_.join();
  if (renewer_.joinable()) renewer_.join();
  JoinStaging(true);
}

void Coordinator::Sleep(int64_t ms) {
  std::unique_lock lock(wake_mu_);
  wake_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stop_.load(); });
}

bool Coordinator::Save(JobRecord* job) {
  auto st = store_->Save(job, federation::JobActor::kCoordinator);
  if (st.ok()) return true;
  // ABORTED / FAILED_PRECONDITION: someone (a cancel) wrote first. That
  // write stands; the loops see the job anew in their next pass.
  spdlog::info("job {}: not moved to {}: {}", job->id, federation::JobStateName(job->state),
               std::string(st.message()));
  return false;
}

void Coordinator::Tell(const std::string& job_id, JobStoryEvent event) {
  auto st = store_->AppendEvents(job_id, {std::move(event)});
  if (absl::IsFailedPrecondition(st)) {
    spdlog::debug("job {}: event dropped: {}", job_id, std::string(st.message()));
  } else if (!st.ok()) {
    spdlog::warn("job {}: event not stored: {}", job_id, std::string(st.message()));
  }
}

std::vector<int> Coordinator::RemoteFirst(const std::vector<std::string>& sites) const {
  return gateway::RemoteFirst(sites, core_->config().site);
}

void Coordinator::UndoReservation(JobRecord job, const std::string& why) {
  StopRun(job, why);
  // A first world that did not happen: back to the queued record its
  // witnesses keep.
  if (v1::RunPlan run; run.ParseFromString(job.run) && run.queued_members_size() > 0) {
    job.run = QueuedPlanOf(run, {run.queued_members().begin(), run.queued_members().end()},
                           core_->config().site)
                  .SerializeAsString();
  }
  job.attempt = job.attempt > 0 ? job.attempt - 1 : 0;
  job.state = JobState::kPending;
  job.reason = why;
  job.updated_at_unix_ms = core_->clock()->NowMs();
  job.new_events.push_back(StoryEvent(job.updated_at_unix_ms, "reservation_failed", "", why));
  if (Save(&job)) spdlog::warn("job {}: {}", job.id, why);
}

void Coordinator::RecordUsage(const JobRecord& job, const v1::RunPlan& run, int64_t now_ms) {
  const int64_t ran_ms = std::max<int64_t>(0, now_ms - static_cast<int64_t>(run.epoch()));
  std::lock_guard lock(share_mu_);
  share_.Add(job.tenant, job.spec.gpus() * (ran_ms / 1000.0), now_ms);
}

void Coordinator::Preempted(JobRecord job, const v1::RunPlan& run, const std::string& site,
                            const std::string& by) {
  const std::string why = StrCat("preempted by ", by, " at ", site);
  StopRun(job, why);
  RecordUsage(job, run, core_->clock()->NowMs());
  v1::RunPlan next = run;
  next.set_preemptions(run.preemptions() + 1);
  job.run = RequeuedPlanOf(next).SerializeAsString();
  job.updated_at_unix_ms = core_->clock()->NowMs();
  job.state = JobState::kPending;
  job.reason = StrCat(why, "; will run again (preemption does not count against max_attempts)");
  job.new_events.push_back(StoryEvent(job.updated_at_unix_ms, "preempted", site, job.reason));
  if (Save(&job)) spdlog::warn("job {}: {}", job.id, job.reason);
  last_ok_.erase(job.id);
}

void Coordinator::Fail(JobRecord job, const v1::RunPlan& run, const std::string& reason,
                       const std::string& bad_site) {
  StopRun(job, reason);
  RecordUsage(job, run, core_->clock()->NowMs());
  v1::RunPlan next = run;
  if (!bad_site.empty()) next.add_avoided_sites(bad_site);
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = core_->clock()->NowMs();
  const uint32_t max_attempts = std::max<uint32_t>(1, job.spec.max_attempts());
  // Attempts ended by preemption are not the job's fault.
  if (job.attempt >= max_attempts + run.preemptions()) {
    job.state = JobState::kFailed;
    job.reason = StrCat("attempt ", job.attempt, " of ", max_attempts, " failed: ", reason);
  } else {
    job.state = JobState::kPending;
    job.run = RequeuedPlanOf(next).SerializeAsString();
    job.reason = StrCat("attempt ", job.attempt, " failed: ", reason, "; retrying",
                        bad_site.empty() ? "" : StrCat(" without ", bad_site));
  }
  job.new_events.push_back(StoryEvent(job.updated_at_unix_ms,
                                      job.state == JobState::kFailed ? "finished" : "attempt_failed",
                                      bad_site,
                                      job.state == JobState::kFailed ? StrCat("FAILED: ", job.reason)
                                                                     : job.reason));
  if (Save(&job)) spdlog::warn("job {}: {}", job.id, job.reason);
  last_ok_.erase(job.id);
}

void Coordinator::Succeeded(JobRecord job, const v1::RunPlan& run, const std::string& reason,
                            int64_t now) {
  RecordUsage(job, run, now);
  ReleaseQuota(job, run, "the job succeeded");
  job.state = JobState::kSucceeded;
  job.reason = reason;
  job.updated_at_unix_ms = now;
  job.new_events.push_back(StoryEvent(now, "finished", "", StrCat("SUCCEEDED: ", reason)));
  if (Save(&job)) {
    spdlog::info("job {} succeeded", job.id);
    CrashPoint("coordinator-after-success");
  }
  last_ok_.erase(job.id);
}

void Coordinator::ReleaseQuota(const JobRecord& job, const v1::RunPlan& run,
                               const std::string& why) {
  if (!federation::QuotaOnly(run)) return;  // else the slice's site releases it with the slice
  v1::AbortRequest a;
  *a.mutable_key() = Key(job, run.epoch());
  a.set_reason(why);
  participants_->Abort(run.quota_site(), std::move(a), rpc_timeout_ms(),
                       [id = job.id, s = run.quota_site()](absl::StatusOr<v1::AbortResponse> r) {
                         if (!r.ok()) {
                           spdlog::warn("job {}: releasing its quota at {} failed: {} (its lease "
                                        "will release it)",
                                        id, s, std::string(r.status().message()));
                         }
                       });
}

void Coordinator::StopRun(const JobRecord& job, const std::string& reason, int64_t grace_ms) {
  v1::RunPlan run;
  if (job.run.empty() || !run.ParseFromString(job.run)) return;
  std::vector<std::string> sites;
  for (const auto& site : run.sites()) sites.push_back(site.site());
  if (federation::QuotaOnly(run)) sites.push_back(run.quota_site());
  for (int i : RemoteFirst(sites)) {
    const std::string& site = sites[i];
    v1::AbortRequest a;
    *a.mutable_key() = Key(job, i < run.sites_size() ? federation::SiteEpoch(run, i) : run.epoch());
    a.set_reason(reason);
    a.set_grace_ms(grace_ms);
    participants_->Abort(site, std::move(a), rpc_timeout_ms(),
                         [id = job.id, s = site](absl::StatusOr<v1::AbortResponse> r) {
                           if (!r.ok()) {
                             spdlog::warn("job {}: abort at {} failed: {} (its lease will stop it)",
                                          id, s, std::string(r.status().message()));
                           }
                         });
  }
}

void Coordinator::ReadLogAsync(const JobRecord& job, const v1::ReadLogRequest& req,
                               std::function<void(absl::StatusOr<v1::ReadLogResponse>)> done) {
  v1::RunPlan run;
  run.ParseFromString(job.run);
  for (const auto& site : run.sites()) {
    for (const auto& r : site.ranks()) {
      if (r.rank() != req.rank()) continue;
      v1::ReadLogRequest ask = req;
      ask.set_job_id(job.id);
      ask.set_attempt(job.attempt);
      // Logs are not on the lease's clock: a slow disk gets a few seconds.
      participants_->ReadLog(site.site(), std::move(ask), std::max<int64_t>(5000, rpc_timeout_ms()),
                             std::move(done));
      return;
    }
  }
  done(absl::NotFoundError(job.run.empty() ? StrCat("job ", job.id, " has not run yet")
                                           : StrCat("job ", job.id, " has no rank ", req.rank())));
}

absl::StatusOr<v1::ReadLogResponse> Coordinator::ReadLog(const JobRecord& job,
                                                         const v1::ReadLogRequest& req) {
  auto p = std::make_shared<std::promise<absl::StatusOr<v1::ReadLogResponse>>>();
  auto f = p->get_future();
  ReadLogAsync(job, req, [p](absl::StatusOr<v1::ReadLogResponse> r) { p->set_value(std::move(r)); });
  return f.get();
}

}  // namespace fedgate::gateway
