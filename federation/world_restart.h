// recovery: replace, as a pure function: what a coordinator concludes from
// one renewal pass over a job whose lost slices are replaced in place while
// the other slices keep their GPUs. It moves the run's `replacing` through
// its stages (stopping -> reserving -> checkpoint -> relaunch) and says what
// to send; the coordinator sends it, reserves replacement slices and starts
// the new world. Nothing here calls anyone or reads a clock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fedgate/v1/federation.pb.h"
#include "fedgate/v1/jobs.pb.h"

namespace fedgate::federation {

// How one site's slice stands in a world restart.
enum class SliceStand {
  kRunning,    // ranks run
  kSucceeded,  // every rank exited 0 (its GPUs are free)
  kStopping,   // ranks stopping, GPUs kept
  kReady,      // no rank runs, GPUs kept: ready for the next world
  kSilent,     // no answer, within the lease
  kLost,       // silent past the lease, forgotten, or its GPUs freed
  kPreempted,  // a guaranteed job took its GPUs
  kUnsent,     // held, its commit never arrived
};
SliceStand StandOf(const absl::StatusOr<v1::SliceStatusResponse>& answer, int64_t silent_ms,
                   int64_t lease_ms);

struct WorldVerdict {
  enum Kind {
    kRunning,    // keep renewing (a restart may be under way)
    kSucceeded,  // every slice exited 0
    kPreempted,  // as without replacement: wait again, not counted
    kFallBack,   // end the attempt as recovery: restart would (release, retry or fail)
  };
  Kind kind = kRunning;
  std::string reason;  // kFallBack, kSucceeded: the job's reason
  std::string bad_site;
  std::string preempted_at, preempted_by;
  bool changed = false;      // `run` changed: save it
  bool wake_placer = false;  // reserving or relaunch reached: the placement thread acts
  std::vector<int> halt;     // sites whose ranks to stop, keeping their GPUs
  std::vector<int> recommit;
  // Checkpoint copies to ask for (stage checkpoint): holder site -> sites
  // that lack run.replacing.checkpoint_step.
  std::map<std::string, std::vector<std::string>> copy_to;
  std::string status;  // the job's reason while the world restarts ("" = keep)
  // The longest time a slice of a site that answered went unrenewed.
  int64_t worst_gap_ms = 0;
};

// `answers[i]` for run->sites(i) (then the home site's quota hold, when it
// runs no ranks); `last_ok` when each site last answered (updated here);
// `gbps(from, to)` the measured link (0 when unknown), to pick the fastest
// holder of a checkpoint.
WorldVerdict JudgeWorld(const v1::JobSpec& spec, int64_t now_ms, int64_t lease_ms,
                        int64_t replace_timeout_ms,
                        const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                        std::map<std::string, int64_t>* last_ok,
                        const std::function<double(const std::string&, const std::string&)>& gbps,
                        v1::RunPlan* run);

// The reservation epoch of a site of the run (a replacement slice holds
// under its own).
inline uint64_t SiteEpoch(const v1::RunPlan& run, int i) {
  return run.sites(i).epoch() != 0 ? run.sites(i).epoch() : run.epoch();
}

// The slice that replaces `lost`: its ranks keep their numbers, placed node
// by node on the one site of `plan` (slices in order, the GPUs `held` there).
v1::SiteRun ReplacementSite(const v1::SiteRun& lost, const v1::PlanResponse& plan,
                            const v1::PrepareResponse& held, uint64_t epoch);

// The job's reason while its world restarts.
std::string ReplacingStatus(const v1::RunPlan& run);

}  // namespace fedgate::federation
