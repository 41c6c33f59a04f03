// Quotas of the tenants whose home is this site, and the holds on them that
// coordinators make with Prepare and Commit: stored so that a restart
// neither forgets a quota set with `fedctl quota set` nor over-admits.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/str_cat.h"
#include "federation/clock.h"
#include "federation/names.h"
#include "federation/saturating.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {
namespace {

constexpr const char* kQuotasKey = "quotas";
constexpr const char* kQuotaHoldsKey = "quota_holds";
constexpr const char* kQuotaHoldPrefix = "quota_hold/";

// Only a commit must be durable before it answers: a prepared hold lost in
// a crash makes its commit fail (the job is reserved again), and a release
// lost in a crash only holds quota until the restored hold's lease lapses.
// So released holds' rows are deleted by the next sweep.
std::string QuotaHoldRow(const std::string& job_id, uint64_t epoch) {
  return StrCat(kQuotaHoldPrefix, job_id, "/", epoch);
}

// Every stored quota hold; before one row per hold, all holds were one
// record under "quota_holds".
std::vector<v1::QuotaHoldRecord> StoredQuotaHolds(Store* store) {
  std::vector<v1::QuotaHoldRecord> recs;
  if (auto v = store->GetKv(kQuotaHoldsKey); v.ok() && v->has_value()) {
    v1::QuotaHoldRecords old;
    if (old.ParseFromString(**v)) recs.assign(old.holds().begin(), old.holds().end());
  }
  if (auto rows = store->ListKv(kQuotaHoldPrefix); rows.ok()) {
    for (const auto& [k, v] : *rows) {
      v1::QuotaHoldRecord r;
      if (r.ParseFromString(v)) recs.push_back(r);
    }
  }
  return recs;
}

federation::QuotaHold HoldFromRecord(const v1::QuotaHoldRecord& r) {
  federation::QuotaHold h;
  h.job_id = r.key().job_id();
  h.attempt = r.key().attempt();
  h.epoch = r.key().epoch();
  h.coordinator = r.coordinator();
  h.tenant = r.tenant();
  h.gpus = {r.gpus().begin(), r.gpus().end()};
  h.cls = r.borrowed() ? federation::QuotaClass::kBorrowed : federation::QuotaClass::kGuaranteed;
  h.committed = r.committed();
  h.expires_at_ms = r.expires_at_unix_ms();
  return h;
}

}  // namespace

void Participant::LoadQuotas() {
  if (store_ == nullptr) return;
  // Quotas set with `fedctl quota set` override the config file's.
  v1::QuotasResponse stored;
  if (auto v = store_->GetKv(kQuotasKey); v.ok() && v->has_value()) {
    if (!stored.ParseFromString(**v)) stored.Clear();
  }
  // Quota holds survive a restart: forgetting them would over-admit. Each
  // gets a fresh lease, so its coordinator's renewals can find it again.
  const auto recs = StoredQuotaHolds(store_);
  const int64_t fresh = federation::SatAdd(clock_->NowMs(), 2 * config_.jobs.lease_ms);
  std::vector<federation::QuotaHold> holds;
  {
    std::lock_guard lock(mu_);
    for (const auto& t : stored.quotas()) {
      federation::TenantQuota q{t.tenant(), t.gpus(), {t.models().begin(), t.models().end()},
                                t.borrow(), t.weight() > 0 ? t.weight() : 1};
      if (auto st = quota_.SetQuota(q); !st.ok()) {
        spdlog::error("stored quota of tenant {} ignored: {}", t.tenant(), std::string(st.message()));
      }
    }
    for (const auto& r : recs) {
      federation::QuotaHold h = HoldFromRecord(r);
      h.expires_at_ms = std::max(h.expires_at_ms, fresh);
      quota_.Restore(h);
      holds.push_back(std::move(h));
    }
    for (const auto& [t, q] : quota_.quotas()) {
      spdlog::info("governing tenant {}: {} GPU(s), borrow {}", t, q.gpus, q.borrow);
    }
  }
  for (const auto& h : holds) PersistQuotaHold(h);
  (void)store_->DeleteKv(kQuotaHoldsKey);
  if (!recs.empty()) spdlog::info("restored {} quota hold(s)", recs.size());
}

