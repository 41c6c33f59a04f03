// String concatenation that takes std::string_view (Debian's Abseil builds its
// own absl::string_view, so absl::StrCat does not accept std::string_view).
#pragma once

#include <sstream>
#include <string>

namespace fedgate {

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace fedgate
