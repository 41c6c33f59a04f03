#include "federation/duration.h"

#include <cctype>
#include <cmath>

#include "base/number.h"
#include "base/str_cat.h"

namespace fedgate::federation {

absl::StatusOr<int64_t> ParseDurationMs(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        fedgate::StrCat("invalid duration \"", text, "\": ", why,
                     " (use a number and a unit: 500ms, 90s, 5m, 2h, 7d)"));
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return bad("no number");
  std::string_view number = text.substr(0, i);
  std::string_view unit = text.substr(i);
  if (number.find('.') != number.rfind('.')) return bad("malformed number");
  const auto parsed = ParseDouble(number);
  if (!parsed) return bad("malformed number");
  const double value = *parsed;
  double scale = 0;
  if (unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60 * 1000;
  } else if (unit == "h") {
    scale = 3600 * 1000;
  } else if (unit == "d") {
    scale = 24 * 3600 * 1000;
  } else if (unit.empty()) {
    return bad("missing unit");
  } else {
    return bad(fedgate::StrCat("unknown unit \"", unit, "\""));
  }
  double ms = value * scale;
  if (!std::isfinite(ms) || ms > 1e15) return bad("too large");
  return static_cast<int64_t>(std::llround(ms));
}

std::string FormatDurationMs(int64_t ms) {
  if (ms != 0 && ms % (3600 * 1000) == 0) return fedgate::StrCat(ms / (3600 * 1000), "h");
  if (ms != 0 && ms % (60 * 1000) == 0) return fedgate::StrCat(ms / (60 * 1000), "m");
  if (ms != 0 && ms % 1000 == 0) return fedgate::StrCat(ms / 1000, "s");
  return fedgate::StrCat(ms, "ms");
}

}  // namespace fedgate::federation
