// recovery: replace at a site: the next world of a job starts on the GPUs a
// parked slice kept (a commit of a higher restart), and what the checkpoint
// copier needs to know of the slices here.
#include <spdlog/spdlog.h>

#include <set>

#include "base/str_cat.h"
#include "federation/clock.h"
#include "federation/saturating.h"
#include "gateway/jobs/launch_plan.h"
#include "gateway/jobs/participant_limits.h"

namespace fedgate::gateway {

using namespace participant_limits;  // NOLINT: the bounds of this room

std::string Participant::CheckpointDir(const std::string& job) const {
  return StrCat(WorkDir(job), "/checkpoints");
}

absl::StatusOr<v1::CommitResponse> Participant::Relaunch(const std::string& from,
                                                         const v1::CommitRequest& req) {
  const auto& key = req.key();
  LaunchPlan plan;
  {
    std::lock_guard lock(mu_);
    if (auto st = ledger_.CheckOwner(key.job_id(), from); !st.ok()) return st;
    if (auto st = CheckTermLocked(key, from); !st.ok()) return st;
    auto it = slices_.find({key.job_id(), key.epoch()});
    if (it == slices_.end() || it->second.released || it->second.key.attempt() != key.attempt()) {
      return absl::NotFoundError(
          StrCat("no held slice of job ", key.job_id(), " at epoch ", key.epoch(), " to restart"));
    }
    Slice& s = it->second;
    if (req.restart() <= s.restart) return v1::CommitResponse();  // this world runs already
    if (!s.parked) {
      return absl::FailedPreconditionError(StrCat("ranks of world ", s.restart, " of job ",
                                                  key.job_id(), " have not all exited yet"));
    }
    const federation::Hold* held = ledger_.Find(key.job_id(), key.epoch());
    if (held == nullptr) {
      return absl::NotFoundError(
          StrCat("no live hold of job ", key.job_id(), " at epoch ", key.epoch()));
    }
    auto gpu_of = MatchRanksToHold(*held, req);
    if (!gpu_of.ok()) return gpu_of.status();
    auto dataset_dirs = DatasetDirs(req);
    if (!dataset_dirs.ok()) return dataset_dirs.status();
    plan = PlanLaunchLocked(*held, std::move(*gpu_of), req, s.cgroup);
    plan.dataset_dirs = std::move(*dataset_dirs);
    // Launching again: no sweep ends it until its ranks are attached.
    s.parked = false;
    s.launching = true;
    s.stopping = false;
    s.keep_after_stop = false;
    s.state = SliceState::RUNNING;
    s.message.clear();
    s.ranks.clear();
    s.preempt_files.clear();
    s.restart = req.restart();
    s.checkpoint_keep = req.checkpoint_keep();
    s.world_sites.assign(req.world_sites().begin(), req.world_sites().end());
    s.lease_ms = plan.lease_ms;
    s.lease_deadline_ms = federation::SatAdd(plan.started_at_ms, s.lease_ms);
  }
  if (auto st = PrepareWorkDir(key.job_id(), req.checkpoint_keep() > 0); !st.ok()) {
    spdlog::warn("job {}: {}", key.job_id(), std::string(st.message()));
  }
  Slice launched;
  v1::SliceRecord rec;
  LaunchRanks(plan, req, &launched, &rec);
  RecordSlice(plan, launched, rec, /*open_usage=*/false);
  AttachLaunched(key, std::move(launched));
  spdlog::info("job {} attempt {}: world {} started here on the GPUs it kept", key.job_id(),
               key.attempt(), req.restart());
  return v1::CommitResponse();
}

std::vector<Participant::CheckpointJob> Participant::CheckpointJobs() {
  std::map<std::string, CheckpointJob> jobs;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, s] : slices_) {
      if (s.released || s.checkpoint_keep == 0) continue;
      CheckpointJob& j = jobs[key.first];
      j.job_id = key.first;
      j.keep = s.checkpoint_keep;
      for (const auto& site : s.world_sites) {
        if (site != config_.site) j.others.push_back(site);
      }
    }
  }
  std::vector<CheckpointJob> out;
  for (auto& [id, j] : jobs) {
    j.dir = CheckpointDir(id);
    j.staging = StrCat(config_.executor.work_dir, "/.fedgate-staging");
    out.push_back(std::move(j));
  }
  return out;
}

absl::StatusOr<Participant::CheckpointJob> Participant::CheckpointReceiver(const std::string& from,
                                                                           const std::string& job) {
  if (auto st = CheckJobId(job); !st.ok()) return st;
  std::lock_guard lock(mu_);
  for (auto it = slices_.lower_bound({job, 0}); it != slices_.end() && it->first.first == job;
       ++it) {
    const Slice& s = it->second;
    if (s.released || s.checkpoint_keep == 0) continue;
    for (const auto& site : s.world_sites) {
      if (site == from && from != config_.site) {
        CheckpointJob j;
        j.job_id = job;
        j.keep = s.checkpoint_keep;
        j.dir = CheckpointDir(job);
        j.staging = StrCat(config_.executor.work_dir, "/.fedgate-staging");
        return j;
      }
    }
  }
  return absl::PermissionDeniedError(StrCat("site ", from, " runs no slice of job ", job,
                                            " in a world with this site's checkpoints"));
}

}  // namespace fedgate::gateway
