// The queue policy (DESIGN.md "Queue policy"), shared by the coordinator and
// fedsim: which queued jobs a scheduling pass tries to start, in which order,
// and which it holds back so as not to delay the head job. Pure: the caller
// passes the time, the free GPUs, the running jobs and a function that tries
// to start one job (placement and reservation are the caller's).
//
//   fifo     submit order; the first job that cannot start blocks the rest.
//   sjf      estimated_duration / gpus, every job that fits starts (no aging,
//            no reservation: small jobs can starve a large one).
//   fedgate  guaranteed before spot; within a class estimated_duration / gpus
//            minus an aging credit for the time waited; equal scores go to
//            the tenant with the least decayed usage per weight, then the
//            earlier submit. The first job that cannot start gets a
//            reservation at its earliest start (from the estimated ends of
//            running jobs); a later job starts only if that does not delay
//            it (EASY backfill).
//
// The queue is kept ordered by a key that does not change with time (aging
// moves every job's score alike), so a pass visits jobs without sorting.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::federation {

enum class SchedPolicy { kFifo, kSjf, kFedgate };
absl::StatusOr<SchedPolicy> ParseSchedPolicy(const std::string& name);
const char* SchedPolicyName(SchedPolicy p);

// GPUs by model; the model "*" stands for GPUs of unknown model (they count
// as usable by any job).
using GpusByModel = std::map<std::string, uint32_t>;

struct SchedJob {
  std::string id;
  std::string tenant;
  uint32_t gpus = 1;
  int64_t estimated_ms = 3600 * 1000;
  bool spot = false;
  int64_t submitted_ms = 0;
  std::vector<std::string> models;  // any of; empty = any
};

struct RunningJob {
  int64_t estimated_end_ms = 0;
  GpusByModel gpus;
};

// Decayed GPU-seconds per tenant (queue.fair_share_half_life), divided by
// the tenant's weight.
class FairShare {
 public:
  explicit FairShare(int64_t half_life_ms = 7LL * 24 * 3600 * 1000) : half_life_ms_(half_life_ms) {}
  void SetWeight(const std::string& tenant, double weight) { weights_[tenant] = weight; }
  // `gpu_seconds` of use that ended (or was metered) at `at_ms`.
  void Add(const std::string& tenant, double gpu_seconds, int64_t at_ms);
  double Usage(const std::string& tenant, int64_t now_ms) const;

 private:
  struct Entry {
    double value = 0;
    int64_t at_ms = 0;
  };
  int64_t half_life_ms_;
  std::map<std::string, Entry> usage_;
  std::map<std::string, double> weights_;
};

struct PassResult {
  std::vector<std::string> started;
  // The job holding the reservation (fedgate only) and when it should start.
  std::optional<std::string> reserved_for;
  int64_t reserved_at_ms = 0;
  // Jobs that fit now but were held back to keep the reservation.
  std::vector<std::string> held_back;
};

// Seconds of score credit per second waited (fedgate): with 0.01, a job that
// waited a day ranks like one 14.4 minutes shorter per GPU. Chosen on Philly
// windows with fedsim (bench/fedsim_philly.sh): larger values pull the order
// towards FIFO under load; the head job's reservation already prevents
// starvation.
inline constexpr double kDefaultAging = 0.01;

class Scheduler {
 public:
  explicit Scheduler(SchedPolicy policy, double aging_factor = kDefaultAging)
      : policy_(policy), aging_(aging_factor) {}
  SchedPolicy policy() const { return policy_; }

  void Enqueue(const SchedJob& job);
  void Remove(const std::string& id);
  size_t size() const { return jobs_.size(); }
  // Queued job ids in the order a pass visits them (ties resolved by usage).
  std::vector<std::string> Order(int64_t now_ms, const FairShare* share = nullptr) const;

  // Tries to start queued jobs in policy order. `try_start` places and
  // starts one job and returns the GPUs it took by model, or nullopt when it
  // cannot start now. Started jobs leave the queue. `free` is what is free
  // now; `running` what runs, with estimated ends.
  using TryStart = std::function<std::optional<GpusByModel>(const SchedJob&)>;
  PassResult Pass(int64_t now_ms, GpusByModel free, std::vector<RunningJob> running,
                  const TryStart& try_start, const FairShare* share = nullptr);

  // GPUs of `pool` a job may use (its models, or any, and "*").
  static uint32_t Usable(const SchedJob& job, const GpusByModel& pool);

 private:
  using Key = std::tuple<int, double, int64_t, std::string>;  // class, score, submit, id
  Key KeyOf(const SchedJob& j) const;
  std::vector<const SchedJob*> Visit(int64_t now_ms, const FairShare* share) const;

  SchedPolicy policy_;
  double aging_;
  std::map<std::string, SchedJob> jobs_;
  std::set<Key> order_;
};

}  // namespace fedgate::federation
