// Tenant quotas at a tenant's home site (DESIGN.md "Queue policy"): the
// home site is the quota's authority, and quota is held like GPUs in the
// two-phase reservation, under the same (job_id, attempt, epoch) rules, so
// that no interleaving of submits at many coordinators can exceed it.
//
// What counts: a tenant's guaranteed-class jobs. Up to the nominal quota
// (in total and, where set, per GPU model) a job is guaranteed; beyond it,
// up to `borrow` more GPUs, it runs as borrowed (preemptible, like spot).
// Spot jobs are preemptible anyway and need no quota.
//
// A hold is prepared (with a TTL), then committed (with a lease that the
// coordinator's renewals extend); a lapsed lease or an abort frees it.
// Pure: the caller passes the time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::federation {

struct TenantQuota {
  std::string tenant;
  uint32_t gpus = 0;                       // nominal (guaranteed) GPUs in total
  std::map<std::string, uint32_t> models;  // nominal GPUs per model; unset = no limit
  uint32_t borrow = 0;                     // GPUs beyond nominal it may borrow
  double weight = 1;                       // fair-share weight
};

// Checks a quota's fields; the error names the tenant and what is wrong.
absl::Status ValidateQuota(const TenantQuota& q);

enum class QuotaClass { kGuaranteed, kBorrowed };
const char* QuotaClassName(QuotaClass c);

struct QuotaHold {
  std::string job_id;
  uint32_t attempt = 0;
  uint64_t epoch = 0;
  std::string coordinator;
  std::string tenant;
  std::map<std::string, uint32_t> gpus;  // by model
  QuotaClass cls = QuotaClass::kGuaranteed;
  bool committed = false;
  int64_t expires_at_ms = 0;  // prepare TTL, then lease deadline

  uint32_t total() const;
};

struct QuotaUse {
  uint32_t guaranteed = 0;
  uint32_t borrowed = 0;
  std::map<std::string, uint32_t> guaranteed_by_model;
};

class QuotaLedger {
 public:
  using Key = std::pair<std::string, uint64_t>;  // job id, epoch

  // Sets (or replaces) a tenant's quota; holds already granted stay.
  absl::Status SetQuota(const TenantQuota& q);
  const std::map<std::string, TenantQuota>& quotas() const { return quotas_; }
  bool Governs(const std::string& tenant) const { return quotas_.contains(tenant); }

  // Holds quota for a guaranteed-class job of `tenant` needing `gpus` (by
  // model). The same message again returns the same hold; a newer epoch of
  // the job replaces its older holds (the coordinator moved on); an older
  // one is FAILED_PRECONDITION ("stale epoch"); a job first reached by
  // another coordinator is PERMISSION_DENIED; a tenant this site does not
  // govern is FAILED_PRECONDITION; not enough quota is RESOURCE_EXHAUSTED
  // with a reason that starts "waiting for quota:", and changes nothing.
  absl::StatusOr<QuotaHold> Prepare(const std::string& job_id, uint32_t attempt, uint64_t epoch,
                                    const std::string& coordinator, const std::string& tenant,
                                    const std::map<std::string, uint32_t>& gpus, int64_t now_ms,
                                    int64_t ttl_ms);
  // Makes the hold committed until now + lease. Idempotent; NOT_FOUND when
  // there is no live hold of that epoch.
  absl::StatusOr<QuotaHold> Commit(const std::string& job_id, uint32_t attempt, uint64_t epoch,
                                   const std::string& coordinator, int64_t now_ms,
                                   int64_t lease_ms);
  // Extends a committed hold's lease; the hold, or null when there is none.
  const QuotaHold* Renew(const std::string& job_id, uint64_t epoch, int64_t now_ms,
                         int64_t lease_ms);
  // Frees the job's holds of this epoch or older and remembers the epoch.
  absl::Status Abort(const std::string& job_id, uint64_t epoch, const std::string& coordinator);
  // Frees prepared holds past their TTL and committed ones past their lease.
  std::vector<Key> Expire(int64_t now_ms);
  // Forgets epochs of jobs without holds last seen before `before_ms`.
  void Prune(int64_t before_ms);
  // Restores a hold after a restart (from the store), as it was.
  void Restore(const QuotaHold& h);

  QuotaUse Use(const std::string& tenant) const;
  const std::map<Key, QuotaHold>& holds() const { return holds_; }
  const QuotaHold* Find(const std::string& job_id, uint64_t epoch) const;

 private:
  struct JobEntry {
    uint64_t newest_epoch = 0;
    std::string coordinator;
    int64_t last_seen_ms = 0;
  };
  absl::Status Check(const std::string& job_id, uint64_t epoch,
                     const std::string& coordinator) const;

  std::map<std::string, TenantQuota> quotas_;
  std::map<Key, QuotaHold> holds_;
  std::map<std::string, JobEntry> jobs_;
};

}  // namespace fedgate::federation
