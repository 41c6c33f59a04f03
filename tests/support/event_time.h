// When a job's story says something happened: the time of the first event
// of `type` in a `fedctl jobs events -o json` answer, in Unix milliseconds
// (-1 when there is none). Lets a test time a step by the gateway's own
// clock instead of by how often it polls.
#pragma once

#include <google/protobuf/util/json_util.h>

#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fedgate/v1/jobs.pb.h"

namespace fedgate::testing {

inline int64_t EventUnixMs(const std::string& events_json, const std::string& type) {
  v1::JobEventsResponse resp;
  google::protobuf::util::JsonParseOptions lax;
  lax.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(events_json, &resp, lax).ok()) return -1;
  for (const auto& e : resp.events()) {
    if (e.type() != type) continue;
    absl::Time t;
    std::string err;
    if (!absl::ParseTime(absl::RFC3339_full, e.time(), &t, &err)) return -1;
    return absl::ToUnixMillis(t);
  }
  return -1;
}

inline int64_t WallUnixMs() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace fedgate::testing
