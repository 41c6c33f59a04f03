#include "base/number.h"

#include <cmath>

namespace fedgate {

std::optional<double> ParseDouble(std::string_view text) {
  double value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first == last) return std::nullopt;
  auto [end, err] = std::from_chars(first, last, value);
  if (err != std::errc() || end != last || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace fedgate
