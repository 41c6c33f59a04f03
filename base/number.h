// The one way fedgate reads a number from text it did not write in this
// process: files, store rows, peers' fields, Slurm's output. No exception,
// no locale, no silent wrap: the whole text must be the number and it must
// fit the type, else nullopt.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace fedgate {

template <typename T>
std::optional<T> ParseNumber(std::string_view text) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "integers only");
  T value{};
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first == last) return std::nullopt;
  auto [end, err] = std::from_chars(first, last, value);
  if (err != std::errc() || end != last) return std::nullopt;
  return value;
}

// A double in plain decimal or exponent notation ("9.6", "1e3"); nullopt
// for anything else, including inf and nan.
std::optional<double> ParseDouble(std::string_view text);

}  // namespace fedgate