void Participant::PersistQuotaHold(const federation::QuotaHold& h) {
  if (store_ == nullptr) return;
  v1::QuotaHoldRecord r;
  r.mutable_key()->set_job_id(h.job_id);
  r.mutable_key()->set_attempt(h.attempt);
  r.mutable_key()->set_epoch(h.epoch);
  r.set_coordinator(h.coordinator);
  r.set_tenant(h.tenant);
  for (const auto& [m, g] : h.gpus) (*r.mutable_gpus())[m] = g;
  r.set_borrowed(h.cls == federation::QuotaClass::kBorrowed);
  r.set_committed(h.committed);
  r.set_expires_at_unix_ms(h.expires_at_ms);
  if (auto st = store_->PutKv(QuotaHoldRow(h.job_id, h.epoch), r.SerializeAsString()); !st.ok()) {
    spdlog::error("cannot store the quota hold of job {}: {}", h.job_id, std::string(st.message()));
    return;
  }
  std::lock_guard lock(stored_mu_);
  stored_quota_holds_.insert({h.job_id, h.epoch});
}

std::vector<SliceKey> Participant::ReleasedQuotaRowsLocked() {
  quota_dirty_ = false;
  std::vector<SliceKey> out;
  if (store_ == nullptr) return out;
  std::lock_guard lock(stored_mu_);
  for (const auto& key : stored_quota_holds_) {
    if (!quota_.holds().contains(key)) out.push_back(key);
  }
  return out;
}

void Participant::DeleteQuotaRows(const std::vector<SliceKey>& released) {
  if (released.empty()) return;
  std::vector<std::string> rows;
  for (const auto& [job, epoch] : released) rows.push_back(QuotaHoldRow(job, epoch));
  if (auto st = store_->DeleteKvs(rows); !st.ok()) {
    // They stay listed and are tried again by the next sweep that has any.
    spdlog::error("cannot delete {} released quota hold(s): {}", rows.size(),
                  std::string(st.message()));
    std::lock_guard lock(mu_);
    quota_dirty_ = true;
    return;
  }
  std::lock_guard lock(stored_mu_);
  for (const auto& key : released) stored_quota_holds_.erase(key);
}

v1::TenantQuota Participant::QuotaViewLocked(const federation::TenantQuota& q) const {
  v1::TenantQuota v;
  v.set_tenant(q.tenant);
  v.set_home(config_.site);
  v.set_gpus(q.gpus);
  for (const auto& [m, g] : q.models) (*v.mutable_models())[m] = g;
  v.set_borrow(q.borrow);
  v.set_weight(q.weight);
  const auto use = quota_.Use(q.tenant);
  v.set_used_gpus(use.guaranteed);
  v.set_borrowed_gpus(use.borrowed);
  return v;
}

std::vector<v1::TenantQuota> Participant::Quotas() {
  std::lock_guard lock(mu_);
  std::vector<v1::TenantQuota> out;
  for (const auto& [t, q] : quota_.quotas()) out.push_back(QuotaViewLocked(q));
  return out;
}

absl::StatusOr<v1::TenantQuota> Participant::SetQuota(const federation::TenantQuota& q) {
  if (auto st = federation::ValidateQuota(q); !st.ok()) return st;
  if (!federation::IsValidName(q.tenant)) {
    return absl::InvalidArgumentError(StrCat("invalid tenant name \"", q.tenant.substr(0, 64), "\""));
  }
  // One quota change at a time: each writes the whole set, so two at once
  // could store one without the other.
  std::lock_guard writing(quota_write_mu_);
  v1::QuotasResponse all;
  {
    std::lock_guard lock(mu_);
    federation::QuotaLedger next = quota_;
    (void)next.SetQuota(q);
    for (const auto& [t, tq] : next.quotas()) {
      auto* v = all.add_quotas();
      v->set_tenant(tq.tenant);
      v->set_gpus(tq.gpus);
      for (const auto& [m, g] : tq.models) (*v->mutable_models())[m] = g;
      v->set_borrow(tq.borrow);
      v->set_weight(tq.weight);
    }
  }
  // Durable first, like a cordon: a restart must not forget it.
  if (store_ != nullptr) {
    if (auto st = store_->PutKv(kQuotasKey, all.SerializeAsString()); !st.ok()) return st;
  }
  v1::TenantQuota view;
  {
    std::lock_guard lock(mu_);
    (void)quota_.SetQuota(q);
    view = QuotaViewLocked(q);
  }
  spdlog::info("quota of tenant {} set: {} GPU(s), borrow {}", q.tenant, q.gpus, q.borrow);
  if (on_change_) on_change_();
  return view;
}

}  // namespace fedgate::gateway
