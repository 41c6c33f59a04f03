// A witness of a job keeps the job's record with no slice here: the copy a
// coordinator sends with its renewals is kept when the record names this
// site among the job's witnesses, and forgotten when the coordinator says
// the job left RUNNING (or, by OrphanCopiesLocked, when no coordinator has
// been heard for kFinishedSliceKeepMs).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

std::optional<v1::Job> Participant::WitnessCopy(const v1::JobCopy& copy, const std::string& job_id,
                                                const std::string& from) const {
  v1::Job job;
  if (!job.ParseFromString(copy.job()) || job.id() != job_id || job.coordinator() != from) {
    return std::nullopt;
  }
  const auto& w = job.run().witnesses();
  if (std::find(w.begin(), w.end(), config_.site) == w.end()) return std::nullopt;
  return job;
}

uint64_t Participant::ForgetWitnessCopy(const std::string& job_id, uint64_t version) {
  {
    std::lock_guard lock(mu_);
    auto it = copies_.find(job_id);
    if (it == copies_.end() || !it->second.witness) return version;
    for (auto s = slices_.lower_bound({job_id, 0}); s != slices_.end() && s->first.first == job_id;
         ++s) {
      if (!s->second.released) return it->second.version;  // a slice here still needs it
    }
    copies_.erase(it);
  }
  if (store_ != nullptr) (void)store_->DeleteJobCopy(job_id);
  spdlog::info("job {}: left RUNNING; this witness forgets its record", job_id);
  return version;
}

}  // namespace fedgate::gateway
