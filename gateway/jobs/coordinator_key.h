// The key every reservation message of a job's attempt carries.
#pragma once

#include <cstdint>

#include "fedgate/v1/federation.pb.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

inline v1::ReservationKey Key(const JobRecord& job, uint64_t epoch) {
  v1::ReservationKey k;
  k.set_job_id(job.id);
  k.set_attempt(job.attempt);
  k.set_epoch(epoch);
  return k;
}

}  // namespace fedgate::gateway
