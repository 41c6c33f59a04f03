// The sweep: reaps exited ranks, stops slices whose lease lapsed or whose
// rank failed, kills ranks past their grace, frees the GPUs of slices whose
// every rank exited, and forgets what ended long ago. It decides under the
// lock and does the store writes, cgroup removals and backend releases
// after it.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "federation/clock.h"
#include "federation/saturating.h"
#include "gateway/jobs/participant.h"
#include "gateway/jobs/participant_limits.h"

namespace fedgate::gateway {

using namespace participant_limits;  // NOLINT: the bounds of this room

// What one sweep decided under the lock, done after it.
struct Participant::SweepOutcome {
  struct Ended {
    std::string job_id;
    uint64_t epoch = 0;
    std::string why;
    std::string cgroup;
    uint32_t attempt = 0;
    std::string record;  // serialized v1::SliceRecord holding only its end
  };
  std::vector<Ended> ended;
  std::vector<SliceKey> pruned;  // finished slices forgotten: their rows go
  std::vector<std::string> kill_cgroups;
  std::vector<SliceKey> released_rows;
  std::vector<Allocs> stale;
  std::vector<std::string> forget_copies;  // job records kept for slices now gone
  int64_t now = 0;
  bool changed = false;
};

void Participant::Sweep() {
  SweepOutcome out;
  {
    std::lock_guard lock(mu_);
    const int64_t now = clock_->NowMs();
    out.now = now;
    if (!ledger_.ExpireHolds(now).empty()) out.changed = true;
    if (auto lapsed = quota_.Expire(now); !lapsed.empty()) {
      for (const auto& [job, epoch] : lapsed) {
        spdlog::info("job {} epoch {}: quota hold released (prepare or lease lapsed)", job, epoch);
      }
      quota_dirty_ = true;
      out.changed = true;
    }
    // Deleted after the lock is let go: one transaction for all of them,
    // and Prepare calls do not wait behind the fsync.
    if (quota_dirty_) out.released_rows = ReleasedQuotaRowsLocked();
    quota_.Prune(federation::SatSub(now, kFinishedSliceKeepMs));
    for (auto& [key, s] : slices_) SweepSliceLocked(&s, now, &out);
    out.pruned = PruneFinishedLocked(now);
    out.forget_copies = OrphanCopiesLocked();
    ledger_.CheckInvariants();
    out.stale = StaleAllocsLocked();
  }
  FinishSweep(std::move(out));
}

void Participant::SweepSliceLocked(Slice* s, int64_t now, SweepOutcome* out) {
  if (s->launching || s->released) return;
  if (s->parked) {
    // GPUs held for the job's next world: kept while the lease is renewed.
    if (now <= s->lease_deadline_ms) return;
    // Nobody renewed it, as a running slice's fence: its job's record stays
    // (this site is still one of the job's members until a newer record
    // says otherwise, and a takeover may need its vote).
    s->fenced = true;
    StopSliceLocked(s, "lease expired while waiting for the next world");
  }
  const std::string& job = s->key.job_id();
  bool all_exited = true, any_failed = false;
  for (auto& r : s->ranks) {
    if (!r.exited) {
      if (auto code = runner_->Poll(r.pid, r.exit_file, r.start_time)) {
        r.exited = true;
        r.code = *code;
        spdlog::info("job {} rank {} exited with {}", job, r.rank, r.code);
      }
    }
    all_exited = all_exited && r.exited;
    any_failed = any_failed || (r.exited && r.code != 0);
  }
  if (s->state == SliceState::RUNNING && any_failed && !s->stopping) {
    StopSliceLocked(s, "a rank failed", 0, s->keep_hold);
  }
  if (s->state == SliceState::RUNNING && !s->stopping && !all_exited &&
      now > s->lease_deadline_ms + FenceExtraLocked(job, s->lease_ms)) {
    // The coordinator went silent past the lease (and no successor took
    // the job over in the time that allows): stop and free the GPUs. Ranks
    // that all exited 0 while the gateway could not look (stopped, busy)
    // finished their work: the slice succeeded, whatever the fence says.
    s->fenced = true;
    StopSliceLocked(s, "lease expired: the coordinator stopped renewing it");
  }
  if (s->stopping && !all_exited && now > s->kill_at_ms) {
    for (auto& r : s->ranks) {
      if (!r.exited) runner_->Signal(r.pid, SIGKILL);
    }
    out->kill_cgroups.push_back(s->cgroup);  // also what left the ranks' process groups
  }
  if (all_exited && s->state == SliceState::RUNNING && !s->stopping) {
    s->state = any_failed ? SliceState::FAILED : SliceState::SUCCEEDED;
  }
  if (!all_exited) return;
  if (s->stopping && s->keep_after_stop) {
    // recovery: replace: the world restarts on these GPUs, or the slice
    // ends with an abort or its lease.
    s->stopping = false;
    s->keep_after_stop = false;
    s->parked = true;
    spdlog::info("job {}: ranks of world {} ended here; GPUs held for the next world", job,
                 s->restart);
    return;
  }
  // The GPUs are free only once every rank of the slice has exited.
  ledger_.Release(job, s->key.epoch());
  const std::string why = s->stopping                         ? s->message
                          : s->state == SliceState::SUCCEEDED ? "succeeded"
                                                              : "a rank failed";
  s->released = true;
  s->ended_at_ms = now;
  out->ended.push_back({job, s->key.epoch(), why, s->cgroup, s->key.attempt(),
                        EndedRecordOf(*s).SerializeAsString()});
  s->DropRunningState();
  out->changed = true;
}

v1::SliceRecord Participant::EndedRecordOf(const Slice& s) {
  v1::SliceRecord rec;
  auto* e = rec.mutable_ended();
  e->set_state(s.state);
  e->set_message(s.message);
  e->set_preempted_by(s.preempted_by);
  for (const auto& r : s.ranks) {
    if (r.exited) (*e->mutable_exit_codes())[r.rank] = r.code;
  }
  e->set_aborted(s.aborted);
  e->set_fenced(s.fenced);
  e->set_ended_at_ms(s.ended_at_ms);
  rec.set_restart(s.restart);
  return rec;
}

std::vector<SliceKey> Participant::PruneFinishedLocked(int64_t now) {
  std::vector<SliceKey> pruned;
  // A finished slice is kept while its coordinator may still ask.
  std::erase_if(slices_, [&](const auto& entry) {
    const bool old = entry.second.released && now - entry.second.ended_at_ms > kFinishedSliceKeepMs;
    if (old) pruned.push_back(entry.first);
    return old;
  });
  // Only slices whose coordinator already saw their end count against the
  // cap: one it has not asked about yet (a coordinator restarting) stays
  // for the whole window, so a finished job is never reported lost.
  const size_t finished = std::count_if(slices_.begin(), slices_.end(),
                                        [](const auto& e) { return e.second.reported; });
  if (finished > max_finished_) {
    std::vector<std::pair<int64_t, SliceKey>> reported;
    for (const auto& [k, sl] : slices_) {
      if (sl.reported) reported.emplace_back(sl.ended_at_ms, k);
    }
    std::sort(reported.begin(), reported.end());
    for (size_t i = 0; i < reported.size() - max_finished_; ++i) {
      slices_.erase(reported[i].second);
      pruned.push_back(reported[i].second);
    }
  }
  // Under heavy churn the window shrinks instead of memory growing; idle
  // ledger entries (epochs, owners) are kept for twice as many jobs.
  ledger_.Prune(federation::SatSub(now, kFinishedSliceKeepMs), 2 * max_finished_);
  return pruned;
}

void Participant::FinishSweep(SweepOutcome out) {
  for (const auto& cg : out.kill_cgroups) KillCgroup(cg);
  // Earlier sweeps' leftovers first: a cgroup that fails to go below is
  // tried again by the next sweep, not twice in this one.
  reaper_.Sweep();
  for (const auto& e : out.ended) {
    reaper_.Remove(e.cgroup);  // stray processes of the slice go with it
    if (store_ == nullptr) continue;
    // Its end stays on disk, GPUs free, until the slice is pruned.
    (void)store_->PutSlice({e.job_id, e.attempt, e.epoch, "", e.record});
    auto closed = store_->CloseUsage(e.job_id, e.epoch, out.now, e.why);
    if (closed.ok() && on_usage_) on_usage_(*closed);
  }
  for (const auto& [job, epoch] : out.pruned) {
    if (store_ != nullptr) (void)store_->DeleteSlice(job, epoch);
  }
  DeleteQuotaRows(out.released_rows);
  for (const auto& job : out.forget_copies) {
    if (store_ != nullptr) (void)store_->DeleteJobCopy(job);
  }
  for (const auto& a : out.stale) backend_->Release(a);
  if (out.changed && on_change_) on_change_();
}

std::vector<Participant::Allocs> Participant::StaleAllocsLocked() {
  std::vector<Allocs> out;
  for (auto it = allocs_.begin(); it != allocs_.end();) {
    if (ledger_.holds().contains(it->first)) {
      ++it;
      continue;
    }
    out.push_back(std::move(it->second));
    it = allocs_.erase(it);
  }
  return out;
}

}  // namespace fedgate::gateway
