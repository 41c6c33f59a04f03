// Saturating arithmetic for times and durations in milliseconds. Values from
// peers and clients (TTLs, leases, issued_at) can be anything an int64 holds;
// `now + ttl` must never wrap into the past.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace fedgate::federation {

constexpr int64_t SatAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return out;
}

constexpr int64_t SatSub(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_sub_overflow(a, b, &out)) {
    return b < 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return out;
}

constexpr int64_t SatMul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                              : std::numeric_limits<int64_t>::max();
  }
  return out;
}

// A duration named by a peer or client, clamped to [lo, hi].
constexpr int64_t ClampMs(int64_t v, int64_t lo, int64_t hi) { return std::clamp(v, lo, hi); }

}  // namespace fedgate::federation
