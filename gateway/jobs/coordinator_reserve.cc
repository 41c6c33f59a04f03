// The reservation round of one job (two-phase): quota at the tenant's home
// site, a placement, the virtual cluster, Prepare on every chosen site at
// once, the verdict on their answers (federation/round_verdict), the
// decision made durable, then Commit everywhere at once.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "base/str_cat.h"
#include "federation/coordinator_term.h"
#include "federation/round_verdict.h"
#include "federation/world_restart.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/coordinator_key.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/crash_point.h"
#include "gateway/jobs/fan_out.h"
#include "gateway/jobs/job_story.h"
#include "gateway/jobs/participant_calls.h"

namespace fedgate::gateway {
namespace {

constexpr int64_t kHoldTtlMs = 30000;

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

using federation::JobState;

bool Coordinator::Wait(JobRecord* job, std::string reason, int64_t now) {
  // A preempted job keeps saying so while it waits to run again.
  if (job->reason.rfind("preempted by ", 0) == 0) {
    reason = StrCat(job->reason.substr(0, job->reason.find(';')), "; ", reason);
  }
  if (reason != job->reason) {
    job->reason = reason;
    job->updated_at_unix_ms = now;
    Save(job);
  }
  return false;
}

std::string Coordinator::QuotaWait(const JobRecord& job, const std::vector<std::string>& unreachable,
                                   std::optional<GatewayCore::TenantHome>* home,
                                   bool* within_nominal) {
  // Quota: a guaranteed job of a governed tenant holds quota at its home
  // site in the same two-phase reservation. The home's ad answers early
  // what is certain to fail; the home site itself decides.
  *within_nominal = true;
  if (job.spec.priority() == "spot") return "";
  *home = core_->HomeOf(job.tenant);
  if (!*home) return "";
  const auto& h = **home;
  const auto& q = h.quota;
  if (!h.error.empty()) return StrCat("waiting for quota: ", h.error);
  if (!h.up) {
    return StrCat("waiting for quota: home site ", h.site, " of tenant ", job.tenant,
                  " is down; its new guaranteed work waits for it");
  }
  if (std::find(unreachable.begin(), unreachable.end(), h.site) != unreachable.end()) {
    return StrCat("waiting for quota: home site ", h.site, " of tenant ", job.tenant,
                  " is not a peer of ", core_->config().site, " and accepts jobs only from its peers");
  }
  const uint64_t held = static_cast<uint64_t>(q.used_gpus()) + q.borrowed_gpus();
  if (held + job.spec.gpus() > static_cast<uint64_t>(q.gpus()) + q.borrow()) {
    return StrCat("waiting for quota: tenant ", job.tenant, " holds ", held, " of ", q.gpus(),
                  " GPU(s) + ", q.borrow(), " borrowable; the job needs ", job.spec.gpus());
  }
  *within_nominal = static_cast<uint64_t>(q.used_gpus()) + job.spec.gpus() <= q.gpus();
  return "";
}

std::optional<v1::PlanResponse> Coordinator::PlaceJob(const JobRecord& job, const v1::RunPlan& run,
                                                      const std::vector<std::string>& unreachable,
                                                      bool may_preempt, bool* preempt,
                                                      std::string* why) {
  v1::JobSpec spec = job.spec;
  for (const auto& s : unreachable) spec.add_avoided_sites(s);
  v1::JobSpec avoiding = spec;
  for (const auto& s : run.avoided_sites()) avoiding.add_avoided_sites(s);
  const federation::OfferFor plain{job.id, false};
  auto plan = core_->Plan(avoiding, plain);
  // Sites that failed an earlier attempt are avoided while another placement
  // exists; if none does, a failed site that is back up (fresh ad) may serve.
  if (plan.ok() && !plan->placeable() && run.avoided_sites_size() > 0) {
    plan = core_->Plan(spec, plain);
  }
  // A guaranteed job within its quota that cannot be placed may preempt
  // spot and borrowed work, wherever it runs.
  *preempt = false;
  if (plan.ok() && !plan->placeable() && may_preempt) {
    auto with = core_->Plan(spec, {job.id, true});
    if (with.ok() && with->placeable()) {
      plan = std::move(with);
      *preempt = true;
    }
  }
  if (plan.ok() && plan->placeable()) return std::move(*plan);
  *why = plan.ok() ? StrCat("waiting for capacity: ", plan->summary(),
                            GatewayCore::LeftOutNote(unreachable))
                   : std::string(plan.status().message());
  return std::nullopt;
}

v1::RunPlan Coordinator::VirtualCluster(const v1::PlanResponse& plan, const JobRecord& job,
                                        const v1::RunPlan& previous, const std::string& quota_site,
                                        uint64_t epoch) const {
  v1::RunPlan next;
  next.set_epoch(epoch);
  next.set_world_size(job.spec.gpus());
  *next.mutable_avoided_sites() = previous.avoided_sites();
  next.set_preemptions(previous.preemptions());
  next.set_quota_site(quota_site);
  next.set_placement_summary(plan.summary());
  *next.mutable_placement() = plan.explanation();
  std::map<std::string, v1::SiteRun*> by_site;
  uint32_t group = 0;
  for (const auto& sl : plan.slices()) {
    if (!by_site.contains(sl.site())) {
      by_site[sl.site()] = next.add_sites();
      by_site[sl.site()]->set_site(sl.site());
    }
    for (uint32_t g = 0; g < sl.gpus(); ++g) {
      auto* r = by_site[sl.site()]->add_ranks();
      r->set_rank(sl.first_rank() + g);
      r->set_local_rank(g);
      r->set_local_world_size(sl.gpus());
      r->set_group_rank(group);
      r->set_node(sl.node());
    }
    ++group;
  }
  const auto& first = plan.slices(0);
  next.set_master_addr(core_->NodeAddress(first.site(), first.node()));
  // Witnesses among the peers that are up now (heard, and not since gone
  // silent), so that a job of fewer than three members still has a majority
  // to spare.
  std::vector<std::string> vc_sites;
  for (const auto& s : next.sites()) vc_sites.push_back(s.site());
  const std::string& self = core_->config().site;
  for (auto& w : federation::ChooseWitnesses(job.id, federation::JobMembers(self, vc_sites, {}),
                                             UpPeers())) {
    next.add_witnesses(std::move(w));
  }
  next.set_takeover_after_ms(core_->config().jobs.takeover_after_ms);
  next.set_takeover_stagger_ms(core_->config().jobs.takeover_stagger_ms);
  // The queued record's members keep it until they are told this world.
  if (QueuedRecord(previous)) {
    for (const auto& m : MembersOf(previous, self)) {
      if (m != self) next.add_queued_members(m);
    }
  }
  return next;
}

bool Coordinator::TryStart(JobRecord job, const std::vector<std::string>& unreachable) {
  v1::RunPlan run;
  run.ParseFromString(job.run);
  const int64_t now = core_->clock()->NowMs();
  std::optional<GatewayCore::TenantHome> home;
  bool within_nominal = true;
  if (auto why = QuotaWait(job, unreachable, &home, &within_nominal); !why.empty()) {
    return Wait(&job, why, now);
  }
  const bool may_preempt = job.spec.priority() != "spot" && within_nominal;
  bool preempt = false;
  std::string why;
  auto plan = PlaceJob(job, run, unreachable, may_preempt, &preempt, &why);
  if (!plan) return Wait(&job, why, now);
  const uint64_t epoch = last_epoch_ = std::max<uint64_t>(last_epoch_ + 1, now);
  v1::RunPlan next = VirtualCluster(*plan, job, run, home ? home->site : "", epoch);
  job.attempt += 1;
  job.state = JobState::kReserving;
  job.reason = StrCat("reserving on ", next.sites_size(), " site(s)");
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = now;
  job.new_events.push_back(PlacedEvent(now, next, job.attempt));
  if (!Save(&job)) return false;  // cancelled since it was read
  CrashPoint("coordinator-after-reserving");

  const auto prepare_start = std::chrono::steady_clock::now();
  std::vector<v1::PrepareRequest> reqs;
  int quota_index = -1;
  std::map<std::string, uint32_t> quota_gpus;  // by model
  for (const auto& sl : plan->slices()) quota_gpus[sl.gpu_model()] += sl.gpus();
  const auto answers = PrepareAll(job, next, quota_gpus, preempt, &reqs, &quota_index);
  const auto verdict =
      federation::JudgePrepare(reqs, answers, quota_index, next.quota_site(), &next);
  CrashPoint("coordinator-after-prepare");
  if (on_phase_) on_phase_("prepare", verdict.failed.empty(), SecondsSince(prepare_start));
  if (!verdict.failed.empty()) {
    if (on_reservation_end_) on_reservation_end_(false);
    // The holds just made belong to this attempt's run: undo them all.
    job.run = next.SerializeAsString();
    UndoReservation(job, verdict.failed);
    return false;
  }
  // Sites chosen without the job's datasets stage them while their GPUs are
  // held; the pass goes on with other jobs meanwhile.
  if (job.spec.datasets_size() > 0 && !StagingFor(job, next).empty()) {
    StageThenCommit(std::move(job), std::move(next));
    return true;
  }
  return DecideAndCommit(std::move(job), next);
}

std::vector<absl::StatusOr<v1::PrepareResponse>> Coordinator::PrepareAll(
    const JobRecord& job, const v1::RunPlan& next, const std::map<std::string, uint32_t>& quota_gpus,
    bool preempt, std::vector<v1::PrepareRequest>* reqs, int* quota_index) {
  // Every site at once: hold GPUs; rank 0's site also picks MASTER_PORT;
  // the tenant's home site holds quota (a request of its own when it runs
  // no ranks: the last one).
  const int n = next.sites_size();
  const std::string& home = next.quota_site();
  *quota_index = -1;
  for (int i = 0; i < n; ++i) {
    if (!home.empty() && next.sites(i).site() == home) *quota_index = i;
  }
  const bool quota_only = !home.empty() && *quota_index < 0;
  if (quota_only) *quota_index = n;
  const int calls = n + (quota_only ? 1 : 0);
  reqs->assign(calls, v1::PrepareRequest());
  std::vector<absl::StatusOr<v1::PrepareResponse>> answers(calls, absl::UnknownError("no answer"));
  std::vector<std::string> targets;
  for (int i = 0; i < calls; ++i) targets.push_back(i < n ? next.sites(i).site() : home);
  FanOut fan;
  for (int i : RemoteFirst(targets)) {
    auto& req = (*reqs)[i];
    *req.mutable_key() = Key(job, next.epoch());
    req.set_tenant(job.tenant);
    req.set_priority(job.spec.priority());
    req.set_image(job.spec.image());
    if (i < n) {
      std::map<std::string, uint32_t> per_node;
      for (const auto& r : next.sites(i).ranks()) per_node[r.node()]++;
      for (const auto& [node, count] : per_node) {
        auto* a = req.add_nodes();
        a->set_node(node);
        a->set_gpus(count);
      }
    }
    if (i == *quota_index) {
      for (const auto& [model, g] : quota_gpus) (*req.mutable_quota_gpus())[model] = g;
    }
    req.set_preempt(preempt);
    req.set_hold_ttl_ms(kHoldTtlMs);
    req.set_pick_master_port(i == 0);
    participants_->Prepare(targets[i], req, reserve_timeout_ms(), fan.Collect(&answers[i]));
  }
  fan.Wait();
  return answers;
}

bool Coordinator::DecideAndCommit(JobRecord job, const v1::RunPlan& reserved) {
  // The decision, durable before any commit. Losing the compare-and-set
  // means the job was cancelled while the sites prepared: release the holds
  // and start nothing.
  v1::RunPlan next = reserved;
  const std::vector<std::string> queued(next.queued_members().begin(), next.queued_members().end());
  next.clear_queued_members();
  job.state = JobState::kRunning;
  job.reason = StrCat("running on ", next.sites_size(), " site(s), attempt ", job.attempt,
                      next.borrowed() ? " (borrowed quota: preemptible)" : "");
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = core_->clock()->NowMs();
  job.new_events.push_back(StoryEvent(
      job.updated_at_unix_ms, "reserved", "",
      StrCat("every site holds its GPUs (", next.world_size(), " ranks, master ",
             next.master_addr(), ":", next.master_port(), "); committing")));
  if (!Save(&job)) {
    if (on_reservation_end_) on_reservation_end_(false);
    StopRun(job, "the job ended during its reservation");
    return false;
  }
  if (on_scheduled_) {
    on_scheduled_(std::max<int64_t>(0, job.updated_at_unix_ms - job.created_at_unix_ms) / 1000.0,
                  job);
  }
  spdlog::info("job {} attempt {}: committed on {} site(s), master {}:{}", job.id, job.attempt,
               next.sites_size(), next.master_addr(), next.master_port());
  CrashPoint("coordinator-after-decision");
  // A record its members do not hold would die with this gateway while
  // ranks run: it goes to a majority of them (and of the queued record's)
  // before any site starts a rank.
  if (auto why = RecordAtMajorities(job, next, queued); !why.empty()) {
    if (on_reservation_end_) on_reservation_end_(false);
    StopRun(job, why);
    job.state = JobState::kPending;
    job.attempt = job.attempt > 0 ? job.attempt - 1 : 0;
    job.reason = StrCat(why, "; will retry");
    if (!queued.empty()) job.run = QueuedPlanOf(next, queued, core_->config().site).SerializeAsString();
    job.updated_at_unix_ms = core_->clock()->NowMs();
    job.new_events.push_back(StoryEvent(job.updated_at_unix_ms, "reservation_failed", "", why));
    if (Save(&job)) spdlog::warn("job {}: {}", job.id, why);
    return false;
  }
  std::vector<int> all(next.sites_size());
  for (int i = 0; i < next.sites_size(); ++i) all[i] = i;
  const auto commit_start = std::chrono::steady_clock::now();
  auto committed = CommitAll(job, next, all, QuotaCommit::kSend);
  if (on_phase_) on_phase_("commit", committed.ok(), SecondsSince(commit_start));
  if (on_reservation_end_) on_reservation_end_(committed.ok());
  if (!committed.ok()) {
    HoldOff(job, next);
    Fail(job, next, std::string(committed.message()), "");
    return false;
  }
  CrashPoint("coordinator-after-first-commit");
  std::string where;
  for (const auto& s : next.sites()) where += StrCat(where.empty() ? "" : ", ", s.site());
  Tell(job.id, StoryEvent(core_->clock()->NowMs(), "started", "",
                          StrCat("attempt ", job.attempt, ": ", next.world_size(),
                                 " ranks started on ", where)));
  return true;
}

v1::CommitRequest Coordinator::CommitFor(const JobRecord& job, const v1::RunPlan& run) const {
  v1::CommitRequest c;
  *c.mutable_key() = Key(job, run.epoch());
  c.set_preemptible(job.spec.priority() == "spot" || run.borrowed());
  c.set_world_size(run.world_size());
  c.set_master_addr(run.master_addr());
  c.set_master_port(run.master_port());
  *c.mutable_command() = job.spec.command();
  *c.mutable_env() = job.spec.env();
  // A service's replica listens on the port its site picked for the world
  // (free among the site's holds, from executor.port_range).
  if (!job.spec.service().empty()) {
    (*c.mutable_env())["FEDGATE_SERVICE_PORT"] = std::to_string(run.master_port());
  }
  c.set_lease_ms(lease_ms_);
  c.set_restart(run.restart());
  c.set_keep_hold(job.spec.recovery() == "replace");
  if (job.spec.has_checkpoint()) c.set_checkpoint_keep(std::max<uint32_t>(1, job.spec.checkpoint().keep()));
  for (const auto& s : run.sites()) c.add_world_sites(s.site());
  *c.mutable_datasets() = job.spec.datasets();
  *c.mutable_copy() = CopyOf(job, core_->config().site, run);
  return c;
}

absl::Status Coordinator::CommitAll(const JobRecord& job, const v1::RunPlan& run,
                                    const std::vector<int>& which, QuotaCommit quota) {
  // A home site that runs no ranks gets a commit of its quota hold alone.
  std::vector<std::string> to;
  for (int i : which) to.push_back(run.sites(i).site());
  const bool send_quota = quota != QuotaCommit::kNone && federation::QuotaOnly(run);
  if (send_quota) to.push_back(run.quota_site());
  const int ranked = static_cast<int>(which.size());
  std::vector<absl::StatusOr<v1::CommitResponse>> answers(to.size(),
                                                          absl::UnknownError("no answer"));
  FanOut fan;
  for (int k : RemoteFirst(to)) {
    v1::CommitRequest c = CommitFor(job, run);
    if (k < ranked) {
      *c.mutable_ranks() = run.sites(which[k]).ranks();
      *c.mutable_key() = Key(job, federation::SiteEpoch(run, which[k]));
    }
    if (k >= ranked && quota == QuotaCommit::kSend) {
      // The decision is durable already and nothing waits for this hold's
      // commit: a lost one shows as HELD at the next renewal, which re-sends it.
      answers[k] = v1::CommitResponse();
      participants_->Commit(to[k], std::move(c), reserve_timeout_ms(),
                            [id = job.id, s = to[k]](absl::StatusOr<v1::CommitResponse> r) {
                              if (!r.ok()) {
                                spdlog::warn("job {}: committing its quota at {} failed: {} (the "
                                             "next renewal re-sends it)",
                                             id, s, std::string(r.status().message()));
                              }
                            });
      continue;
    }
    participants_->Commit(to[k], std::move(c), reserve_timeout_ms(), fan.Collect(&answers[k]));
  }
  fan.Wait();
  for (size_t k = 0; k < to.size(); ++k) {
    if (!answers[k].ok()) {
      return absl::Status(answers[k].status().code(),
                          StrCat("commit failed at ", to[k], ": ", answers[k].status().message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fedgate::gateway
