// Job spec validation and its translation to a placement request. Pure.
#pragma once

#include <set>
#include <string>

#include "absl/status/status.h"
#include "federation/placement.h"
#include "fedgate/v1/jobs.pb.h"

namespace fedgate::federation {

// Errors name the field: "gpus must be > 0", "unknown gpu model \"A10O\"".
// `known_models` are the models the federation has; empty skips that check.
absl::Status ValidateJobSpec(const v1::JobSpec& spec, const std::set<std::string>& known_models);

// Fills the defaults DESIGN.md gives (priority, duration, attempts).
v1::JobSpec WithDefaults(v1::JobSpec spec);

JobRequest ToJobRequest(const v1::JobSpec& spec);

}  // namespace fedgate::federation
