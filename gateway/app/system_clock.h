// The production clock; the federation core only ever sees the interface.
#pragma once

#include <chrono>

#include "federation/clock.h"

namespace fedgate::gateway {

class SystemClock final : public federation::Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace fedgate::gateway
