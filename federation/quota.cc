#include "federation/quota.h"

#include <cmath>

#include "base/str_cat.h"
#include "federation/saturating.h"

namespace fedgate::federation {

absl::Status ValidateQuota(const TenantQuota& q) {
  if (q.tenant.empty()) return absl::InvalidArgumentError("a quota needs a tenant name");
  if (!std::isfinite(q.weight) || q.weight <= 0) {
    return absl::InvalidArgumentError(
        StrCat("tenant ", q.tenant, ": weight must be a number > 0"));
  }
  for (const auto& [model, n] : q.models) {
    if (model.empty()) {
      return absl::InvalidArgumentError(StrCat("tenant ", q.tenant, ": a model name is empty"));
    }
    if (n > q.gpus) {
      return absl::InvalidArgumentError(StrCat("tenant ", q.tenant, ": models.", model, " (", n,
                                               ") exceeds its total of ", q.gpus, " GPU(s)"));
    }
  }
  return absl::OkStatus();
}

const char* QuotaClassName(QuotaClass c) {
  return c == QuotaClass::kGuaranteed ? "guaranteed" : "borrowed";
}

uint32_t QuotaHold::total() const {
  uint32_t n = 0;
  for (const auto& [m, g] : gpus) n += g;
  return n;
}

absl::Status QuotaLedger::SetQuota(const TenantQuota& q) {
  if (auto st = ValidateQuota(q); !st.ok()) return st;
  quotas_[q.tenant] = q;
  return absl::OkStatus();
}

QuotaUse QuotaLedger::Use(const std::string& tenant) const {
  QuotaUse u;
  for (const auto& [k, h] : holds_) {
    if (h.tenant != tenant) continue;
    if (h.cls == QuotaClass::kGuaranteed) {
      u.guaranteed += h.total();
      for (const auto& [m, g] : h.gpus) u.guaranteed_by_model[m] += g;
    } else {
      u.borrowed += h.total();
    }
  }
  return u;
}

const QuotaHold* QuotaLedger::Find(const std::string& job_id, uint64_t epoch) const {
  auto it = holds_.find({job_id, epoch});
  return it == holds_.end() ? nullptr : &it->second;
}

absl::Status QuotaLedger::Check(const std::string& job_id, uint64_t epoch,
                                const std::string& coordinator) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::OkStatus();
  if (it->second.coordinator != coordinator) {
    return absl::PermissionDeniedError(StrCat("job ", job_id, " is coordinated by ",
                                              it->second.coordinator, ", not by ", coordinator));
  }
  if (epoch < it->second.newest_epoch) {
    return absl::FailedPreconditionError(StrCat("stale epoch ", epoch, " for job ", job_id,
                                                ": epoch ", it->second.newest_epoch,
                                                " already seen"));
  }
  return absl::OkStatus();
}

absl::StatusOr<QuotaHold> QuotaLedger::Prepare(const std::string& job_id, uint32_t attempt,
                                               uint64_t epoch, const std::string& coordinator,
                                               const std::string& tenant,
                                               const std::map<std::string, uint32_t>& gpus,
                                               int64_t now_ms, int64_t ttl_ms) {
  if (auto st = Check(job_id, epoch, coordinator); !st.ok()) return st;
  if (const QuotaHold* same = Find(job_id, epoch)) {
    if (same->attempt == attempt && same->tenant == tenant) return *same;
    return absl::FailedPreconditionError(
        StrCat("epoch ", epoch, " of job ", job_id, " already holds quota for attempt ",
               same->attempt));
  }
  if (auto j = jobs_.find(job_id); j != jobs_.end() && epoch == j->second.newest_epoch) {
    return absl::FailedPreconditionError(
        StrCat("epoch ", epoch, " of job ", job_id, " was aborted or expired"));
  }
  auto q = quotas_.find(tenant);
  if (q == quotas_.end()) {
    return absl::FailedPreconditionError(StrCat("tenant ", tenant, " is not governed here"));
  }
  uint32_t total = 0;
  for (const auto& [m, g] : gpus) total += g;
  if (total == 0) return absl::InvalidArgumentError("no GPUs asked of the quota");
  // The job's own older holds make way for this epoch (counted as free).
  std::vector<Key> older;
  for (auto it = holds_.lower_bound({job_id, 0}); it != holds_.end() && it->first.first == job_id;
       ++it) {
    older.push_back(it->first);
  }
  std::map<Key, QuotaHold> saved;
  for (const auto& k : older) saved.emplace(k, holds_.at(k));
  for (const auto& k : older) holds_.erase(k);
  const QuotaUse use = Use(tenant);
  const TenantQuota& quota = q->second;
  bool nominal = static_cast<uint64_t>(use.guaranteed) + total <= quota.gpus;
  std::string over;
  for (const auto& [m, g] : gpus) {
    auto lim = quota.models.find(m);
    if (lim == quota.models.end()) continue;
    auto u = use.guaranteed_by_model.find(m);
    const uint32_t used = u == use.guaranteed_by_model.end() ? 0 : u->second;
    if (used + static_cast<uint64_t>(g) > lim->second) {
      nominal = false;
      over = StrCat(", ", used, " of its ", lim->second, " ", m);
    }
  }
  QuotaHold h;
  h.job_id = job_id;
  h.attempt = attempt;
  h.epoch = epoch;
  h.coordinator = coordinator;
  h.tenant = tenant;
  h.gpus = gpus;
  h.expires_at_ms = SatAdd(now_ms, ttl_ms);
  const uint64_t in_use = static_cast<uint64_t>(use.guaranteed) + use.borrowed;
  // Everything the tenant holds, guaranteed or borrowed, stays within
  // nominal + borrow (as a Kueue ClusterQueue's usage stays within nominal
  // quota + borrowing limit).
  if (in_use + total <= static_cast<uint64_t>(quota.gpus) + quota.borrow) {
    h.cls = nominal ? QuotaClass::kGuaranteed : QuotaClass::kBorrowed;
  } else {
    holds_.insert(saved.begin(), saved.end());
    return absl::ResourceExhaustedError(
        StrCat("waiting for quota: tenant ", tenant, " holds ", in_use, " of ", quota.gpus,
               " GPU(s) + ", quota.borrow, " borrowable", over, "; the job needs ", total));
  }
  holds_[{job_id, epoch}] = h;
  JobEntry& e = jobs_[job_id];
  if (e.coordinator.empty()) e.coordinator = coordinator;
  e.newest_epoch = epoch;
  e.last_seen_ms = std::max(e.last_seen_ms, now_ms);
  return h;
}

