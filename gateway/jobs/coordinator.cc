#include "gateway/jobs/coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <set>

#include "federation/duration.h"
#include "federation/saturating.h"
#include "federation/scheduler.h"
#include "base/str_cat.h"
#include "gateway/peering/core.h"
#include "gateway/jobs/crash_point.h"
#include "gateway/jobs/participant_calls.h"

namespace fedgate::gateway {
namespace {

using federation::JobState;

constexpr int64_t kHoldTtlMs = 30000;
constexpr int64_t kPlacePassMs = 250;

v1::ReservationKey Key(const JobRecord& job, uint64_t epoch) {
  v1::ReservationKey k;
  k.set_job_id(job.id);
  k.set_attempt(job.attempt);
  k.set_epoch(epoch);
  return k;
}

// Waits until as many answers arrived as calls were sent.
class Latch {
 public:
  void Add() {
    std::lock_guard lock(mu_);
    ++pending_;
  }
  void Done() {
    std::lock_guard lock(mu_);
    if (--pending_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
};

// Checks a participant's answer against what was asked: per node exactly the
// GPUs asked, each index once. A peer's reply never reaches `.at()` unchecked.
absl::Status CheckHolds(const v1::PrepareRequest& req, const v1::PrepareResponse& resp) {
  std::map<std::string, uint32_t> asked;
  for (const auto& n : req.nodes()) asked[n.node()] += n.gpus();
  std::map<std::string, std::set<uint32_t>> got;
  for (const auto& h : resp.holds()) {
    for (uint32_t i : h.indices()) {
      if (!got[h.node()].insert(i).second) {
        return absl::InternalError(StrCat("GPU ", h.node(), "/", i, " returned twice"));
      }
    }
  }
  for (const auto& [node, n] : asked) {
    if (got[node].size() != n) {
      return absl::InternalError(StrCat("returned ", got[node].size(), " GPU(s) of node ", node,
                                        ", ", n, " asked"));
    }
  }
  if (got.size() != asked.size()) return absl::InternalError("returned GPUs of nodes not asked");
  return absl::OkStatus();
}

}  // namespace

Coordinator::Coordinator(GatewayCore* core, JobStore* store, ParticipantCalls* participants)
    : core_(core),
      store_(store),
      participants_(participants),
      lease_ms_(core->config().jobs_lease_ms),
      share_(core->config().queue_fair_share_half_life_ms) {}

Coordinator::~Coordinator() { Stop(); }

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

void Coordinator::Start() {
  LoadFairShare();
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

void Coordinator::PlaceLoop() {
  while (!stop_) {
    PlacePass();
    Sleep(kPlacePassMs);
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
  for (auto& j : *jobs) {
    auto est = federation::ParseDurationMs(j.spec.estimated_duration());
    const int64_t est_ms = est.ok() ? *est : 3600000;
    if (j.state == JobState::kReserving) {
      // Only this thread reserves and it finishes every reservation it
      // starts, so a job left RESERVING is one a crash interrupted.
      UndoReservation(j, "reservation interrupted by a coordinator restart; will retry");
    } else if (j.state == JobState::kPending) {
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
      running.push_back({federation::SatAdd(static_cast<int64_t>(run.epoch()), est_ms),
                         {{"*", j.spec.gpus()}}});
    }
  }
  if (pending.empty()) return;
  // Only this site, its approved peers and sites that accept jobs from the
  // whole federation can be asked to run ranks: every other known site is
  // avoided. Computed once per pass.
  std::vector<std::string> unreachable;
  federation::GpusByModel free;
  const std::set<std::string> reachable = core_->SitesForJobs();
  const auto capacity = core_->Capacity();
  for (const auto& s : capacity.sites()) {
    if (!reachable.contains(s.site())) {
      unreachable.push_back(s.site());
      continue;
    }
    if (s.state() == v1::SiteCapacity::down) continue;
    // Preemptible GPUs count too: a guaranteed job may take them (a spot
    // job tried on them just finds no placement).
    for (const auto& m : s.models()) free[m.model()] += m.free_gpus() + m.preemptible_gpus();
  }
  const int64_t now = core_->clock()->NowMs();
  federation::FairShare share;
  {
    std::lock_guard lock(share_mu_);
    share = share_;
  }
  // Tenant weights come from their home sites' ads.
  for (const auto& q : core_->Quotas()) {
    if (q.weight() > 0) share.SetWeight(q.tenant(), q.weight());
  }
  auto result = sched.Pass(
      now, free, std::move(running),
      [&](const federation::SchedJob& q) -> std::optional<federation::GpusByModel> {
        if (stop_ || !TryStart(pending[q.id], unreachable)) return std::nullopt;
        return federation::GpusByModel{{"*", q.gpus}};
      },
      &share);
  // Jobs that would fit but would delay the reserved head job say so.
  for (const auto& id : result.held_back) {
    JobRecord& j = pending[id];
    const std::string reason =
        StrCat("waiting: starting now would delay job ", result.reserved_for.value_or("?"),
               ", which holds the reservation (backfill)");
    if (j.reason != reason) {
      j.reason = reason;
      j.updated_at_unix_ms = now;
      Save(&j);
    }
  }
}

void Coordinator::UndoReservation(JobRecord job, const std::string& why) {
  StopRun(job, why);
  job.attempt = job.attempt > 0 ? job.attempt - 1 : 0;
  job.state = JobState::kPending;
  job.reason = why;
  job.updated_at_unix_ms = core_->clock()->NowMs();
  if (Save(&job)) spdlog::warn("job {}: {}", job.id, why);
}

bool Coordinator::TryStart(JobRecord job, const std::vector<std::string>& unreachable) {
  v1::RunPlan run;
  run.ParseFromString(job.run);
  v1::JobSpec spec = job.spec;
  for (const auto& s : unreachable) spec.add_avoided_sites(s);
  v1::JobSpec avoiding = spec;
  for (const auto& s : run.avoided_sites()) avoiding.add_avoided_sites(s);
  const int64_t now = core_->clock()->NowMs();
  auto wait = [&](std::string reason) {
    // A preempted job keeps saying so while it waits to run again.
    if (job.reason.rfind("preempted by ", 0) == 0) {
      reason = StrCat(job.reason.substr(0, job.reason.find(';')), "; ", reason);
    }
    if (reason != job.reason) {
      job.reason = reason;
      job.updated_at_unix_ms = now;
      Save(&job);
    }
    return false;
  };
  // Quota: a guaranteed job of a governed tenant holds quota at its home
  // site in the same two-phase reservation. The home's ad answers early
  // what is certain to fail; the home site itself decides.
  const bool spot = job.spec.priority() == "spot";
  std::optional<GatewayCore::TenantHome> home;
  bool within_nominal = true;
  if (!spot) {
    home = core_->HomeOf(job.tenant);
    if (home) {
      const auto& q = home->quota;
      if (!home->error.empty()) return wait(StrCat("waiting for quota: ", home->error));
      if (!home->up) {
        return wait(StrCat("waiting for quota: home site ", home->site, " of tenant ", job.tenant,
                           " is down; its new guaranteed work waits for it"));
      }
      if (std::find(unreachable.begin(), unreachable.end(), home->site) != unreachable.end()) {
        return wait(StrCat("waiting for quota: home site ", home->site, " of tenant ", job.tenant,
                           " is not a peer of ", core_->config().site,
                           " and accepts jobs only from its peers"));
      }
      const uint64_t held = static_cast<uint64_t>(q.used_gpus()) + q.borrowed_gpus();
      if (held + job.spec.gpus() > static_cast<uint64_t>(q.gpus()) + q.borrow()) {
        return wait(StrCat("waiting for quota: tenant ", job.tenant, " holds ", held, " of ",
                           q.gpus(), " GPU(s) + ", q.borrow(), " borrowable; the job needs ",
                           job.spec.gpus()));
      }
      within_nominal = static_cast<uint64_t>(q.used_gpus()) + job.spec.gpus() <= q.gpus();
    }
  }
  const federation::OfferFor plain{job.id, false};
  auto plan = core_->Plan(avoiding, plain);
  // Sites that failed an earlier attempt are avoided while another placement
  // exists; if none does, a failed site that is back up (fresh ad) may serve.
  if (plan.ok() && !plan->placeable() && run.avoided_sites_size() > 0) {
    plan = core_->Plan(spec, plain);
  }
  // A guaranteed job within its quota that cannot be placed may preempt
  // spot and borrowed work, wherever it runs.
  bool preempt = false;
  if (plan.ok() && !plan->placeable() && !spot && within_nominal) {
    auto with = core_->Plan(spec, {job.id, true});
    if (with.ok() && with->placeable()) {
      plan = std::move(with);
      preempt = true;
    }
  }
  if (!plan.ok() || !plan->placeable()) {
    return wait(plan.ok() ? StrCat("waiting for capacity: ", plan->summary(),
                                   GatewayCore::LeftOutNote(unreachable))
                          : std::string(plan.status().message()));
  }
  // The virtual cluster: ranks site by site, node by node.
  const uint64_t epoch = last_epoch_ = std::max<uint64_t>(last_epoch_ + 1, now);
  v1::RunPlan next;
  next.set_epoch(epoch);
  next.set_world_size(job.spec.gpus());
  *next.mutable_avoided_sites() = run.avoided_sites();
  next.set_preemptions(run.preemptions());
  if (home) next.set_quota_site(home->site);
  std::map<std::string, uint32_t> quota_gpus;  // by model
  for (const auto& sl : plan->slices()) quota_gpus[sl.gpu_model()] += sl.gpus();
  std::map<std::string, v1::SiteRun*> by_site;
  uint32_t group = 0;
  for (const auto& sl : plan->slices()) {
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
  const auto& first = plan->slices(0);
  next.set_master_addr(core_->NodeAddress(first.site(), first.node()));
  job.attempt += 1;
  job.state = JobState::kReserving;
  job.reason = StrCat("reserving on ", next.sites_size(), " site(s)");
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = now;
  if (!Save(&job)) return false;  // cancelled since it was read
  CrashPoint("coordinator-after-reserving");

  // Phase one, on every site at once: hold GPUs; rank 0's site also picks
  // MASTER_PORT; the tenant's home site holds quota (a request of its own
  // when it runs no ranks: the last one).
  const int n = next.sites_size();
  int quota_index = -1;
  for (int i = 0; i < n; ++i) {
    if (home && next.sites(i).site() == home->site) quota_index = i;
  }
  const bool quota_only = home && quota_index < 0;
  if (quota_only) quota_index = n;
  const int calls = n + (quota_only ? 1 : 0);
  const auto prepare_start = std::chrono::steady_clock::now();
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  std::vector<v1::PrepareRequest> reqs(calls);
  std::vector<absl::StatusOr<v1::PrepareResponse>> answers(calls, absl::UnknownError("no answer"));
  Latch latch;
  std::vector<std::string> targets;
  for (int i = 0; i < calls; ++i) targets.push_back(i < n ? next.sites(i).site() : home->site);
  for (int i : RemoteFirst(targets)) {
    auto& req = reqs[i];
    *req.mutable_key() = Key(job, epoch);
    req.set_tenant(job.tenant);
    req.set_priority(job.spec.priority());
    if (i < n) {
      std::map<std::string, uint32_t> per_node;
      for (const auto& r : next.sites(i).ranks()) per_node[r.node()]++;
      for (const auto& [node, count] : per_node) {
        auto* a = req.add_nodes();
        a->set_node(node);
        a->set_gpus(count);
      }
    }
    if (i == quota_index) {
      for (const auto& [model, g] : quota_gpus) (*req.mutable_quota_gpus())[model] = g;
    }
    req.set_preempt(preempt);
    req.set_hold_ttl_ms(kHoldTtlMs);
    req.set_pick_master_port(i == 0);
    latch.Add();
    participants_->Prepare(targets[i], req, reserve_timeout_ms(),
                           [&answers, &latch, i](absl::StatusOr<v1::PrepareResponse> r) {
                             answers[i] = std::move(r);
                             latch.Done();
                           });
  }
  latch.Wait();
  std::string failed;
  // A quota refusal or a preemption in progress is the job's reason as is.
  for (int i = 0; i < calls && failed.empty(); ++i) {
    const auto& st = answers[i].status();
    const std::string msg(st.message());
    if (msg.rfind("waiting for quota", 0) == 0) failed = msg;
    if (msg.rfind("preempting", 0) == 0) {
      failed = StrCat("preempting at ", i < n ? next.sites(i).site() : home->site, ": ", msg);
    }
  }
  if (quota_index >= 0 && answers[quota_index].ok()) {
    next.set_borrowed(answers[quota_index]->quota_class() == "borrowed");
  }
  if (quota_only && failed.empty() && !answers[n].ok()) {
    failed = StrCat("quota at home site ", home->site, ": ", answers[n].status().message());
  }
  for (int i = 0; i < n && failed.empty(); ++i) {
    auto& site = *next.mutable_sites(i);
    absl::Status st = answers[i].status();
    if (st.ok()) st = CheckHolds(reqs[i], *answers[i]);
    if (!st.ok()) {
      failed = StrCat("reservation failed at ", site.site(), ": ", st.message(), "; will retry");
      break;
    }
    if (i == 0) next.set_master_port(answers[i]->master_port());
    std::map<std::string, std::vector<uint32_t>> gpus;
    for (const auto& h : answers[i]->holds()) {
      gpus[h.node()].insert(gpus[h.node()].end(), h.indices().begin(), h.indices().end());
    }
    std::map<std::string, size_t> used;
    for (auto& r : *site.mutable_ranks()) r.set_gpu(gpus[r.node()][used[r.node()]++]);
  }
  CrashPoint("coordinator-after-prepare");
  if (on_phase_) on_phase_("prepare", failed.empty(), seconds_since(prepare_start));
  if (!failed.empty()) {
    if (on_reservation_end_) on_reservation_end_(false);
    // The holds just made belong to this attempt's run: undo them all.
    job.run = next.SerializeAsString();
    UndoReservation(job, failed);
    return false;
  }
  // The decision, durable before any commit. Losing the compare-and-set
  // means the job was cancelled while the sites prepared: release the holds
  // and start nothing.
  job.state = JobState::kRunning;
  job.reason = StrCat("running on ", next.sites_size(), " site(s), attempt ", job.attempt,
                      next.borrowed() ? " (borrowed quota: preemptible)" : "");
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = core_->clock()->NowMs();
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
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  const auto commit_start = std::chrono::steady_clock::now();
  auto committed = CommitAll(job, next, all, QuotaCommit::kSend);
  if (on_phase_) on_phase_("commit", committed.ok(), seconds_since(commit_start));
  if (on_reservation_end_) on_reservation_end_(committed.ok());
  if (!committed.ok()) {
    Fail(job, next, std::string(committed.message()), "");
    return false;
  }
  CrashPoint("coordinator-after-first-commit");
  return true;
}

absl::Status Coordinator::CommitAll(const JobRecord& job, const v1::RunPlan& run,
                                    const std::vector<int>& which, QuotaCommit quota) {
  // A home site that runs no ranks gets a commit of its quota hold alone.
  std::vector<std::string> to;
  for (int i : which) to.push_back(run.sites(i).site());
  if (quota != QuotaCommit::kNone && QuotaOnly(run)) to.push_back(run.quota_site());
  std::vector<absl::StatusOr<v1::CommitResponse>> answers(to.size(),
                                                          absl::UnknownError("no answer"));
  Latch latch;
  for (int k : RemoteFirst(to)) {
    v1::CommitRequest c;
    *c.mutable_key() = Key(job, run.epoch());
    if (k < static_cast<int>(which.size())) *c.mutable_ranks() = run.sites(which[k]).ranks();
    c.set_preemptible(job.spec.priority() == "spot" || run.borrowed());
    c.set_world_size(run.world_size());
    c.set_master_addr(run.master_addr());
    c.set_master_port(run.master_port());
    *c.mutable_command() = job.spec.command();
    *c.mutable_env() = job.spec.env();
    c.set_lease_ms(lease_ms_);
    if (k >= static_cast<int>(which.size()) && quota == QuotaCommit::kSend) {
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
    latch.Add();
    participants_->Commit(to[k], std::move(c), reserve_timeout_ms(),
                          [&answers, &latch, k](absl::StatusOr<v1::CommitResponse> r) {
                            answers[k] = std::move(r);
                            latch.Done();
                          });
  }
  latch.Wait();
  for (size_t k = 0; k < to.size(); ++k) {
    if (!answers[k].ok()) {
      return absl::Status(answers[k].status().code(),
                          StrCat("commit failed at ", to[k], ": ", answers[k].status().message()));
    }
  }
  return absl::OkStatus();
}

std::vector<int> Coordinator::RemoteFirst(const std::vector<std::string>& sites) const {
  std::vector<int> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < static_cast<int>(sites.size()); ++i) {
      if ((sites[i] == core_->config().site) == (pass == 1)) order.push_back(i);
    }
  }
  return order;
}

bool Coordinator::QuotaOnly(const v1::RunPlan& run) {
  if (run.quota_site().empty()) return false;
  for (const auto& s : run.sites()) {
    if (s.site() == run.quota_site()) return false;
  }
  return true;
}

void Coordinator::RenewLoop() {
  while (!stop_) {
    const int64_t t0 = core_->clock()->NowMs();
    RenewPass();
    const int64_t spent = core_->clock()->NowMs() - t0;
    Sleep(std::max<int64_t>(20, lease_ms_ / 5 - spent));
  }
}

void Coordinator::RenewPass() {
  auto jobs = store_->ListAllActive();
  if (!jobs.ok()) return;
  const auto down = core_->DownPeers();
  struct Work {
    JobRecord job;
    v1::RunPlan run;
    std::vector<absl::StatusOr<v1::SliceStatusResponse>> answers;
  };
  std::vector<std::unique_ptr<Work>> work;
  Latch latch;
  std::vector<std::function<void()>> local;  // inline calls, after the remote ones are out
  for (auto& j : *jobs) {
    if (j.state != JobState::kRunning) continue;
    auto w = std::make_unique<Work>();
    w->job = std::move(j);
    w->run.ParseFromString(w->job.run);
    const int asked = w->run.sites_size() + (QuotaOnly(w->run) ? 1 : 0);
    w->answers.assign(asked, absl::UnavailableError("not asked: the site is down"));
    // A quota-only home whose job ran only here: ask it after this site's
    // own answers (inline, no wait), and not at all when they say the job
    // ended (it is released next). A short job then costs the home one
    // call fewer; a job still running, or never committed, asks as before.
    const bool all_here = std::all_of(w->run.sites().begin(), w->run.sites().end(),
                                      [&](const v1::SiteRun& r) {
                                        return r.site() == core_->config().site;
                                      });
    const bool home_after_local = QuotaOnly(w->run) && all_here;
    for (int i = 0; i < asked; ++i) {
      const std::string& site =
          i < w->run.sites_size() ? w->run.sites(i).site() : w->run.quota_site();
      if (down.contains(site)) continue;
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
      *req.mutable_key() = Key(w->job, w->run.epoch());
      req.set_lease_ms(lease_ms_);
      latch.Add();
      auto call = [this, site, req = std::move(req), w = w.get(), &latch, i]() mutable {
        participants_->SliceStatus(site, std::move(req), rpc_timeout_ms(),
                                   [w, &latch, i](absl::StatusOr<v1::SliceStatusResponse> r) {
                                     w->answers[i] = std::move(r);
                                     latch.Done();
                                   });
      };
      if (site == core_->config().site && !home_after_local) {
        local.push_back(std::move(call));
      } else {
        call();  // remote, or local ahead of its home (inline: answered on return)
      }
    }
    work.push_back(std::move(w));
  }
  for (auto& call : local) call();
  latch.Wait();
  const int64_t now = core_->clock()->NowMs();
  std::set<std::string> running;
  for (auto& w : work) {
    running.insert(w->job.id);
    Judge(std::move(w->job), w->run, w->answers, now);
  }
  for (auto it = last_ok_.begin(); it != last_ok_.end();) {
    it = running.contains(it->first) ? std::next(it) : last_ok_.erase(it);
  }
  ++renew_passes_;
}

void Coordinator::Judge(JobRecord job, const v1::RunPlan& run,
                        const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                        int64_t now) {
  auto& seen = last_ok_[job.id];
  int succeeded = 0;
  std::vector<int> recommit;
  // The hard time_limit, from the reservation's epoch (when it was placed).
  if (auto limit = federation::ParseDurationMs(job.spec.time_limit());
      limit.ok() && !job.spec.time_limit().empty() &&
      now - static_cast<int64_t>(run.epoch()) > *limit) {
    StopRun(job, StrCat("ran past its time_limit of ", job.spec.time_limit()),
            core_->config().preemption_grace_ms);
    RecordUsage(job, run, now);
    job.state = JobState::kFailed;
    job.reason = StrCat("stopped: attempt ", job.attempt, " ran past its time_limit of ",
                        job.spec.time_limit());
    job.updated_at_unix_ms = now;
    if (Save(&job)) spdlog::warn("job {}: {}", job.id, job.reason);
    last_ok_.erase(job.id);
    return;
  }
  // The home site's quota hold, when it runs no ranks: it only has to stay
  // held. A home site that is down keeps it (restored at its restart); one
  // that says it is gone means the job runs without quota: run it again.
  if (QuotaOnly(run) && answers.size() > static_cast<size_t>(run.sites_size())) {
    const auto& q = answers.back();
    if (q.ok() && q->state() == v1::SliceStatusResponse::UNKNOWN) {
      Fail(job, run, StrCat("the quota hold at home site ", run.quota_site(), " was lost"), "");
      return;
    }
    if (q.ok() && q->state() == v1::SliceStatusResponse::HELD) {
      spdlog::info("job {}: re-sending the quota commit to {}", job.id, run.quota_site());
      if (auto c = CommitAll(job, run, {}, QuotaCommit::kAwait); !c.ok()) {
        Fail(job, run, std::string(c.message()), "");
        return;
      }
    }
  }
  for (int i = 0; i < run.sites_size(); ++i) {
    const std::string& site = run.sites(i).site();
    if (!seen.contains(site)) seen[site] = now;  // first sight, e.g. after a restart
    const auto& st = answers[i];
    if (!st.ok()) {
      if (now - seen[site] > lease_ms_) {
        Fail(job, run,
             StrCat("site ", site, " silent for ", (now - seen[site]) / 1000,
                    " s: ", st.status().message()),
             site);
        return;
      }
      continue;
    }
    int64_t gap = now - seen[site];
    int64_t worst = worst_gap_ms_.load();
    while (gap > worst && !worst_gap_ms_.compare_exchange_weak(worst, gap)) {
    }
    seen[site] = now;
    const auto state = st->state();
    if (state == v1::SliceStatusResponse::HELD) {
      // The decision is durable but this site never got its commit (the
      // coordinator restarted in between): re-drive it.
      spdlog::info("job {}: re-sending the commit to {}", job.id, site);
      recommit.push_back(i);
    } else if (state == v1::SliceStatusResponse::SUCCEEDED) {
      ++succeeded;
    } else if (state == v1::SliceStatusResponse::FAILED && !st->preempted_by().empty()) {
      Preempted(job, run, site, st->preempted_by());
      return;
    } else if (state == v1::SliceStatusResponse::FAILED ||
               state == v1::SliceStatusResponse::UNKNOWN) {
      std::string codes;
      for (const auto& [rank, code] : st->exit_codes()) {
        if (code != 0) codes += StrCat(codes.empty() ? "" : ", ", "rank ", rank, " exit ", code);
      }
      // Only a silent site is avoided next time: ranks that exited non-zero,
      // a slice stopped by its lease, or a slice lost in a gateway restart
      // say nothing against the site.
      const bool lost = state == v1::SliceStatusResponse::UNKNOWN;
      Fail(job, run,
           StrCat("site ", site, ": ", lost ? "lost the slice (gateway restarted?)" : "",
                  st->message(), codes.empty() ? "" : StrCat(" (", codes, ")")),
           "");
      return;
    }
  }
  if (!recommit.empty()) {
    if (auto c = CommitAll(job, run, recommit, QuotaCommit::kNone); !c.ok()) {
      Fail(job, run, std::string(c.message()), "");
      return;
    }
  }
  if (succeeded == run.sites_size()) {
    RecordUsage(job, run, now);
    ReleaseQuota(job, run, "the job succeeded");
    job.state = JobState::kSucceeded;
    job.reason = StrCat("all ", run.world_size(), " rank(s) exited 0 on ", run.sites_size(),
                        " site(s)");
    job.updated_at_unix_ms = now;
    if (Save(&job)) spdlog::info("job {} succeeded", job.id);
    last_ok_.erase(job.id);
  }
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
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = core_->clock()->NowMs();
  job.state = JobState::kPending;
  job.reason = StrCat(why, "; will run again (preemption does not count against max_attempts)");
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
    job.reason = StrCat("attempt ", job.attempt, " failed: ", reason, "; retrying",
                        bad_site.empty() ? "" : StrCat(" without ", bad_site));
  }
  if (Save(&job)) spdlog::warn("job {}: {}", job.id, job.reason);
  last_ok_.erase(job.id);
}

void Coordinator::ReleaseQuota(const JobRecord& job, const v1::RunPlan& run,
                               const std::string& why) {
  if (!QuotaOnly(run)) return;  // else the slice's site releases it with the slice
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
  if (QuotaOnly(run)) sites.push_back(run.quota_site());
  for (int i : RemoteFirst(sites)) {
    const std::string& site = sites[i];
    v1::AbortRequest a;
    *a.mutable_key() = Key(job, run.epoch());
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
