// The participant side of the two-phase reservation: one site's ledger of GPU
// holds. A hold goes prepared -> committed -> stopping -> released, and its
// GPUs count as used until it is released, i.e. until every rank of its slice
// has exited: an abort of a committed hold only moves it to stopping. Every
// message carries (job_id, attempt, epoch); all are idempotent, and a message
// older than the newest epoch seen for its job is refused. Each job is owned
// by the coordinator site that first reached this ledger for it. Prepared
// holds that are never committed expire. No GPU is ever in two holds: a
// broken invariant aborts the process. Pure: the caller passes the time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
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

enum class HoldState { kPrepared, kCommitted, kStopping };

struct Hold {
  std::string job_id;
  uint32_t attempt = 0;
  uint64_t epoch = 0;
  std::string coordinator;  // the site that prepared it
  std::string tenant;
  std::string priority;
  HoldState state = HoldState::kPrepared;
  int64_t expires_at_ms = 0;  // for kPrepared
  std::vector<NodeGpus> gpus;
  uint32_t master_port = 0;  // held for rank 0 when asked (0 = none)
};

// Who prepares: the coordinator's site and the job's tenant.
struct HoldOwner {
  std::string coordinator;
  std::string tenant;
  std::string priority;  // of this job (not part of ownership)
};

class ReservationLedger {
 public:
  using HoldKey = std::pair<std::string, uint64_t>;  // job id, epoch

  // node name -> GPU count.
  explicit ReservationLedger(std::map<std::string, uint32_t> nodes);
  // Replaces the node list (a resource manager's nodes come and go); a
  // node that still has holds keeps its size until they are released.
  void SetNodes(const std::map<std::string, uint32_t>& nodes);
  // GPUs of `node` taken outside fedgate (a resource manager's own users):
  // never given to a hold.
  void SetExternal(const std::string& node, uint32_t gpus) { external_[node] = gpus; }
  // MASTER_PORTs are held like GPUs, from this range (executor.port_range),
  // one per hold that asks: no two live holds of the site share one.
  void SetPortRange(uint32_t lo, uint32_t hi) {
    port_lo_ = lo;
    port_hi_ = hi;
    next_port_ = lo;
  }
  // Whether a port is taken on the nodes asked for by something the ledger
  // does not hold (another program's listener): such ports are skipped when
  // one is picked. Called under the caller's lock: it must be quick.
  using PortInUse = std::function<bool(const std::vector<NodeRequest>& nodes, uint32_t port)>;
  void SetPortInUse(PortInUse fn) { port_in_use_ = std::move(fn); }

  // PERMISSION_DENIED unless `coordinator` owns the job here (or nobody does
  // yet). Every entry point below checks it first.
  absl::Status CheckOwner(const std::string& job_id, const std::string& coordinator) const;
  // The job's coordinator changed by a takeover (a majority's grants, checked
  // by the caller): its holds and the calls to come belong to `coordinator`.
  void Reassign(const std::string& job_id, const std::string& coordinator);

  // Holds GPUs for the job until now + ttl. The same message again returns
  // the same hold; a newer epoch replaces an older prepared hold and moves an
  // older committed one to stopping (its ranks must be stopped: see
  // `stopped`); an older epoch is FAILED_PRECONDITION ("stale epoch"); too
  // few free GPUs is RESOURCE_EXHAUSTED and changes nothing.
  absl::StatusOr<Hold> Prepare(const std::string& job_id, uint32_t attempt, uint64_t epoch,
                               const HoldOwner& owner, const std::vector<NodeRequest>& want,
                               int64_t now_ms, int64_t ttl_ms,
                               std::vector<HoldKey>* stopped = nullptr, bool want_port = false);
  // Makes a prepared hold committed. Idempotent; NOT_FOUND when there is no
  // live hold of that epoch (expired, aborted, or never prepared).
  absl::StatusOr<Hold> Commit(const std::string& job_id, uint32_t attempt, uint64_t epoch,
                              const std::string& coordinator, int64_t now_ms);
  // Drops the job's prepared holds of this epoch or older, moves its
  // committed ones to stopping (returned, so their ranks get stopped), and
  // remembers the epoch, so a late Prepare of it is refused. Idempotent.
  absl::StatusOr<std::vector<HoldKey>> Abort(const std::string& job_id, uint32_t attempt,
                                             uint64_t epoch, const std::string& coordinator);
  // Puts back a committed hold found after a restart (its slice's ranks
  // still run). FAILED_PRECONDITION, changing nothing, when one of its GPUs
  // is held already or out of range.
  absl::Status Restore(const Hold& hold, int64_t now_ms);
  // A committed hold whose slice is being stopped (lease lapsed, rank failed).
  void MarkStopping(const std::string& job_id, uint64_t epoch);
  // Every rank of the hold's slice has exited: frees its GPUs.
  void Release(const std::string& job_id, uint64_t epoch);
  // Frees prepared holds past their TTL; returns the job ids released.
  std::vector<std::string> ExpireHolds(int64_t now_ms);
  // Forgets epochs and owners of jobs without holds, last seen before
  // `before_ms`, and then the least recently seen of them past `max_jobs`,
  // so the ledger does not grow with every job ever run, however fast they
  // come and go.
  void Prune(int64_t before_ms, size_t max_jobs = SIZE_MAX);

