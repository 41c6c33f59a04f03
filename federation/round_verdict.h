// What a coordinator concludes from its sites' answers, as pure functions:
// the verdict on a reservation round's Prepare answers, and the verdict on
// a renewal pass's slice states for one running job. The coordinator makes
// the calls and acts on the verdict; nothing here calls anyone or reads a
// clock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fedgate/v1/federation.pb.h"
#include "fedgate/v1/jobs.pb.h"

namespace fedgate::federation {

// Checks a participant's answer against what was asked: per node exactly
// the GPUs asked, each index once. A peer's reply is never used unchecked.
absl::Status CheckHolds(const v1::PrepareRequest& req, const v1::PrepareResponse& resp);

struct PrepareVerdict {
  std::string failed;  // "" when every site holds what was asked
};

// The answers of one prepare round: answers[i] for run->sites(i), then (when
// the home site runs no ranks) one for `quota_site` at index sites_size().
// `quota_index` is the answer that carries the quota class (-1 = none). On
// success, fills each rank's GPU, the master port (from the first site) and
// `borrowed` into `run`. A quota refusal or a preemption in progress is the
// job's reason as it is.
PrepareVerdict JudgePrepare(const std::vector<v1::PrepareRequest>& reqs,
                            const std::vector<absl::StatusOr<v1::PrepareResponse>>& answers,
                            int quota_index, const std::string& quota_site, v1::RunPlan* run);

struct RenewVerdict {
  enum Kind {
    kRunning,    // keep renewing
    kSucceeded,  // every slice exited 0
    kFailed,     // stop everywhere; retry or fail (bad_site: avoid it next time)
    kPreempted,  // stop everywhere; wait again, not counted against max_attempts
    kTimeLimit,  // ran past spec.time_limit: stop with the preemption grace, failed
  };
  Kind kind = kRunning;
  std::string reason;
  std::string bad_site;
  std::string preempted_at, preempted_by;
  // Sites (indices into run.sites) that never got their commit: re-send it.
  std::vector<int> recommit;
  // The home site holds the quota but never got its commit: re-send it.
  bool recommit_quota = false;
  // The longest time a slice of a site that answered went unrenewed.
  int64_t worst_gap_ms = 0;
};

// One job's renewal answers: answers[i] for run.sites(i), then (a home site
// that runs no ranks) one for the quota hold. `last_ok` is when each site
// last answered (updated here; a site not in it is taken as answering now).
RenewVerdict JudgeRenewal(const v1::JobSpec& spec, uint32_t attempt, const v1::RunPlan& run,
                          const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                          int64_t now_ms, int64_t lease_ms,
                          std::map<std::string, int64_t>* last_ok);

// The attempt ran past spec.time_limit (counted from the run's epoch).
bool PastTimeLimit(const v1::JobSpec& spec, const v1::RunPlan& run, int64_t now_ms);

// The home site holds this run's quota but runs none of its ranks.
bool QuotaOnly(const v1::RunPlan& run);

}  // namespace fedgate::federation
