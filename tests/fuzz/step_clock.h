// A clock for fuzz targets: every reading is 7 ms after the last, so
// expiries and leases move without real time passing.
#pragma once

#include <cstdint>

#include "federation/clock.h"

namespace fedgate::testing {

class StepClock final : public federation::Clock {
 public:
  int64_t NowMs() const override { return now_ += 7; }

 private:
  mutable int64_t now_ = 1'700'000'000'000;
};

}  // namespace fedgate::testing
