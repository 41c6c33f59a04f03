// The participant's life (start, sweeper, stop) and the reservation calls
// of the two-phase protocol: Prepare, Abort and Status. Commit, the sweep,
// restart recovery, quotas, nodes and logs each have a file of their own.
#include "gateway/jobs/participant.h"
#include "gateway/jobs/checkpoint_files.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "base/str_cat.h"
#include "federation/clock.h"
#include "federation/names.h"
#include "federation/saturating.h"
#include "gateway/jobs/crash_point.h"
#include "gateway/jobs/participant_limits.h"
#include "gateway/jobs/retention.h"

namespace fedgate::gateway {

using namespace participant_limits;  // NOLINT: the bounds of this room

absl::Status participant_limits::CheckJobId(const std::string& id) {
  if (federation::IsValidJobId(id)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("malformed job id \"", id.substr(0, 40), "\" (want j- and 16 hex digits)"));
}

namespace {

std::map<std::string, uint32_t> NodeSizes(const Config& c) {
  std::map<std::string, uint32_t> out;
  for (const auto& n : c.nodes) out[n.name] = n.gpus;
  return out;
}

// Configs from files always name a work folder (config.cc); tests and tools
// may not.
Config WithWorkDir(Config c) {
  if (c.executor.work_dir.empty()) c.executor.work_dir = c.data_dir + "/work";
  return c;
}

}  // namespace

Participant::Participant(const Config& config, const federation::Clock* clock, Store* store,
                         size_t max_finished)
    : config_(WithWorkDir(config)),
      clock_(clock),
      max_finished_(max_finished),
      store_(store),
      nodes_(config.nodes),
      ledger_(NodeSizes(config)) {
  ledger_.SetPortRange(config_.executor.port_lo, config_.executor.port_hi);
  // A port another program listens on is not handed out (checked where the
  // node's address is this host's; another host's ports cannot be tried).
  std::map<std::string, std::string> addresses;
  for (const auto& n : config.nodes) addresses[n.name] = n.address;
  ledger_.SetPortInUse([addresses](const std::vector<federation::NodeRequest>& nodes, uint32_t port) {
    for (const auto& n : nodes) {
      auto a = addresses.find(n.node);
      if (a != addresses.end() && PortTakenHere(a->second, port)) return true;
    }
    return false;
  });
  for (const auto& q : config_.tenants) (void)quota_.SetQuota(q);
}

Participant::~Participant() { Stop(); }

void Participant::SetExecutor(std::string shim, RankUser user) {
  auto exec = std::make_unique<ProcessExecutor>();
  exec->Configure(std::move(shim), std::move(user));
  runner_ = std::move(exec);
}

std::string Participant::WorkDir(const std::string& job) const {
  return StrCat(config_.executor.work_dir, "/", job);
}

void Participant::Start() {
  LoadQuotas();
  RefreshNodes();  // the backend's nodes first: re-attached holds land on them
  CleanUpAfterRestart();
  sweeper_ = std::thread([this] { RunSweeper(); });
}

void Participant::RunSweeper() {
  int64_t next_retention = 0;
  auto next_nodes = std::chrono::steady_clock::now();
  while (!stop_) {
    Sweep();
    if (std::chrono::steady_clock::now() >= next_nodes) {
      RefreshNodes();
      next_nodes = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(config_.advertise.interval_ms);
    }
    // Once a minute (and at start): logs and job folders past retention.
    const int64_t wall = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    if (wall >= next_retention) {
      std::set<std::string> live;
      {
        std::lock_guard lock(mu_);
        for (const auto& [key, s] : slices_) {
          if (!s.released) live.insert(key.first);
        }
        for (const auto& [key, h] : ledger_.holds()) live.insert(key.first);
      }
      ApplyRetention(config_.data_dir + "/jobs", config_.executor.work_dir, wall,
                     config_.retention.logs_ms, config_.retention.jobs_ms, live);
      next_retention = wall + 60'000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Participant::Detach() {
  if (!runner_->supervised()) {
    Stop();
    return;
  }
  size_t running = 0;
  {
    std::lock_guard lock(mu_);
    detached_ = true;
    running = slices_.size();
  }
  if (stop_.exchange(true)) return;
  if (sweeper_.joinable()) sweeper_.join();
  spdlog::info("leaving {} slice(s) running under their shims", running);
}

void Participant::Stop() {
  {
    std::lock_guard lock(mu_);
    if (detached_) return;  // supervised ranks were left running on purpose
  }
  if (stop_.exchange(true)) return;
  if (sweeper_.joinable()) sweeper_.join();
  // Ranks are left running: they stop by themselves when their lease lapses
  // only while a gateway sweeps, so stop them here instead.
  std::vector<std::string> cgroups;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, s] : slices_) {
      if (s.state == SliceState::RUNNING) StopSliceLocked(&s, "gateway shutting down");
    }
    for (auto& [key, s] : slices_) {
      for (auto& r : s.ranks) {
        if (!r.exited) runner_->Signal(r.pid, SIGKILL);
      }
      cgroups.push_back(s.cgroup);
    }
  }
  for (const auto& cg : cgroups) KillCgroup(cg);
  // Released slices' cgroups still waiting for their processes to exit.
  for (int i = 0; i < 50 && reaper_.size() > 0; ++i) {
    reaper_.Sweep();
    if (reaper_.size() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Participant::StopSliceLocked(Slice* s, const std::string& why, int64_t grace_ms,
                                  bool keep_hold) {
  if (s->stopping) {
    // A stop that frees the GPUs (a failed GPU, the lease, an abort) wins
    // over a halt that keeps them.
    if (s->keep_after_stop && !keep_hold) {
      s->keep_after_stop = false;
      s->message = why;
      ledger_.MarkStopping(s->key.job_id(), s->key.epoch());
    }
    return;
  }
  if (s->parked && keep_hold) return;  // halted already
  s->stopping = true;
  s->keep_after_stop = keep_hold;
  s->message = why;
  if (s->state == SliceState::RUNNING || s->state == SliceState::HELD) s->state = SliceState::FAILED;
  if (s->parked) {
    // No rank runs: the next sweep frees the GPUs.
    s->parked = false;
    ledger_.MarkStopping(s->key.job_id(), s->key.epoch());
    return;
  }
  if (!keep_hold) ledger_.MarkStopping(s->key.job_id(), s->key.epoch());
  // A launching slice has no ranks yet: AttachLaunched signals them.
  for (auto& r : s->ranks) {
    if (!r.exited) runner_->Signal(r.pid, SIGTERM);
  }
  s->kill_at_ms = federation::SatAdd(clock_->NowMs(), grace_ms > 0 ? grace_ms : kKillGraceMs);
  spdlog::info("job {}: stopping its ranks here{}: {}", s->key.job_id(),
               keep_hold ? " (GPUs kept for the next world)" : "", why);
}

absl::StatusOr<v1::PrepareResponse> Participant::Prepare(const std::string& from,
                                                         const v1::PrepareRequest& req) {
  const auto& key = req.key();
  if (auto st = CheckJobId(key.job_id()); !st.ok()) return st;
  std::vector<federation::NodeRequest> want;
  for (const auto& n : req.nodes()) want.push_back({n.node(), n.gpus()});
  std::map<std::string, uint32_t> quota_gpus;
  for (const auto& [model, n] : req.quota_gpus()) {
    if (n == 0 || n > kMaxWorldSize) {
      return absl::InvalidArgumentError(StrCat("quota_gpus.", model.substr(0, 64), " out of range"));
    }
    quota_gpus[model] = n;
  }
  const int64_t ttl = federation::ClampMs(req.hold_ttl_ms(), kMinHoldTtlMs, kMaxHoldTtlMs);
  v1::PrepareResponse resp;
  absl::Status preempting;  // not OK when victims are being stopped for this job
  {
    std::lock_guard lock(mu_);
    const int64_t now = clock_->NowMs();
    if (!quota_gpus.empty()) {
      // The tenant's quota first: this site is its home.
      auto q = quota_.Prepare(key.job_id(), key.attempt(), key.epoch(), from, req.tenant(),
                              quota_gpus, now, ttl);
      if (!q.ok()) return q.status();
      resp.set_quota_class(federation::QuotaClassName(q->cls));
      if (want.empty()) {
        spdlog::info("job {} attempt {} epoch {}: holding {} GPU(s) of tenant {}'s quota ({})",
                     key.job_id(), key.attempt(), key.epoch(), q->total(), req.tenant(),
                     resp.quota_class());
        // The tenant's use reaches the ad with the next advertise interval:
        // a re-advertise here would sit on every reservation's critical path.
        return resp;
      }
    }
    std::vector<federation::ReservationLedger::HoldKey> stopped;
    auto hold = ledger_.Prepare(key.job_id(), key.attempt(), key.epoch(),
                                {from, req.tenant(), req.priority()}, want, now, ttl, &stopped,
                                req.pick_master_port());
    if (!quota_gpus.empty() && !hold.ok()) (void)quota_.Abort(key.job_id(), key.epoch(), from);
    if (!hold.ok() && !(req.preempt() && absl::IsResourceExhausted(hold.status()))) {
      return hold.status();
    }
    if (!hold.ok()) {
      preempting = PreemptLocked(key.job_id(), want, hold.status());
    } else {
      // A newer epoch proves its coordinator moved on from older slices.
      for (const auto& k : stopped) {
        auto it = slices_.find(k);
        if (it != slices_.end()) StopSliceLocked(&it->second, "replaced by a newer attempt");
      }
      for (const auto& g : hold->gpus) {
        auto* h = resp.add_holds();
        h->set_node(g.node);
        for (uint32_t i : g.indices) h->add_indices(i);
      }
      resp.set_master_port(hold->master_port);
    }
  }
  if (!preempting.ok()) {
    if (on_change_) on_change_();  // victims leave the preemptible count
    return preempting;
  }
  if (auto st = ReserveInBackend(req, resp); !st.ok()) return st;
  CrashPoint("participant-after-prepare");
  spdlog::info("job {} attempt {} epoch {}: holding GPUs for {}", key.job_id(), key.attempt(),
               key.epoch(), from);
  if (on_change_) on_change_();
  return resp;
}

absl::Status Participant::ReserveInBackend(const v1::PrepareRequest& req,
                                           const v1::PrepareResponse& resp) {
  const auto& key = req.key();
  {
    std::lock_guard lock(mu_);
    // A duplicate Prepare: the backend holds it already.
    if (allocs_.contains({key.job_id(), key.epoch()})) return absl::OkStatus();
  }
  if (backend_->Kind() == "process") return absl::OkStatus();
  // The hold becomes real where a resource manager must agree (Slurm: an
  // allocation per node), so nobody else takes the GPUs before the commit.
  std::map<std::string, uint32_t> gpus;
  for (const auto& h : resp.holds()) gpus[h.node()] += h.indices_size();
  auto allocs = backend_->Reserve(StrCat("fedgate-", key.job_id(), "-", key.attempt()), gpus,
                                  req.tenant(), runner_->user(), req.image());
  std::lock_guard lock(mu_);
  const federation::Hold* h = ledger_.Find(key.job_id(), key.epoch());
  if (allocs.ok()) allocs_[{key.job_id(), key.epoch()}] = std::move(*allocs);
  if (allocs.ok() && h != nullptr) return absl::OkStatus();
  // Refused, or aborted meanwhile: what was reserved is given back by the
  // next sweep, and the hold goes.
  if (h != nullptr && h->state == federation::HoldState::kPrepared) {
    ledger_.Release(key.job_id(), key.epoch());
  }
  const absl::Status failed =
      allocs.ok() ? absl::AbortedError("aborted while the backend reserved") : allocs.status();
  spdlog::warn("job {}: {}", key.job_id(), std::string(failed.message()));
  return failed;
}

absl::StatusOr<v1::AbortResponse> Participant::Abort(const std::string& from,
                                                     const v1::AbortRequest& req) {
  const auto& key = req.key();
  if (auto st = CheckJobId(key.job_id()); !st.ok()) return st;
  if (req.keep_hold()) return Halt(from, req);
  bool gpus_moved = false;  // only then is the ad out of date
  {
    std::lock_guard lock(mu_);
    if (auto st = CheckTermLocked(key, from); !st.ok()) return st;
    const size_t quota_holds = quota_.holds().size();
    if (auto st = quota_.Abort(key.job_id(), key.epoch(), from); !st.ok()) return st;
    quota_dirty_ = quota_dirty_ || quota_.holds().size() != quota_holds;
    const size_t gpu_holds = ledger_.holds().size();
    auto stopping = ledger_.Abort(key.job_id(), key.attempt(), key.epoch(), from);
    if (!stopping.ok()) return stopping.status();
    gpus_moved = !stopping->empty() || ledger_.holds().size() != gpu_holds;
    const int64_t grace = federation::ClampMs(req.grace_ms(), 0, 10 * 60 * 1000);
    for (const auto& k : *stopping) {
      auto it = slices_.find(k);
      if (it != slices_.end()) {
        StopSliceLocked(&it->second, StrCat("aborted: ", req.reason().substr(0, 512)), grace);
        it->second.aborted = true;
      }
    }
  }
  if (gpus_moved && on_change_) on_change_();
  return v1::AbortResponse();
}

absl::StatusOr<v1::SliceStatusResponse> Participant::Status(const std::string& from,
                                                            const v1::SliceStatusRequest& req) {
  if (auto st = CheckJobId(req.key().job_id()); !st.ok()) return st;
  v1::SliceStatusResponse resp;
  bool checkpoints = false;
  const auto grants = VerifyGrants(req.grants());  // signatures: not under the lock
  const auto brought = Brought(req);                // parsed: not under the lock
  std::optional<StoredJobTerm> new_term;
  FenceWrite fence;
  {
    std::lock_guard lock(mu_);
    if (auto st = CheckTermLocked(req.key(), from, grants, &new_term,
                                  brought ? &*brought : nullptr);
        !st.ok()) {
      // A renewal of an older term: answered with the job's term and
      // coordinator here, so the old coordinator steps down (nothing renewed).
      auto it = copies_.find(req.key().job_id());
      if (!absl::IsFailedPrecondition(st) || it == copies_.end()) return st;
      resp.set_moved_term(it->second.term.term);
      resp.set_moved_to(it->second.term.coordinator);
      resp.set_message(std::string(st.message()));
      return resp;
    }
    if (auto st = StatusLocked(from, req, &resp, &checkpoints, &fence); !st.ok()) return st;
  }
  WriteFence(fence);
  // A term accepted is stored before the new coordinator hears so.
  if (auto st = PersistTerm(req.key().job_id(), new_term); !st.ok()) return st;
  if (req.has_copy()) {
    resp.set_copy_version(KeepJobCopy(from, req.key(), req.copy()));
    // The record may have changed who can take the job over, and with it
    // the fence written above.
    FenceWrite again;
    {
      std::lock_guard lock(mu_);
      auto it = slices_.find({req.key().job_id(), req.key().epoch()});
      if (!fence.path.empty() && it != slices_.end() && !it->second.stopping) {
        again = FenceOfLocked(it->second);
      }
    }
    if (again.deadline_ms != fence.deadline_ms) WriteFence(again);
  }
  if (!checkpoints) return resp;
  // The job's checkpoints here, read without the lock; a copy the
  // coordinator asks for runs in the background.
  const std::string dir = CheckpointDir(req.key().job_id());
  for (uint64_t step : ListCheckpointSteps(dir)) resp.add_checkpoint_steps(step);
  if (req.checkpoint_step() > 0 && req.checkpoint_to_size() > 0 && on_checkpoint_ask_) {
    on_checkpoint_ask_(req.key().job_id(), req.checkpoint_step(),
                       {req.checkpoint_to().begin(), req.checkpoint_to().end()});
  }
  return resp;
}

absl::Status Participant::StatusLocked(const std::string& from, const v1::SliceStatusRequest& req,
                                       v1::SliceStatusResponse* resp, bool* checkpoints,
                                       FenceWrite* fence) {
  if (auto st = ledger_.CheckOwner(req.key().job_id(), from); !st.ok()) return st;
  resp->set_copy_version(CopyVersionLocked(req.key().job_id()));
  auto it = slices_.find({req.key().job_id(), req.key().epoch()});
  const int64_t lease = federation::ClampMs(req.lease_ms(), kMinLeaseMs, kMaxLeaseMs);
  // A quota hold (this site is the tenant's home) lives on the same lease.
  const federation::QuotaHold* quota =
      quota_.Renew(req.key().job_id(), req.key().epoch(), clock_->NowMs(), lease);
  if (auto c = copies_.find(req.key().job_id()); c != copies_.end()) c->second.lease_ms = lease;
  if (it == slices_.end()) {
    if (ledger_.Find(req.key().job_id(), req.key().epoch()) != nullptr) {
      resp->set_state(SliceState::HELD);
    } else if (quota != nullptr) {
      resp->set_state(quota->committed ? SliceState::RUNNING : SliceState::HELD);
      resp->set_message(StrCat("holds ", quota->total(), " GPU(s) of tenant ", quota->tenant,
                               "'s quota (", federation::QuotaClassName(quota->cls), ")"));
    } else {
      resp->set_state(SliceState::UNKNOWN);
    }
    return absl::OkStatus();
  }
  Slice& s = it->second;
  const bool held = s.parked || (s.stopping && s.keep_after_stop);
  if ((s.state == SliceState::RUNNING && !s.stopping) || held) {
    s.lease_ms = lease;
    s.lease_deadline_ms = federation::SatAdd(clock_->NowMs(), s.lease_ms);
    if (!s.ranks.empty() && !s.stopping) *fence = FenceOfLocked(s);
  }
  resp->set_state(s.state);
  resp->set_message(s.message);
  resp->set_preempted_by(s.preempted_by);
  resp->set_restart(s.restart);
  resp->set_held(held);
  resp->set_parked(s.parked);
  if (s.released) s.reported = true;  // the coordinator has its final state
  for (const auto& r : s.ranks) {
    if (r.exited) (*resp->mutable_exit_codes())[r.rank] = r.code;
  }
  *checkpoints = s.checkpoint_keep > 0 && !s.released;
  return absl::OkStatus();
}

absl::StatusOr<v1::AbortResponse> Participant::Halt(const std::string& from,
                                                    const v1::AbortRequest& req) {
  const auto& key = req.key();
  std::lock_guard lock(mu_);
  if (auto st = ledger_.CheckOwner(key.job_id(), from); !st.ok()) return st;
  if (auto st = CheckTermLocked(key, from); !st.ok()) return st;
  auto it = slices_.find({key.job_id(), key.epoch()});
  if (it == slices_.end() || it->second.released || it->second.key.attempt() != key.attempt()) {
    return absl::NotFoundError(
        StrCat("no running slice of job ", key.job_id(), " at epoch ", key.epoch()));
  }
  const int64_t grace = federation::ClampMs(req.grace_ms(), 0, 10 * 60 * 1000);
  StopSliceLocked(&it->second, StrCat("halted: ", req.reason().substr(0, 512)), grace,
                  /*keep_hold=*/true);
  return v1::AbortResponse();
}

}  // namespace fedgate::gateway
