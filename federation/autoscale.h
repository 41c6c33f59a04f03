// The autoscaler of a service, after the Kubernetes HPA: every interval,
// desired = ceil(RPS over the last window / target), bounded by min and max,
// with no tolerance band. Up as soon as desired has stayed above the current
// count for up_after (the clock restarts after each step); down only after
// desired stayed below for down_after, to the highest desired seen in that
// time (stabilisation). Pure: time comes in as arguments.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "federation/service_spec.h"

namespace fedgate::federation {

class Autoscaler {
 public:
  explicit Autoscaler(const ServicePolicy& p) : p_(p) {}
  void SetPolicy(const ServicePolicy& p) { p_ = p; }

  // `n` requests arrived at `now_ms`.
  void Count(int64_t now_ms, uint64_t n = 1);

  struct Decision {
    double rps = 0;          // over the window
    uint32_t desired = 0;    // this tick's, bounded
    uint32_t next = 0;       // the count to run now
    std::string why;         // for the service's events; "" = no change
  };
  // Requests per second over the window ending at `now_ms`.
  double Rate(int64_t now_ms);
  // One tick at `now_ms` with `current` replicas wanted so far.
  Decision Tick(int64_t now_ms, uint32_t current);

 private:
  ServicePolicy p_;
  int64_t first_ms_ = -1;
  std::deque<std::pair<int64_t, uint64_t>> arrivals_;  // (ms, count), oldest first
  std::optional<int64_t> above_since_, below_since_;
  std::deque<std::pair<int64_t, uint32_t>> recent_;    // desired per tick within down_after
};

}  // namespace fedgate::federation
