// The end of a job as its members learn it: the coordinator sends every
// member the record that left RUNNING (Coordinator::TellMembersTheEnd), and
// a member forgets its copy, so that a job that is over is never taken over
// by a member that kept its record (a fenced slice, a slice that ended by
// itself) and votes for nobody.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

std::optional<uint64_t> Participant::ForgetEndedCopy(const std::string& from,
                                                     const std::string& job_id,
                                                     const v1::JobCopy& copy) {
  v1::Job job;
  if (!job.ParseFromString(copy.job()) || job.id() != job_id || job.coordinator() != from) {
    return std::nullopt;
  }
  // Ended, or back in the queue (a new attempt commits a new record); a
  // commit's copy says RESERVING, a renewal's RUNNING. A queued record
  // (before the first world) is no end for the members it names; a world's
  // record that leaves this site out ends the queued record it kept.
  const auto st = job.state();
  const auto members = MembersOf(job.run(), job.coordinator());
  const bool member = std::find(members.begin(), members.end(), config_.site) != members.end();
  const bool queued = st == v1::Job::PENDING && QueuedRecord(job.run());
  if (queued && member) return std::nullopt;
  const bool ends = st == v1::Job::SUCCEEDED || st == v1::Job::FAILED ||
                    st == v1::Job::CANCELLED || st == v1::Job::PENDING;
  {
    std::lock_guard lock(mu_);
    auto it = copies_.find(job_id);
    if (!ends && (member || it == copies_.end() || !it->second.queued)) return std::nullopt;
    if (it == copies_.end()) return copy.version();  // nothing kept: nothing to forget
    KeptCopy& kept = it->second;
    // Only the coordinator of the kept term ends the job here (an older
    // one was refused before; a newer one's grants move the term first).
    if (kept.term.coordinator != from || kept.term.term != job.term()) return std::nullopt;
    // An old attempt's end overtaken by a newer attempt's commit.
    if (copy.version() <= kept.version) return kept.version;
    for (auto s = slices_.lower_bound({job_id, 0}); s != slices_.end() && s->first.first == job_id;
         ++s) {
      if (!s->second.released) {
        // Its ranks are being stopped: the record goes with the GPUs.
        kept.ended = true;
        return copy.version();
      }
    }
    copies_.erase(it);
  }
  if (store_ != nullptr) (void)store_->DeleteJobCopy(job_id);
  spdlog::info("job {}: {} says it is {}{}; this member forgets its record", job_id, from,
               v1::Job::State_Name(job.state()), ends ? "" : " without this site");
  return copy.version();
}

}  // namespace fedgate::gateway
