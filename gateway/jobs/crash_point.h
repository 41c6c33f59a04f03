// Test-only crash points: with FEDGATE_CRASH_AT=<name> in its environment the
// gateway kills itself (SIGKILL, like kill -9) the first time it reaches that
// step. Names: coordinator-after-reserving, coordinator-after-prepare,
// coordinator-after-decision, coordinator-after-first-commit,
// coordinator-after-success (the job stored SUCCEEDED, no member told yet),
// participant-after-prepare, participant-after-commit.
#pragma once

#include <signal.h>

#include <cstdlib>
#include <cstring>

namespace fedgate::gateway {

inline void CrashPoint(const char* name) {
  static const char* at = std::getenv("FEDGATE_CRASH_AT");
  if (at != nullptr && std::strcmp(at, name) == 0) ::raise(SIGKILL);
}

}  // namespace fedgate::gateway
