// The participant side of the two-phase reservation: one site's ledger of GPU
// holds. Every message carries (job_id, attempt, epoch); all are idempotent,
// and a message older than the newest epoch seen for its job is refused.
// Holds that are never committed expire. No GPU is ever in two holds: a
// broken invariant aborts the process. Pure: the caller passes the time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::federation {

struct NodeGpus {
  std::string node;
  std::vector<uint32_t> indices;  // GPU indices on that node
};

struct NodeRequest {
  std::string node;
  uint32_t gpus = 0;
};

enum class HoldState { kHeld, kCommitted };

struct Hold {
  std::string job_id;
  uint32_t attempt = 0;
  uint64_t epoch = 0;
  HoldState state = HoldState::kHeld;
  int64_t expires_at_ms = 0;  // for kHeld
  std::vector<NodeGpus> gpus;
};

class ReservationLedger {
 public:
  // node name -> GPU count.
  explicit ReservationLedger(std::map<std::string, uint32_t> nodes);

  // Holds GPUs for the job until now + ttl. The same message again returns
  // the same hold; a newer epoch replaces an uncommitted older hold; an older
  // epoch is FAILED_PRECONDITION ("stale epoch"); too few free GPUs is
  // RESOURCE_EXHAUSTED and changes nothing.
  absl::StatusOr<Hold> Prepare(const std::string& job_id, uint32_t attempt, uint64_t epoch,
                               const std::vector<NodeRequest>& want, int64_t now_ms,
                               int64_t ttl_ms);
  // Makes a hold permanent (until Release). Idempotent; NOT_FOUND when there is
  // no live hold of that epoch (expired, aborted, or never prepared).
  absl::StatusOr<Hold> Commit(const std::string& job_id, uint32_t attempt, uint64_t epoch,
                              int64_t now_ms);
  // Drops the job's hold of this epoch or older and remembers the epoch, so a
  // late Prepare of it is refused. Idempotent.
  absl::Status Abort(const std::string& job_id, uint32_t attempt, uint64_t epoch);
  // The job finished or was stopped: frees its GPUs, whatever the state.
  void Release(const std::string& job_id);
  // Frees holds past their TTL; returns the job ids released.
  std::vector<std::string> ExpireHolds(int64_t now_ms);

  uint32_t FreeGpus(const std::string& node) const;
  uint32_t TotalFree() const;
  const std::map<std::string, Hold>& holds() const { return holds_; }

  // Aborts the process if any GPU is in two holds or a node is overbooked.
  void CheckInvariants() const;

 private:
  std::map<std::string, uint32_t> nodes_;
  std::map<std::string, Hold> holds_;          // by job id
  std::map<std::string, uint64_t> newest_epoch_;  // by job id, kept after release
};

}  // namespace fedgate::federation
