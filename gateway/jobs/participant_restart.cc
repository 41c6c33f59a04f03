// What the previous run of the gateway left: cordons, the slices it ran
// (re-attached where their shims still supervise the ranks, stopped
// otherwise), their open usage records and their cgroups.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "base/number.h"
#include "base/str_cat.h"
#include "federation/clock.h"
#include "federation/saturating.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {
namespace {

// A slice keyed as its stored row.
Slice SliceOfRow(const StoredSlice& row) {
  Slice s;
  s.key.set_job_id(row.job_id);
  s.key.set_attempt(row.attempt);
  s.key.set_epoch(row.epoch);
  return s;
}

}  // namespace

void Participant::RestoreCordons() {
  if (store_ == nullptr) return;
  std::vector<std::string> names, cordoned;
  {
    std::lock_guard lock(mu_);
    for (const auto& n : nodes_) names.push_back(n.name);
  }
  for (const auto& name : names) {
    auto v = store_->GetKv(StrCat("cordon/", name));
    if (v.ok() && v->has_value() && **v == "1") cordoned.push_back(name);
  }
  std::lock_guard lock(mu_);
  for (const auto& node : cordoned) {
    ledger_.SetCordoned(node, true);
    spdlog::info("node {} stays cordoned (as before the restart)", node);
  }
}

