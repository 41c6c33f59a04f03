// Per-second metering (DESIGN.md "Queue policy", issue: tenant governance):
// one usage record per slice and node, kept by the site that ran it, and
// the arithmetic that turns records into GPU-seconds and cost over a window.
// Pure: the caller passes the time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::federation {

struct UsageRecord {
  std::string job_id;
  uint32_t attempt = 0;
  uint64_t epoch = 0;
  std::string site, node, gpu_model, tenant, priority;
  uint32_t gpus = 0;
  int64_t start_ms = 0;
  int64_t end_ms = 0;  // 0 while the slice runs
  std::string reason;  // why it ended
};

// Price per GPU-hour by model and class (`pricing:`).
struct Price {
  double guaranteed = 0, spot = 0;
};
using Pricing = std::map<std::string, Price>;

// GPU-seconds of the record inside [since, until); an open record counts up
// to `now`.
double GpuSeconds(const UsageRecord& r, int64_t since_ms, int64_t until_ms, int64_t now_ms);

struct UsageRow {
  std::string key;  // the tenant, site or model named by `by`
  double gpu_seconds = 0;
  double cost = 0;
};

// Sums records by "tenant", "site" or "model" (INVALID_ARGUMENT otherwise),
// rows sorted by key; records outside the window are skipped.
absl::StatusOr<std::vector<UsageRow>> AggregateUsage(const std::vector<UsageRecord>& records,
                                                     int64_t since_ms, int64_t until_ms,
                                                     int64_t now_ms, const std::string& by,
                                                     const Pricing& pricing);

}  // namespace fedgate::federation
