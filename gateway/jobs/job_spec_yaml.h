// Reads a job spec from YAML or JSON text (same field names), with errors
// that name the field and line. Semantic checks are federation::ValidateJobSpec.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "fedgate/v1/jobs.pb.h"

namespace fedgate::gateway {

absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, const std::string& source);

}  // namespace fedgate::gateway
