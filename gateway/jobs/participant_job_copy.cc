// The records of jobs this site runs slices of (v1::JobCopy), kept beside
// the holds: stored when a commit or a renewal brings a newer version than
// the kept one, answered from by this gateway's `jobs get` for a job it does
// not coordinate, and forgotten once no slice of the job holds GPUs here.
#include <spdlog/spdlog.h>

#include "base/str_cat.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

uint64_t Participant::CopyVersionLocked(const std::string& job_id) const {
  const auto it = copy_versions_.find(job_id);
  return it == copy_versions_.end() ? 0 : it->second;
}

uint64_t Participant::KeepJobCopy(const std::string& from, const v1::ReservationKey& key,
                                  const v1::JobCopy& copy) {
  std::string tenant;
  {
    std::lock_guard lock(mu_);
    const uint64_t have = CopyVersionLocked(key.job_id());
    if (copy.version() <= have) return have;
    // Kept beside a hold only: with none, there is nothing to keep it for.
    const federation::Hold* hold = ledger_.Find(key.job_id(), key.epoch());
    if (hold == nullptr) return have;
    tenant = hold->tenant;
  }
  auto job = CheckCopy(copy, key.job_id(), tenant, from);
  if (!job.ok()) {
    spdlog::warn("job {}: refused the copy of its record sent by {}: {}", key.job_id(), from,
                 std::string(job.status().message()));
    std::lock_guard lock(mu_);
    return CopyVersionLocked(key.job_id());
  }
  if (store_ != nullptr) {
    if (auto st = store_->PutJobCopy(key.job_id(), copy.version(), copy.job()); !st.ok()) {
      spdlog::error("job {}: cannot keep the copy of its record: {}", key.job_id(),
                    std::string(st.message()));
      std::lock_guard lock(mu_);
      return CopyVersionLocked(key.job_id());
    }
  }
  std::lock_guard lock(mu_);
  uint64_t& kept = copy_versions_[key.job_id()];
  kept = std::max(kept, copy.version());
  return kept;
}

absl::StatusOr<std::optional<v1::Job>> Participant::JobFromCopy(const std::string& job_id) const {
  if (store_ == nullptr) return std::optional<v1::Job>();
  auto row = store_->GetJobCopy(job_id);
  if (!row.ok()) return row.status();
  if (!row->has_value()) return std::optional<v1::Job>();
  v1::Job job;
  if (!job.ParseFromString((*row)->job)) {
    return absl::DataLossError(StrCat("the kept copy of job ", job_id, " does not parse"));
  }
  return std::optional<v1::Job>(std::move(job));
}

std::vector<std::string> Participant::OrphanCopiesLocked() {
  std::vector<std::string> out;
  for (auto it = copy_versions_.begin(); it != copy_versions_.end();) {
    // Kept while a slice of the job holds GPUs here (running, parked, stopping).
    bool held = false;
    for (auto s = slices_.lower_bound({it->first, 0}); s != slices_.end() && s->first.first == it->first;
         ++s) {
      held = held || !s->second.released;
    }
    if (held) {
      ++it;
      continue;
    }
    out.push_back(it->first);
    it = copy_versions_.erase(it);
  }
  return out;
}

void Participant::LoadCopyVersions() {
  if (store_ == nullptr) return;
  auto rows = store_->ListJobCopies();
  if (!rows.ok()) {
    spdlog::error("cannot read the kept job records: {}", std::string(rows.status().message()));
    return;
  }
  // Those of jobs without a slice here any more go with the next sweep.
  std::lock_guard lock(mu_);
  for (const auto& [job, version] : *rows) copy_versions_[job] = version;
}

}  // namespace fedgate::gateway
