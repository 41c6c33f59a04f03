// Time that only moves when the test moves it.
#pragma once

#include <atomic>

#include "federation/clock.h"

namespace fedgate::testing {

class FakeClock final : public federation::Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'700'000'000'000) : now_(start_ms) {}
  int64_t NowMs() const override { return now_.load(); }
  void Advance(int64_t ms) { now_ += ms; }
  void Set(int64_t ms) { now_ = ms; }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace fedgate::testing
