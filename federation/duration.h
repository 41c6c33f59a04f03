// Durations as operators write them: "500ms", "90s", "5m", "2h".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedgate::federation {

// Parses a duration string into milliseconds. Accepts an unsigned integer or
// decimal followed by ms, s, m or h; rejects empty, negative and unit-less text.
absl::StatusOr<int64_t> ParseDurationMs(std::string_view text);

// Formats milliseconds in the shortest exact unit ("1500ms", "2s", "5m").
std::string FormatDurationMs(int64_t ms);

}  // namespace fedgate::federation
