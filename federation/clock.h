// Time is injected into the federation core: production passes a system clock,
// tests a FakeClock that only moves when the test moves it.
#pragma once

#include <cstdint>

namespace fedgate::federation {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time in milliseconds since the Unix epoch.
  virtual int64_t NowMs() const = 0;
};

}  // namespace fedgate::federation
