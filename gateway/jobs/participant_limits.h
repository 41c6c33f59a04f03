// Bounds on what a coordinator may ask of a participant, and how long a
// participant keeps what ended. Shared by the participant's files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace fedgate::gateway::participant_limits {

constexpr int64_t kMinHoldTtlMs = 1000, kMaxHoldTtlMs = 10 * 60 * 1000;
constexpr int64_t kMinLeaseMs = 1000, kMaxLeaseMs = 60 * 60 * 1000;
constexpr uint32_t kMaxWorldSize = 1 << 20;
constexpr size_t kMaxCommandBytes = 64 << 10, kMaxEnvBytes = 256 << 10;
constexpr uint32_t kMaxLogChunk = 1 << 20;
constexpr int64_t kKillGraceMs = 3000;
// How long after the participant's own stop time a slice's shims stop its
// ranks by themselves (gateway/exec/shim.h): a live gateway acts first.
constexpr int64_t kShimFenceMarginMs = 500;
// How long a finished slice's state stays answerable, and its job's epoch
// and owner remembered.
constexpr int64_t kFinishedSliceKeepMs = 10 * 60 * 1000;

// INVALID_ARGUMENT unless `id` is a job id (j- and 16 hex digits).
absl::Status CheckJobId(const std::string& id);

}  // namespace fedgate::gateway::participant_limits
