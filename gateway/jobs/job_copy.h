// A job's record as its sites keep it beside their holds (v1::JobCopy): the
// coordinator sends it with each commit and with a renewal whenever a site's
// copy is older; a member gateway answers `jobs get` from it, naming the
// coordinator. The takeover (issue 27) will coordinate from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fedgate/v1/federation.pb.h"
#include "fedgate/v1/jobs.pb.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

// A job's term from its submit; only a takeover raises it.
inline constexpr uint64_t kFirstTerm = 1;

// How far two gateways' clocks may run apart over one fence (rate, not
// wall time: every side times its own durations).
inline constexpr int64_t kAllowedClockSkewMs = 1000;

// The job as the API shows it, coordinated by `coordinator` (no placement).
v1::Job JobOf(const JobRecord& r, const std::string& coordinator);

// The copy a coordinator sends its sites, with `run` (the plan being
// committed) in place of the stored one.
v1::JobCopy CopyOf(const JobRecord& r, const std::string& coordinator, const v1::RunPlan& run);

// The job inside a copy that a participant was sent by `from`, checked: a
// copy of another job, of another tenant than the hold's, or naming
// another coordinator than the sender is refused.
absl::StatusOr<v1::Job> CheckCopy(const v1::JobCopy& copy, const std::string& job_id,
                                  const std::string& tenant, const std::string& from);

// The members of the job whose world is `run`: coordinator, sites, witnesses.
std::vector<std::string> MembersOf(const v1::RunPlan& run, const std::string& coordinator);
// A queued record: a job before its first world, kept by witnesses named
// at submit (no sites yet).
inline bool QueuedRecord(const v1::RunPlan& run) {
  return run.sites_size() == 0 && run.witnesses_size() > 0;
}

// Who may take the job over, in order (empty = nobody): only where the
// coordinator allowed takeovers (run.takeover_after_ms) and at least three
// members (sites and witnesses) keep the job's record.
std::vector<std::string> SuccessorsOf(const v1::RunPlan& run, const std::string& coordinator);

// How long a site keeps a slice of `run` running without a renewal: the
// lease, or, when the job may be taken over, until its last successor
// could have taken over and renewed it.
int64_t SliceFenceMs(const v1::RunPlan& run, const std::string& coordinator, int64_t lease_ms);

// The same while no majority of the job's members confirmed its coordinator
// silent (federation/member_contact.h): one more lease to ask them.
int64_t UnconfirmedSliceFenceMs(const v1::RunPlan& run, const std::string& coordinator,
                                int64_t lease_ms);

// How long a coordinator waits without hearing a site before it calls the
// site's slice lost: past the site's fence and the margin after which its
// shims stop the ranks even with its gateway dead, the stop grace and the
// allowed clock skew, so the lost slice's ranks have surely stopped before
// anything replaces them (two worlds of one job never run at once).
// `unconfirmable`: the site cannot have had its coordinator's silence
// confirmed (SilenceUnconfirmable), so its short fence stopped the ranks.
int64_t SiteLostAfterMs(const v1::RunPlan& run, const std::string& coordinator, int64_t lease_ms,
                        bool unconfirmable);

}  // namespace fedgate::gateway
