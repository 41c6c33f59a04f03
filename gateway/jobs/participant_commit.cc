// Commit: the second phase of a reservation starts the slice's ranks on the
// hold's GPUs. Three short steps under the lock (check, commit the hold and
// mark the slice launching, attach the started ranks) around the slow work
// done without it: the owner file and work folder, the cgroup, spawning
// each rank, and the durable slice and usage rows.
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "base/str_cat.h"
#include "federation/clock.h"
#include "federation/dataset.h"
#include "federation/saturating.h"
#include "gateway/jobs/crash_point.h"
#include "gateway/jobs/participant.h"
#include "gateway/jobs/launch_plan.h"
#include "gateway/jobs/participant_limits.h"

namespace fedgate::gateway {

using namespace participant_limits;  // NOLINT: the bounds of this room

absl::Status Participant::CheckCommitRequest(const v1::CommitRequest& req) const {
  if (auto st = CheckJobId(req.key().job_id()); !st.ok()) return st;
  if (req.command().empty()) return absl::InvalidArgumentError("commit without a command");
  size_t command_bytes = 0, env_bytes = 0;
  for (const auto& a : req.command()) command_bytes += a.size();
  for (const auto& [k, v] : req.env()) env_bytes += k.size() + v.size();
  if (command_bytes > kMaxCommandBytes || env_bytes > kMaxEnvBytes) {
    return absl::InvalidArgumentError("command or env too large");
  }
  if (req.world_size() == 0 || req.world_size() > kMaxWorldSize) {
    return absl::InvalidArgumentError(StrCat("world_size ", req.world_size(), " out of range"));
  }
  if (req.master_port() == 0 || req.master_port() > 65535) {
    return absl::InvalidArgumentError(StrCat("master_port ", req.master_port(), " out of range"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint32_t>> Participant::MatchRanksToHold(
    const federation::Hold& held, const v1::CommitRequest& req) {
  std::map<std::string, std::vector<uint32_t>> gpus;
  for (const auto& g : held.gpus) gpus[g.node] = g.indices;
  std::map<std::string, size_t> used;
  std::set<uint32_t> ranks;
  std::vector<uint32_t> gpu_of(req.ranks_size());
  for (int i = 0; i < req.ranks_size(); ++i) {
    const auto& r = req.ranks(i);
    auto it = gpus.find(r.node());
    if (it == gpus.end() || used[r.node()] >= it->second.size()) {
      return absl::InvalidArgumentError(StrCat("rank ", r.rank(), " on node \"",
                                               r.node().substr(0, 64), "\" has no held GPU there"));
    }
    if (r.rank() >= req.world_size() || !ranks.insert(r.rank()).second ||
        r.local_rank() >= r.local_world_size() || r.local_world_size() > req.world_size()) {
      return absl::InvalidArgumentError(StrCat("rank ", r.rank(), " is out of range or repeated"));
    }
    gpu_of[i] = it->second[used[r.node()]++];
  }
  for (const auto& [node, idx] : gpus) {
    if (used[node] != idx.size()) {
      return absl::InvalidArgumentError(
          StrCat(used[node], " rank(s) for the ", idx.size(), " GPU(s) held on node ", node));
    }
  }
  return gpu_of;
}

absl::StatusOr<v1::CommitResponse> Participant::Commit(const std::string& from,
                                                       const v1::CommitRequest& req) {
  if (auto st = CheckCommitRequest(req); !st.ok()) return st;
  const auto& key = req.key();
  std::optional<federation::QuotaHold> quota_row;  // durable before the answer
  bool duplicate = false;  // the slice runs already
  bool relaunch = false;
  {
    std::lock_guard lock(mu_);
    if (auto st = ledger_.CheckOwner(key.job_id(), from); !st.ok()) return st;
    if (auto st = CheckTermLocked(key, from); !st.ok()) return st;
    if (quota_.Find(key.job_id(), key.epoch()) != nullptr) {
      // The tenant's home site: from now on the quota hold lives on its lease.
      auto q = quota_.Commit(key.job_id(), key.attempt(), key.epoch(), from, clock_->NowMs(),
                             federation::ClampMs(req.lease_ms(), kMinLeaseMs, kMaxLeaseMs));
      if (!q.ok()) return q.status();
      quota_row = *q;
    } else if (req.ranks_size() == 0) {
      return absl::NotFoundError(
          StrCat("no live quota hold of job ", key.job_id(), " at epoch ", key.epoch()));
    }
    auto existing = slices_.find({key.job_id(), key.epoch()});
    duplicate = existing != slices_.end();
    if (duplicate && req.restart() > existing->second.restart && !req.park()) {
      relaunch = true;  // the next world on the same GPUs
    } else if (req.ranks_size() > 0 && !duplicate) {
      const federation::Hold* held = ledger_.Find(key.job_id(), key.epoch());
      if (held == nullptr || held->attempt != key.attempt()) {
        return absl::NotFoundError(
            StrCat("no live hold of job ", key.job_id(), " at epoch ", key.epoch()));
      }
      if (auto fits = MatchRanksToHold(*held, req); !fits.ok()) return fits.status();
    }
  }
  if (quota_row) PersistQuotaHold(*quota_row);
  if (relaunch) return Relaunch(from, req);
  if (req.ranks_size() == 0 || duplicate) return v1::CommitResponse();
  // Who may read this job's logs once its slices are forgotten: a file
  // beside them, not a map in memory that would grow with every job.
  if (auto st = WriteLogOwner(key.job_id(), from); !st.ok()) return st;
  if (auto st = PrepareWorkDir(key.job_id(), req.checkpoint_keep() > 0); !st.ok()) return st;
  // The record before the ranks: their shims' fence counts the time a
  // takeover needs, which the record's run plan says (a commit that fails
  // leaves it to the next sweep, as a slice that ended would).
  if (req.has_copy()) (void)KeepJobCopy(from, key, req.copy());
  std::string cgroup = CreateSliceCgroup(cgroups_, StrCat(key.job_id(), "-", key.epoch()),
                                         config_.executor.memory_limit, config_.executor.pids_limit);
  absl::StatusOr<LaunchPlan> plan;
  {
    std::lock_guard lock(mu_);
    plan = CommitHoldLocked(from, req, cgroup);
  }
  if (absl::IsAlreadyExists(plan.status())) return v1::CommitResponse();  // its twin won
  if (!plan.ok()) {
    reaper_.Remove(cgroup);
    return plan.status();
  }
  Slice launched;
  v1::SliceRecord rec;
  if (req.park()) {
    FillRecord(*plan, req, &rec);
  } else {
    LaunchRanks(*plan, req, &launched, &rec);
  }
  RecordSlice(*plan, launched, rec);
  AttachLaunched(key, std::move(launched));
  CrashPoint("participant-after-commit");
  return v1::CommitResponse();
}

absl::Status Participant::PrepareWorkDir(const std::string& job, bool checkpoints) const {
  // The job's working directory, its ranks' HOME: theirs, outside data_dir;
  // its checkpoint folder inside it (kept across restarts and attempts,
  // removed with it under retention).
  std::vector<std::string> dirs = {WorkDir(job)};
  if (checkpoints) dirs.push_back(CheckpointDir(job));
  const RankUser& user = runner_->user();
  for (const auto& dir : dirs) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace, ec);
    if (user.switch_user && ::chown(dir.c_str(), user.uid, user.gid) != 0) {
      return absl::InternalError(
          StrCat("cannot hand ", dir, " to ", user.name, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// ALREADY_EXISTS: a duplicate commit found the slice there (it answers OK).
absl::StatusOr<Participant::LaunchPlan> Participant::CommitHoldLocked(const std::string& from,
                                                                      const v1::CommitRequest& req,
                                                                      std::string cgroup) {
  const auto& key = req.key();
  if (slices_.contains({key.job_id(), key.epoch()})) {
    return absl::AlreadyExistsError("already running");
  }
  // Checked again: the hold may have gone while the lock was let go.
  const federation::Hold* held = ledger_.Find(key.job_id(), key.epoch());
  if (held == nullptr || held->attempt != key.attempt()) {
    return absl::NotFoundError(StrCat("no live hold of job ", key.job_id(), " at epoch ",
                                      key.epoch(), " (aborted or expired during the commit)"));
  }
  auto gpu_of = MatchRanksToHold(*held, req);
  if (!gpu_of.ok()) return gpu_of.status();
  auto dataset_dirs = DatasetDirs(req);
  if (!dataset_dirs.ok()) return dataset_dirs.status();
  auto hold = ledger_.Commit(key.job_id(), key.attempt(), key.epoch(), from, clock_->NowMs());
  if (!hold.ok()) return hold.status();
  LaunchPlan plan = PlanLaunchLocked(*hold, std::move(*gpu_of), req, std::move(cgroup));
  plan.dataset_dirs = std::move(*dataset_dirs);
  Slice s;
  s.key = key;
  s.launching = !req.park();
  s.parked = req.park();
  if (req.park()) s.state = SliceState::HELD;
  s.restart = req.restart();
  s.keep_hold = req.keep_hold();
  s.checkpoint_keep = req.checkpoint_keep();
  s.world_sites.assign(req.world_sites().begin(), req.world_sites().end());
  s.datasets.assign(req.datasets().begin(), req.datasets().end());
  s.preemptible = req.preemptible();
  s.started_at_ms = plan.started_at_ms;
  for (const auto& g : hold->gpus) s.gpus_by_node[g.node] += g.indices.size();
  s.lease_ms = plan.lease_ms;
  s.lease_deadline_ms = federation::SatAdd(plan.started_at_ms, s.lease_ms);
  s.cgroup = plan.cgroup;
  slices_[{key.job_id(), key.epoch()}] = std::move(s);
  return plan;
}

absl::StatusOr<std::map<std::string, std::string>> Participant::DatasetDirs(
    const v1::CommitRequest& req) const {
  std::map<std::string, std::string> out;
  for (const auto& name : req.datasets()) {
    auto d = datasets_ == nullptr ? std::nullopt : datasets_->Find(name);
    if (!d) {
      return absl::FailedPreconditionError(
          StrCat("dataset \"", name.substr(0, 100), "\" is not held at ", config_.site,
                 " (no verified copy here); no rank starts without its data"));
    }
    out[name] = d->path;
  }
  return out;
}

Participant::LaunchPlan Participant::PlanLaunchLocked(const federation::Hold& hold,
                                                      std::vector<uint32_t> gpu_of,
                                                      const v1::CommitRequest& req,
                                                      std::string cgroup) const {
  const auto& key = req.key();
  LaunchPlan plan;
  plan.hold = hold;
  plan.gpu_of = std::move(gpu_of);
  if (auto a = allocs_.find({key.job_id(), key.epoch()}); a != allocs_.end()) {
    plan.reservation = a->second;
  }
  for (const auto& n : nodes_) {
    plan.node_addr[n.name] = n.address;
    plan.node_model[n.name] = n.gpu_model;
    if (!n.devices.empty()) plan.node_devices[n.name] = n.devices;
  }
  plan.work = WorkDir(key.job_id());
  plan.cgroup = std::move(cgroup);
  plan.started_at_ms = clock_->NowMs();
  plan.lease_ms = federation::ClampMs(req.lease_ms(), kMinLeaseMs, kMaxLeaseMs);
  plan.fence = {FencePath(key),
                federation::SatAdd(plan.started_at_ms, plan.lease_ms +
                                                           FenceExtraLocked(key.job_id(), plan.lease_ms) +
                                                           kShimFenceMarginMs)};
  return plan;
}

std::vector<std::pair<std::string, std::string>> Participant::RankEnvironment(
    const LaunchPlan& plan, const v1::CommitRequest& req, int i) const {
  const auto& key = req.key();
  const auto& r = req.ranks(i);
  std::vector<std::pair<std::string, std::string>> env(req.env().begin(), req.env().end());
  env.emplace_back("MASTER_ADDR", req.master_addr());
  env.emplace_back("MASTER_PORT", std::to_string(req.master_port()));
  env.emplace_back("WORLD_SIZE", std::to_string(req.world_size()));
  env.emplace_back("RANK", std::to_string(r.rank()));
  env.emplace_back("LOCAL_RANK", std::to_string(r.local_rank()));
  env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(r.local_world_size()));
  env.emplace_back("GROUP_RANK", std::to_string(r.group_rank()));
  const uint32_t gpu = plan.gpu_of[i];
  auto devices = plan.node_devices.find(r.node());
  env.emplace_back("CUDA_VISIBLE_DEVICES", devices != plan.node_devices.end() && gpu < devices->second.size()
                                               ? devices->second[gpu]
                                               : std::to_string(gpu));
  env.emplace_back("FEDGATE_JOB_ID", key.job_id());
  env.emplace_back("FEDGATE_SITE", config_.site);
  env.emplace_back("FEDGATE_ATTEMPT", std::to_string(key.attempt()));
  auto addr = plan.node_addr.find(r.node());
  env.emplace_back("FEDGATE_NODE_ADDR", addr == plan.node_addr.end() ? "" : addr->second);
  env.emplace_back("FEDGATE_RESTART", std::to_string(req.restart()));
  if (req.checkpoint_keep() > 0) {
    env.emplace_back("FEDGATE_CHECKPOINT_DIR", CheckpointDir(key.job_id()));
  }
  for (const auto& [name, dir] : plan.dataset_dirs) {
    env.emplace_back(federation::DatasetEnvName(name), dir);
  }
  // Written with the deadline (Unix seconds) before a preemption's SIGTERM,
  // where the rank can read it (data_dir is not readable to ranks).
  env.emplace_back("FEDGATE_PREEMPT_FILE",
                   StrCat(plan.work, "/.fedgate-preempt-", key.attempt(), "-", r.rank()));
  return env;
}

void Participant::FillRecord(const LaunchPlan& plan, const v1::CommitRequest& req,
                             v1::SliceRecord* rec) {
  rec->set_cgroup(plan.cgroup);
  rec->set_coordinator(plan.hold.coordinator);
  rec->set_tenant(plan.hold.tenant);
  rec->set_priority(plan.hold.priority);
  for (const auto& g : plan.hold.gpus) {
    auto* n = rec->add_gpus();
    n->set_node(g.node);
    for (uint32_t i : g.indices) n->add_indices(i);
  }
  rec->set_lease_ms(plan.lease_ms);
  rec->set_preemptible(req.preemptible());
  rec->set_started_at_unix_ms(plan.started_at_ms);
  rec->set_master_port(plan.hold.master_port);
  for (const auto& [node, alloc] : plan.reservation) (*rec->mutable_backend_ids())[node] = alloc.first;
  rec->set_restart(req.restart());
  rec->set_keep_hold(req.keep_hold());
  rec->set_checkpoint_keep(req.checkpoint_keep());
  *rec->mutable_world_sites() = req.world_sites();
  *rec->mutable_datasets() = req.datasets();
}

void Participant::LaunchRanks(const LaunchPlan& plan, const v1::CommitRequest& req, Slice* out,
                              v1::SliceRecord* rec) {
  const auto& key = req.key();
  FillRecord(plan, req, rec);
  WriteFence(plan.fence);  // before any rank: a gateway that dies now leaves none unfenced
  for (int i = 0; i < req.ranks_size(); ++i) {
    const auto& r = req.ranks(i);
    auto env = RankEnvironment(plan, req, i);
    const std::string preempt_file = env.back().second;
    const std::string log = LogPath(key.job_id(), key.attempt(), r.rank());
    RankProc p;
    p.rank = r.rank();
    // One exit file per world: a restarted rank must not read its
    // predecessor's code.
    p.exit_file = StrCat(log.substr(0, log.size() - 4),
                         req.restart() > 0 ? StrCat("-r", req.restart()) : "", ".exit");
    auto argv = backend_->RankCommand(plan.reservation, r.node(),
                                      StrCat("fedgate-", key.job_id(), "-rank-", r.rank()),
                                      {req.command().begin(), req.command().end()}, &env);
    const absl::StatusOr<pid_t> pid =
        argv.ok() ? runner_->Launch({std::move(*argv), RankEnv(env, plan.work, runner_->user().name),
                                     log, p.exit_file, plan.work, plan.cgroup, plan.fence.path})
                  : absl::StatusOr<pid_t>(argv.status());
    if (!pid.ok()) {
      p.exited = true;
      p.code = 127;
      // Where the rank's own output would be, so `fedctl jobs logs` says why.
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(log).parent_path(), ec);
      std::ofstream(log, std::ios::app) << "fedgate: " << pid.status().message() << "\n";
    } else {
      p.pid = *pid;
      p.start_time = runner_->StartTime(p.pid).value_or(0);
    }
    auto* rr = rec->add_ranks();
    rr->set_rank(p.rank);
    rr->set_pid(p.pid);
    rr->set_start_time(p.start_time);
    rr->set_exit_file(p.exit_file);
    rr->set_preempt_file(preempt_file);
    out->preempt_files.push_back(preempt_file);
    out->ranks.push_back(p);
  }
  spdlog::info("job {} attempt {}: started {} rank(s) here as {}", key.job_id(), key.attempt(),
               out->ranks.size(), runner_->user().name);
}

void Participant::RecordSlice(const LaunchPlan& plan, const Slice& launched,
                              const v1::SliceRecord& rec, bool open_usage) {
  if (store_ == nullptr) return;
  const federation::Hold& hold = plan.hold;
  std::string procs;
  for (const auto& p : launched.ranks) {
    if (p.pid <= 0) continue;
    procs += StrCat(procs.empty() ? "" : ",", p.rank, ":", p.pid, ":", p.start_time);
  }
  if (auto st = store_->PutSlice({hold.job_id, hold.attempt, hold.epoch, procs,
                                  rec.SerializeAsString()});
      !st.ok()) {
    spdlog::error("cannot record the ranks of job {}: {}", hold.job_id, std::string(st.message()));
  }
  // A restarted world runs on GPUs whose usage is open since the first.
  if (!open_usage) return;
  // Metering: one open record per node, durable before the commit answers.
  std::vector<federation::UsageRecord> usage;
  for (const auto& g : hold.gpus) {
    federation::UsageRecord u;
    u.job_id = hold.job_id;
    u.attempt = hold.attempt;
    u.epoch = hold.epoch;
    u.site = config_.site;
    u.node = g.node;
    if (auto m = plan.node_model.find(g.node); m != plan.node_model.end()) u.gpu_model = m->second;
    u.gpus = static_cast<uint32_t>(g.indices.size());
    u.tenant = hold.tenant;
    u.priority = hold.priority.empty() ? "guaranteed" : hold.priority;
    u.start_ms = plan.started_at_ms;
    usage.push_back(std::move(u));
  }
  if (auto st = store_->OpenUsage(usage); !st.ok()) {
    spdlog::error("cannot record the usage of job {}: {}", hold.job_id, std::string(st.message()));
  }
}

void Participant::AttachLaunched(const v1::ReservationKey& key, Slice launched) {
  std::lock_guard lock(mu_);
  auto it = slices_.find({key.job_id(), key.epoch()});
  if (it == slices_.end()) return;  // cannot happen: a launching slice is never swept
  Slice& s = it->second;
  s.ranks = std::move(launched.ranks);
  s.preempt_files = std::move(launched.preempt_files);
  s.launching = false;
  // Stopped while its ranks started (an abort, a failed GPU, shutdown).
  const int sig = stop_ ? SIGKILL : SIGTERM;
  if (s.stopping || stop_) {
    for (auto& r : s.ranks) {
      if (!r.exited) runner_->Signal(r.pid, sig);
    }
  }
}

}  // namespace fedgate::gateway