void Participant::CleanUpAfterRestart() {
  RestoreCordons();
  if (store_ == nullptr) return;
  LoadCopies();
  const auto t0 = std::chrono::steady_clock::now();
  auto stored = store_->LoadSlices();
  if (!stored.ok()) return;
  std::set<SliceKey> attached;
  std::vector<SliceKey> stopped;
  {
    std::lock_guard lock(mu_);
    for (const auto& row : *stored) {
      // Supervised ranks outlived the gateway: follow them to their end.
      v1::SliceRecord rec;
      const bool parsed = !row.detail.empty() && rec.ParseFromString(row.detail);
      // A slice that ended before the restart: its end, for the coordinator
      // that has not asked yet (the GPUs were freed then).
      if (parsed && rec.has_ended()) {
        slices_[{row.job_id, row.epoch}] = EndedSliceOf(row, rec);
        spdlog::info("job {} attempt {}: its slice here ended before the restart ({}); kept for "
                     "its coordinator",
                     row.job_id, row.attempt, v1::SliceStatusResponse::State_Name(rec.ended().state()));
        attached.insert({row.job_id, row.epoch});
        continue;
      }
      if (runner_->supervised() && parsed && ReattachLocked(row, rec)) {
        attached.insert({row.job_id, row.epoch});
        continue;
      }
      // Its reservations go with it (the next sweep gives them back: no hold).
      if (parsed && !rec.backend_ids().empty()) {
        Allocs& stale = allocs_[{row.job_id, row.epoch}];
        for (const auto& [node, id] : rec.backend_ids()) stale[node] = {id, 0};
      }
      slices_[{row.job_id, row.epoch}] = StopStoredSliceLocked(row);
      stopped.emplace_back(row.job_id, row.epoch);
    }
    QueueLeftoverCgroupsLocked();
    MarkCopiesRestoredAloneLocked();
    // Holds re-attached under their recorded coordinator follow a takeover
    // this site accepted since.
    for (const auto& [job, kept] : copies_) {
      if (!kept.term.coordinator.empty()) ledger_.Reassign(job, kept.term.coordinator);
    }
  }
  for (const auto& [job, epoch] : stopped) (void)store_->DeleteSlice(job, epoch);
  if (!attached.empty()) {
    spdlog::info("re-attached {} slice(s) in {:.1f} ms", attached.size(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                     .count());
  }
  CloseUsageOfStopped(attached);
}

Slice Participant::EndedSliceOf(const StoredSlice& row, const v1::SliceRecord& rec) {
  const auto& e = rec.ended();
  Slice s = SliceOfRow(row);
  s.state = e.state();
  s.message = e.message();
  s.preempted_by = e.preempted_by();
  for (const auto& [rank, code] : e.exit_codes()) {
    RankProc p;
    p.rank = rank;
    p.exited = true;
    p.code = code;
    s.ranks.push_back(p);
  }
  std::sort(s.ranks.begin(), s.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  s.aborted = e.aborted();
  s.fenced = e.fenced();
  s.restart = rec.restart();
  s.released = true;
  s.ended_at_ms = e.ended_at_ms();
  return s;
}

Slice Participant::StopStoredSliceLocked(const StoredSlice& row) {
  Slice s = SliceOfRow(row);
  s.state = SliceState::FAILED;
  s.message = "the gateway restarted while the slice ran; its ranks were stopped";
  s.stopping = true;
  std::istringstream in(row.procs);
  std::string entry;
  int killed = 0;
  while (std::getline(in, entry, ',')) {
    // rank:pid:start_time
    const size_t a = entry.find(':'), b = entry.find(':', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    auto rank = ParseNumber<uint32_t>(entry.substr(0, a));
    auto pid = ParseNumber<int32_t>(entry.substr(a + 1, b - a - 1));
    auto start = ParseNumber<uint64_t>(entry.substr(b + 1));
    if (!rank || !pid || !start || *pid <= 0) continue;
    auto now_start = runner_->StartTime(static_cast<pid_t>(*pid));
    if (now_start && *now_start == *start) {
      runner_->Signal(static_cast<pid_t>(*pid), SIGKILL);
      ++killed;
    }
    RankProc p;
    p.rank = *rank;
    p.exited = true;
    p.code = 128 + SIGKILL;
    s.ranks.push_back(p);
  }
  spdlog::warn("job {}: found {} rank(s) of a slice from before the restart; stopped {}",
               row.job_id, s.ranks.size(), killed);
  return s;
}

bool Participant::ReattachLocked(const StoredSlice& row, const v1::SliceRecord& rec) {
  federation::Hold h;
  h.job_id = row.job_id;
  h.attempt = row.attempt;
  h.epoch = row.epoch;
  h.coordinator = rec.coordinator();
  h.tenant = rec.tenant();
  h.priority = rec.priority();
  for (const auto& g : rec.gpus()) h.gpus.push_back({g.node(), {g.indices().begin(), g.indices().end()}});
  h.master_port = rec.master_port();
  if (!rec.backend_ids().empty()) {
    Allocs& allocs = allocs_[{row.job_id, row.epoch}];
    for (const auto& g : rec.gpus()) {
      auto j = rec.backend_ids().find(g.node());
      if (j != rec.backend_ids().end()) allocs[g.node()] = {j->second, static_cast<uint32_t>(g.indices_size())};
    }
  }
  const int64_t now = clock_->NowMs();
  if (auto st = ledger_.Restore(h, now); !st.ok()) {
    spdlog::error("job {}: cannot re-attach: {}", row.job_id, std::string(st.message()));
    return false;
  }
  Slice s = SliceOfRow(row);
  s.preemptible = rec.preemptible();
  s.started_at_ms = rec.started_at_unix_ms();
  s.cgroup = rec.cgroup();
  s.restart = rec.restart();
  s.keep_hold = rec.keep_hold();
  s.checkpoint_keep = rec.checkpoint_keep();
  s.world_sites.assign(rec.world_sites().begin(), rec.world_sites().end());
  s.datasets.assign(rec.datasets().begin(), rec.datasets().end());
  // A replacement committed parked: its GPUs wait for the next world.
  s.parked = rec.keep_hold() && rec.ranks().empty();
  if (s.parked) s.state = SliceState::HELD;
  for (const auto& g : h.gpus) s.gpus_by_node[g.node] += g.indices.size();
  // A fresh lease: the coordinator's renewals find the slice again.
  s.lease_ms = federation::ClampMs(rec.lease_ms(), 1000, 60 * 60 * 1000);
  s.lease_deadline_ms = federation::SatAdd(now, s.lease_ms);
  size_t alive = 0;
  for (const auto& r : rec.ranks()) {
    RankProc p;
    p.rank = r.rank();
    p.pid = static_cast<pid_t>(r.pid());
    p.start_time = r.start_time();
    p.exit_file = r.exit_file();
    if (auto code = runner_->Poll(p.pid, p.exit_file, p.start_time)) {
      p.exited = true;
      p.code = *code;
    } else {
      ++alive;
    }
    if (!r.preempt_file().empty()) s.preempt_files.push_back(r.preempt_file());
    s.ranks.push_back(p);
  }
  spdlog::info("job {} attempt {}: re-attached to {} rank(s) ({} still running)", row.job_id,
               row.attempt, s.ranks.size(), alive);
  slices_[{row.job_id, row.epoch}] = std::move(s);
  return true;
}

void Participant::QueueLeftoverCgroupsLocked() {
  if (cgroups_.root.empty()) return;
  std::set<std::string> live;
  for (const auto& [key, s] : slices_) {
    if (!s.released && !s.cgroup.empty()) live.insert(s.cgroup);
  }
  // What the run before left (killed with its slices running, or before a
  // removal finished), less the slices re-attached.
  size_t queued = 0;
  for (std::string& path : SliceCgroupsOfJobs(cgroups_.root, config_.data_dir + "/jobs")) {
    if (live.contains(path)) continue;
    reaper_.Add(std::move(path));
    ++queued;
  }
  if (queued > 0) spdlog::info("removing {} slice cgroup(s) left by the previous run", queued);
}

void Participant::CloseUsageOfStopped(const std::set<SliceKey>& attached) {
  // Usage of slices that were stopped ends now (at most the open interval
  // of a crash is counted, never a finished record lost); re-attached ones
  // stay open until their ranks exit. Only records still open overlap a
  // window that starts now.
  auto open = store_->ListUsage(clock_->NowMs(), INT64_MAX, "");
  if (!open.ok()) return;
  std::vector<federation::UsageRecord> closed;
  for (const auto& r : *open) {
    if (r.end_ms != 0 || attached.contains({r.job_id, r.epoch})) continue;
    auto c = store_->CloseUsage(r.job_id, r.epoch, clock_->NowMs(),
                                "gateway restarted: ranks stopped");
    if (c.ok()) closed.insert(closed.end(), c->begin(), c->end());
  }
  if (closed.empty()) return;
  spdlog::info("closed {} usage record(s) of slices that ran before the restart", closed.size());
  if (on_usage_) on_usage_(closed);
}

}  // namespace fedgate::gateway