  // Marks exactly `gpus` of `node` as failing health (an empty set heals
  // the node): they are never given to a new hold, prepared holds on them
  // are dropped, and the committed holds on them are returned so that their
  // slices get stopped (their GPUs stay used until the ranks exited).
  std::vector<HoldKey> SetUnhealthy(const std::string& node, const std::set<uint32_t>& gpus);
  const std::map<std::string, std::set<uint32_t>>& unhealthy() const { return unhealthy_; }
  // A cordoned node takes no new holds; what runs there keeps running.
  void SetCordoned(const std::string& node, bool cordoned);
  bool cordoned(const std::string& node) const { return cordoned_.contains(node); }

  // Keeps (at least) `gpus` GPUs of `node` for `job_id` until `until_ms`:
  // a preemptor waiting for its victims to stop. Nobody else sees them free;
  // the job's next Prepare uses them and drops the mark.
  void Earmark(const std::string& job_id, const std::string& node, uint32_t gpus,
               int64_t until_ms);
  // Earmarked GPUs per node and job.
  const std::map<std::string, std::map<std::string, std::pair<uint32_t, int64_t>>>& earmarks()
      const {
    return earmarks_;
  }

  // GPUs of the node that are neither held, unhealthy nor earmarked (0 when
  // cordoned).
  uint32_t FreeGpus(const std::string& node) const;
  // The same as `job_id` sees them: its own earmarks count as free.
  uint32_t FreeGpusFor(const std::string& node, const std::string& job_id) const;
  uint32_t TotalFree() const;
  const std::map<HoldKey, Hold>& holds() const { return holds_; }
  // The job's live (prepared or committed) hold of `epoch`, or null.
  const Hold* Find(const std::string& job_id, uint64_t epoch) const;
  // Keeps a prepared hold until now + ttl (never shorter than it was), while
  // its site stages the job's data. NOT_FOUND when there is no prepared hold
  // of that key and attempt.
  absl::Status Extend(const std::string& job_id, uint32_t attempt, uint64_t epoch,
                      int64_t now_ms, int64_t ttl_ms);
  size_t known_jobs() const { return jobs_.size(); }

  // Aborts the process if any GPU is in two holds or a node is overbooked.
  void CheckInvariants() const;

 private:
  struct JobEntry {
    uint64_t newest_epoch = 0;
    HoldOwner owner;
    int64_t last_seen_ms = 0;
  };
  absl::Status CheckEpoch(const std::string& job_id, uint64_t epoch) const;
  JobEntry& Touch(const std::string& job_id, const std::string& coordinator, int64_t now_ms);

  std::map<std::string, uint32_t> nodes_;
  std::map<HoldKey, Hold> holds_;
  std::map<std::string, JobEntry> jobs_;  // kept after release, until pruned
  std::map<std::string, std::set<uint32_t>> unhealthy_;
  std::set<std::string> cordoned_;
  // node -> job -> (GPUs, until ms)
  std::map<std::string, std::map<std::string, std::pair<uint32_t, int64_t>>> earmarks_;
  uint32_t RawFree(const std::string& node) const;
  std::map<std::string, uint32_t> external_;
  uint32_t port_lo_ = 29500, port_hi_ = 29999, next_port_ = 29500;
  PortInUse port_in_use_;
};

}  // namespace fedgate::federation
