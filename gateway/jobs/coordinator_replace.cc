// recovery: replace. A lost slice costs one slice, not the job: the other
// slices keep their GPUs (their ranks are halted, the holds stay), the lost
// one is reserved again elsewhere with the two-phase reservation (committed
// parked, no rank yet), every site of the new world receives the newest
// checkpoint, and then every rank starts again as world restart + 1. The
// verdict on each renewal pass is pure (federation/world_restart); the
// renewal thread acts on it, the placement thread reserves and relaunches.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/str_cat.h"
#include "federation/round_verdict.h"
#include "federation/world_restart.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/coordinator_key.h"
#include "gateway/jobs/fan_out.h"
#include "gateway/jobs/job_story.h"
#include "gateway/jobs/participant_calls.h"

namespace fedgate::gateway {
namespace {

constexpr int64_t kHoldTtlMs = 30000;

}  // namespace

using federation::JobState;
using federation::WorldVerdict;
using Stage = v1::Replacement;

void Coordinator::JudgeReplace(JobRecord job, v1::RunPlan run,
                               const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                               int64_t now, int64_t lost_after_ms) {
  std::map<std::pair<std::string, std::string>, double> links;
  bool links_read = false;
  auto gbps = [&](const std::string& from, const std::string& to) {
    if (!links_read) {
      const v1::ListLinksResponse all = core_->ListLinks();
      for (const auto& l : all.links()) links[{l.from(), l.to()}] = l.gbps();
      links_read = true;
    }
    auto it = links.find({from, to});
    return it == links.end() ? 0.0 : it->second;
  };
  const uint32_t restart_before = run.restart();
  const bool was_replacing = run.has_replacing();
  const WorldVerdict v =
      federation::JudgeWorld(job.spec, now, lost_after_ms, core_->config().jobs.replace_timeout_ms,
                             answers, &last_ok_[job.id], gbps, &run);
  copy_asks_[job.id] = v.copy_to;
  int64_t worst = worst_gap_ms_.load();
  while (v.worst_gap_ms > worst && !worst_gap_ms_.compare_exchange_weak(worst, v.worst_gap_ms)) {
  }
  switch (v.kind) {
    case WorldVerdict::kSucceeded:
      Succeeded(job, run, v.reason, now);
      return;
    case WorldVerdict::kPreempted:
      Preempted(job, run, v.preempted_at, v.preempted_by);
      return;
    case WorldVerdict::kFallBack:
      spdlog::warn("job {}: falling back to a new attempt: {}", job.id, v.reason);
      Fail(job, run, v.reason, v.bad_site);
      return;
    case WorldVerdict::kRunning:
      break;
  }
  if (!v.recommit.empty()) {
    if (auto c = CommitAll(job, run, v.recommit, QuotaCommit::kNone); !c.ok()) {
      spdlog::warn("job {}: re-sending commits: {}", job.id, std::string(c.message()));
    }
  }
  // While the placement thread reserves or relaunches, the reason is its
  // to write: rewriting it here would make its compare-and-set lose.
  const bool placer_owns = run.has_replacing() && (run.replacing().stage() == Stage::RESERVING ||
                                                   run.replacing().stage() == Stage::RELAUNCH);
  if (v.changed || (!placer_owns && !v.status.empty() && v.status != job.reason)) {
    if (!was_replacing && run.has_replacing()) {
      spdlog::warn("job {}: world {} lost a slice: {}", job.id, restart_before,
                   run.replacing().why());
      std::string lost;
      for (const auto& s : run.replacing().lost_sites()) lost += StrCat(lost.empty() ? "" : ",", s);
      job.new_events.push_back(StoryEvent(
          now, "slice_lost", lost,
          StrCat("world ", restart_before, " restarts: ", run.replacing().why())));
    }
    job.run = run.SerializeAsString();
    job.reason = v.status.empty() ? job.reason : v.status;
    job.updated_at_unix_ms = now;
    if (!Save(&job)) return;  // cancelled meanwhile: its cancel stops every rank
  }
  if (!v.halt.empty()) Halt(job, run, v.halt);
  if (v.wake_placer) {
    {
      std::lock_guard lock(wake_mu_);
      place_now_ = true;
    }
    wake_.notify_all();
  }
}

void Coordinator::Halt(const JobRecord& job, const v1::RunPlan& run,
                       const std::vector<int>& which) {
  for (int i : which) {
    const std::string site = run.sites(i).site();
    v1::AbortRequest a;
    *a.mutable_key() = Key(job, federation::SiteEpoch(run, i));
    a.set_reason(StrCat("world ", run.restart(), " restarts: ", run.replacing().why()));
    a.set_keep_hold(true);
    participants_->Abort(site, std::move(a), rpc_timeout_ms(),
                         [id = job.id, site](absl::StatusOr<v1::AbortResponse> r) {
                           if (!r.ok()) {
                             spdlog::info(
                                 "job {}: halting the ranks at {}: {} (asked again next "
                                 "renewal)",
                                 id, site, std::string(r.status().message()));
                           }
                         });
  }
}

void Coordinator::DriveReplacement(JobRecord job, const std::vector<std::string>& unreachable) {
  v1::RunPlan run;
  if (!run.ParseFromString(job.run) || !run.has_replacing()) return;
  if (run.replacing().stage() == Stage::RELAUNCH) {
    RelaunchWorld(std::move(job), std::move(run));
    return;
  }
  for (const auto& lost : std::vector<std::string>(run.replacing().lost_sites().begin(),
                                                   run.replacing().lost_sites().end())) {
    if (run.replacing().replaced_by().contains(lost)) continue;
    int idx = -1;
    for (int i = 0; i < run.sites_size(); ++i) {
      if (run.sites(i).site() == lost) idx = i;
    }
    if (idx < 0) continue;
    if (!ReplaceSlice(&job, &run, idx, unreachable)) return;
  }
  run.mutable_replacing()->clear_lost_sites();
  run.mutable_replacing()->set_stage(job.spec.has_checkpoint() ? Stage::CHECKPOINT
                                                               : Stage::RELAUNCH);
  job.run = run.SerializeAsString();
  job.reason = federation::ReplacingStatus(run);
  job.updated_at_unix_ms = core_->clock()->NowMs();
  if (!Save(&job)) return;
  // No checkpoint to wait for: the new world starts now, not a pass later.
  if (run.replacing().stage() == Stage::RELAUNCH) RelaunchWorld(std::move(job), std::move(run));
}

bool Coordinator::ReplaceSlice(JobRecord* job, v1::RunPlan* run, int idx,
                               const std::vector<std::string>& unreachable) {
  const v1::SiteRun old = run->sites(idx);
  const std::string why =
      StrCat("replacing slice of ", old.site(), " (", run->replacing().why(), ")");
  auto wait = [&](const std::string& reason) {
    if (job->reason != reason) {
      job->reason = reason;
      job->updated_at_unix_ms = core_->clock()->NowMs();
      Save(job);
    }
    return false;
  };
  // One change of the members at a time: a second lost slice waits for the
  // first one's new site to be accepted and its lost one to leave.
  if (const std::string pending = PendingMemberChange(*run); !pending.empty()) {
    return wait(StrCat(why, ": ", pending));
  }
  // The same size elsewhere, on one site: never a site of this world, never
  // the lost one, within the spec's constraints.
  v1::JobSpec spec = job->spec;
  spec.set_gpus(old.ranks_size());
  spec.set_max_sites(1);
  spec.set_min_gpus_per_site(old.ranks_size());
  for (const auto& s : run->sites()) spec.add_avoided_sites(s.site());
  for (const auto& s : run->replacing().lost_sites()) spec.add_avoided_sites(s);
  for (const auto& s : unreachable) spec.add_avoided_sites(s);
  auto plan = core_->Plan(spec, {job->id, false});
  if (!plan.ok() || !plan->placeable()) {
    return wait(StrCat(why, ": waiting for capacity: ",
                       plan.ok() ? plan->summary() : std::string(plan.status().message())));
  }
  PreferFastLinks(*job, *run, idx, spec, &*plan);
  const std::string target = plan->sites(0);
  const uint64_t epoch = last_epoch_ = std::max<uint64_t>(last_epoch_ + 1, core_->clock()->NowMs());
  bool has_rank0 = false;
  for (const auto& r : old.ranks()) has_rank0 = has_rank0 || r.rank() == 0;
  wait(StrCat(why, ": reserving on ", target));
  auto held = PrepareReplacement(*job, *plan, epoch, has_rank0);
  v1::AbortRequest undo;
  *undo.mutable_key() = Key(*job, epoch);
  auto abort_new = [&](const std::string& reason) {
    undo.set_reason(reason);
    participants_->Abort(target, undo, rpc_timeout_ms(), [](auto) {});
  };
  if (!held.ok()) {
    abort_new("the replacement's prepare failed");  // a hold made past the deadline
    return wait(StrCat(why, ": ", target, " refused: ", held.status().message()));
  }
  v1::RunPlan next = *run;
  *next.mutable_sites(idx) = federation::ReplacementSite(old, *plan, *held, epoch);
  if (has_rank0) {
    next.set_master_addr(core_->NodeAddress(target, plan->slices(0).node()));
    next.set_master_port(held->master_port());
  }
  (*next.mutable_replacing()->mutable_replaced_by())[old.site()] = target;
  if (auto st = BeginMemberChange(*job, *run, old.site(), target, &next); !st.ok()) {
    abort_new("the job's members cannot change yet");
    return wait(StrCat(why, ": ", st.message()));
  }
  // Committed parked: the GPUs are the job's from now on, no rank runs yet;
  // the decision is durable before the lost site is let go.
  if (auto st = CommitParked(*job, next, idx); !st.ok()) {
    abort_new("the replacement's commit failed");
    return wait(StrCat(why, ": commit at ", target, " failed: ", st.message()));
  }
  JobRecord saved = *job;
  saved.run = next.SerializeAsString();
  saved.reason = StrCat(why, ": reserved on ", target);
  saved.updated_at_unix_ms = core_->clock()->NowMs();
  saved.new_events.push_back(StoryEvent(saved.updated_at_unix_ms, "replaced", target,
                                        StrCat("the slice of ", old.site(), " is replaced by ",
                                               next.sites(idx).ranks_size(), " rank(s) at ",
                                               target,
                                               next.member_change().site() == target
                                                   ? StrCat("; ", target, " joins the members")
                                                   : "")));
  if (!Save(&saved)) {
    abort_new("the job ended during its replacement");
    return false;
  }
  spdlog::info("job {}: slice of {} ({} rank(s)) replaced by one on {}", job->id, old.site(),
               old.ranks_size(), target);
  // The lost site, should it come back, frees what it held at once.
  v1::AbortRequest a;
  *a.mutable_key() = Key(*job, federation::SiteEpoch(*run, idx));
  a.set_reason("its slice was replaced");
  participants_->Abort(old.site(), std::move(a), rpc_timeout_ms(), [](auto) {});
  *job = std::move(saved);
  *run = std::move(next);
  return true;
}

void Coordinator::PreferFastLinks(const JobRecord& job, const v1::RunPlan& run, int idx,
                                  const v1::JobSpec& spec, v1::PlanResponse* plan) {
  // Among the sites that could take the slice, the one whose slowest link
  // to the surviving sites is fastest (an unmeasured link counts as 0); the
  // placement objective breaks ties (its choice is tried first).
  std::map<std::pair<std::string, std::string>, double> gbps;
  const v1::ListLinksResponse links = core_->ListLinks();
  for (const auto& l : links.links()) gbps[{l.from(), l.to()}] = l.gbps();
  auto score = [&](const std::string& site) {
    double worst = -1;
    for (int i = 0; i < run.sites_size(); ++i) {
      if (i == idx) continue;
      const std::string& s = run.sites(i).site();
      auto a = gbps.find({site, s}), b = gbps.find({s, site});
      const double ab = a == gbps.end() ? 0 : a->second, ba = b == gbps.end() ? 0 : b->second;
      // The slower direction where both are known (as placement does).
      const double pair = a != gbps.end() && b != gbps.end() ? std::min(ab, ba) : std::max(ab, ba);
      worst = worst < 0 ? pair : std::min(worst, pair);
    }
    return std::max(0.0, worst);
  };
  double best = score(plan->sites(0));
  for (const auto& candidate : plan->explanation()) {
    const std::string& site = candidate.site();
    if (site == plan->sites(0) || score(site) <= best) continue;
    v1::JobSpec one = spec;
    if (!spec.allowed_sites().empty() &&
        std::find(spec.allowed_sites().begin(), spec.allowed_sites().end(), site) ==
            spec.allowed_sites().end()) {
      continue;
    }
    one.clear_allowed_sites();
    one.add_allowed_sites(site);
    auto p = core_->Plan(one, {job.id, false});
    if (p.ok() && p->placeable()) {
      best = score(site);
      *plan = std::move(*p);
    }
  }
}

absl::StatusOr<v1::PrepareResponse> Coordinator::PrepareReplacement(const JobRecord& job,
                                                                    const v1::PlanResponse& plan,
                                                                    uint64_t epoch, bool rank0) {
  v1::PrepareRequest req;
  *req.mutable_key() = Key(job, epoch);
  req.set_tenant(job.tenant);
  req.set_priority(job.spec.priority());
  req.set_hold_ttl_ms(kHoldTtlMs);
  req.set_pick_master_port(rank0);
  for (const auto& sl : plan.slices()) {
    auto* a = req.add_nodes();
    a->set_node(sl.node());
    a->set_gpus(sl.gpus());
  }
  std::vector<absl::StatusOr<v1::PrepareResponse>> answer(1, absl::UnknownError("no answer"));
  FanOut fan;
  participants_->Prepare(plan.sites(0), req, reserve_timeout_ms(), fan.Collect(&answer[0]));
  fan.Wait();
  if (answer[0].ok()) {
    if (auto st = federation::CheckHolds(req, *answer[0]); !st.ok()) return st;
  }
  return answer[0];
}

absl::Status Coordinator::CommitParked(const JobRecord& job, const v1::RunPlan& next, int idx) {
  v1::CommitRequest c = CommitFor(job, next);
  *c.mutable_key() = Key(job, federation::SiteEpoch(next, idx));
  *c.mutable_ranks() = next.sites(idx).ranks();
  c.set_park(true);
  std::vector<absl::StatusOr<v1::CommitResponse>> committed(1, absl::UnknownError("no answer"));
  FanOut fan;
  participants_->Commit(next.sites(idx).site(), std::move(c), reserve_timeout_ms(),
                        fan.Collect(&committed[0]));
  fan.Wait();
  return committed[0].status();
}

void Coordinator::RelaunchWorld(JobRecord job, v1::RunPlan run) {
  const uint32_t restart = run.restart() + 1;
  std::vector<int> all(run.sites_size());
  for (int i = 0; i < run.sites_size(); ++i) all[i] = i;
  v1::RunPlan next = run;
  next.set_restart(restart);
  const auto status = CommitAll(job, next, all, QuotaCommit::kNone);
  // The world number is used up even where it failed: a site that started
  // it must not mistake a later start for a duplicate.
  const std::string why = next.replacing().why();
  if (status.ok()) {
    next.clear_replacing();
    job.reason = StrCat("running on ", next.sites_size(), " site(s), attempt ", job.attempt,
                        ", world restart ", restart, " (after: ", why, ")");
  } else {
    next.mutable_replacing()->set_stage(Stage::STOPPING);
    job.reason = StrCat("restarting the world (", why, "): starting world ", restart,
                        " failed: ", status.message(), "; stopping it again");
  }
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = core_->clock()->NowMs();
  if (status.ok()) {
    job.new_events.push_back(StoryEvent(job.updated_at_unix_ms, "started", "",
                                        StrCat("world restart ", restart, " of attempt ",
                                               job.attempt, " started (after: ", why, ")")));
  }
  if (Save(&job)) {
    spdlog::info("job {}: {}", job.id, job.reason);
  } else {
    StopRun(job, "the job ended while its world restarted");
  }
}

}  // namespace fedgate::gateway