absl::StatusOr<QuotaHold> QuotaLedger::Commit(const std::string& job_id, uint32_t attempt,
                                              uint64_t epoch, const std::string& coordinator,
                                              int64_t now_ms, int64_t lease_ms) {
  if (auto st = Check(job_id, epoch, coordinator); !st.ok()) return st;
  auto it = holds_.find({job_id, epoch});
  if (it == holds_.end() || it->second.attempt != attempt ||
      (!it->second.committed && now_ms > it->second.expires_at_ms)) {
    if (it != holds_.end() && it->second.attempt == attempt) holds_.erase(it);
    return absl::NotFoundError(StrCat("no live quota hold of job ", job_id, " at epoch ", epoch));
  }
  // From now on the lease, not the prepare TTL, keeps the hold alive.
  it->second.expires_at_ms = it->second.committed
                                 ? std::max(it->second.expires_at_ms, SatAdd(now_ms, lease_ms))
                                 : SatAdd(now_ms, lease_ms);
  it->second.committed = true;
  jobs_[job_id].last_seen_ms = std::max(jobs_[job_id].last_seen_ms, now_ms);
  return it->second;
}

const QuotaHold* QuotaLedger::Renew(const std::string& job_id, uint64_t epoch, int64_t now_ms,
                                    int64_t lease_ms) {
  auto it = holds_.find({job_id, epoch});
  if (it == holds_.end()) return nullptr;
  if (it->second.committed) {
    it->second.expires_at_ms = std::max(it->second.expires_at_ms, SatAdd(now_ms, lease_ms));
  }
  jobs_[job_id].last_seen_ms = std::max(jobs_[job_id].last_seen_ms, now_ms);
  return &it->second;
}

absl::Status QuotaLedger::Abort(const std::string& job_id, uint64_t epoch,
                                const std::string& coordinator) {
  if (auto st = Check(job_id, epoch, coordinator); !st.ok()) return st;
  for (auto it = holds_.lower_bound({job_id, 0});
       it != holds_.end() && it->first.first == job_id && it->first.second <= epoch;) {
    it = holds_.erase(it);
  }
  JobEntry& e = jobs_[job_id];
  if (e.coordinator.empty()) e.coordinator = coordinator;
  e.newest_epoch = std::max(e.newest_epoch, epoch);
  return absl::OkStatus();
}

std::vector<QuotaLedger::Key> QuotaLedger::Expire(int64_t now_ms) {
  std::vector<Key> out;
  for (auto it = holds_.begin(); it != holds_.end();) {
    if (now_ms > it->second.expires_at_ms) {
      out.push_back(it->first);
      jobs_[it->first.first].newest_epoch =
          std::max(jobs_[it->first.first].newest_epoch, it->first.second);
      it = holds_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void QuotaLedger::Prune(int64_t before_ms) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    auto h = holds_.lower_bound({it->first, 0});
    const bool held = h != holds_.end() && h->first.first == it->first;
    it = (!held && it->second.last_seen_ms < before_ms) ? jobs_.erase(it) : std::next(it);
  }
}

void QuotaLedger::Restore(const QuotaHold& h) {
  holds_[{h.job_id, h.epoch}] = h;
  JobEntry& e = jobs_[h.job_id];
  e.coordinator = h.coordinator;
  e.newest_epoch = std::max(e.newest_epoch, h.epoch);
}

}  // namespace fedgate::federation
