// fedsim's replay: trace jobs through federation::Scheduler (the policy the
// coordinator runs) and federation::Place (the gateways' placement), over a
// set of sites, on a simulated clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/fedsim/trace.h"
#include "federation/scheduler.h"

namespace fedgate::fedsim {

struct SiteSpec {
  std::string name;
  std::string model;
  uint32_t gpus = 0;
};

// "cn-beijing=A100-80GB:64,cn-shanghai=H100:32"
absl::StatusOr<std::vector<SiteSpec>> ParseSites(const std::string& text);

struct SimOptions {
  federation::SchedPolicy policy = federation::SchedPolicy::kFedgate;
  double estimate_noise = 0;  // estimates drawn from [1 - F, 1 + F] x the true duration
  uint64_t seed = 1;
  double start_hour = 0;      // replay jobs submitted from this hour of the trace on
  size_t limit = 0;           // at most this many of them (0 = all)
  uint32_t gpus_per_node = 8;
  double aging = federation::kDefaultAging;
  bool progress = false;      // a line on stderr every few seconds
};

struct SimResult {
  std::string policy;
  size_t jobs = 0;            // replayed (and finished)
  size_t left_out = 0;        // asked more GPUs (of their model) than the sites have
  double avg_jct_s = 0, p50_jct_s = 0, p99_queue_s = 0, avg_queue_s = 0;
  double makespan_s = 0;
  double gpu_utilization = 0;       // busy GPU-seconds / (capacity x makespan)
  double avg_idle_gpus_waiting = 0; // free GPUs, time-averaged over moments a job waits
  double offered_load = 0;          // sum(gpus x duration) / (capacity x submit span)
  uint32_t capacity = 0;
  double wall_s = 0, jobs_per_second = 0;
  std::string derived;              // how missing columns were derived
  std::vector<int> start_order;     // trace lines, in the order the jobs started
};

absl::StatusOr<SimResult> Simulate(std::vector<TraceJob> jobs, const TraceInfo& info,
                                   const std::vector<SiteSpec>& sites, const SimOptions& opts);

}  // namespace fedgate::fedsim
