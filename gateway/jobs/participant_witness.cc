// A witness of a job keeps the job's record with no slice here: the copy a
// coordinator sends with its renewals is kept when the record names this
// site among the job's witnesses, and forgotten when the coordinator says
// the job left RUNNING (ForgetEndedCopy) or, by OrphanCopiesLocked, when no
// coordinator has been heard for kFinishedSliceKeepMs.
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

}  // namespace fedgate::gateway
