// A job's record as its sites keep it beside their holds (v1::JobCopy): the
// coordinator sends it with each commit and with a renewal whenever a site's
// copy is older; a member gateway answers `jobs get` from it, naming the
// coordinator. The takeover (issue 27) will coordinate from it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "fedgate/v1/federation.pb.h"
#include "fedgate/v1/jobs.pb.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

// A job's term from its submit; only a takeover raises it.
inline constexpr uint64_t kFirstTerm = 1;

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

}  // namespace fedgate::gateway
