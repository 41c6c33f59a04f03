// The key every reservation message of a job's attempt carries.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fedgate/v1/federation.pb.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

inline v1::ReservationKey Key(const JobRecord& job, uint64_t epoch) {
  v1::ReservationKey k;
  k.set_job_id(job.id);
  k.set_attempt(job.attempt);
  k.set_epoch(epoch);
  k.set_term(std::max<uint64_t>(job.term, kFirstTerm));
  return k;
}

}  // namespace fedgate::gateway
