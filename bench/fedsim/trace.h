// Trace input of fedsim (DESIGN.md "fedsim"): a CSV with a header; columns
// found by name: time, duration, num_gpus, and optional tenant, gpu_model,
// priority. Columns a trace lacks are derived from the seed and the row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::fedsim {

struct TraceJob {
  int line = 0;             // in the file, for messages and derivations
  double submit_s = 0;      // from the trace start
  double duration_s = 0;    // true run time
  uint32_t gpus = 1;
  std::string tenant;       // "" = derive
  std::string gpu_model;    // "" = any
  std::string priority;     // "" = derive
};

struct TraceInfo {
  bool has_tenant = false, has_model = false, has_priority = false;
};

// A malformed row is an error naming its line and column.
absl::StatusOr<std::vector<TraceJob>> ParseTrace(const std::string& text, TraceInfo* info);

}  // namespace fedgate::fedsim
