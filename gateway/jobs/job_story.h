// A job's story (`fedctl jobs events`): the events the coordinator stores
// with the job as it moves, and their wire form.
#pragma once

#include <cstdint>
#include <string>

#include "fedgate/v1/jobs.pb.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

JobStoryEvent StoryEvent(int64_t now_ms, std::string type, std::string site, std::string message);

// The "placed" event of an attempt: the placement's summary and, for every
// site it weighed, why it was or was not used.
JobStoryEvent PlacedEvent(int64_t now_ms, const v1::RunPlan& run, uint32_t attempt);

v1::JobEvent ToProto(const JobStoryEvent& e);

}  // namespace fedgate::gateway
