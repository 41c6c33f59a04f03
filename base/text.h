// std::string_view splitting and trimming (Debian's Abseil has its own
// string_view type, so absl::StrSplit does not take std::string_view).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fedgate {

inline std::string_view Trim(std::string_view s) {
  const auto ws = " \t\r\n\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Every piece between `sep`s (empty ones too): "a,,b" gives a, "", b.
inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

// At most `max_words` words separated by spaces or tabs; the last takes the
// rest of the text (trimmed).
inline std::vector<std::string_view> Words(std::string_view s, size_t max_words) {
  std::vector<std::string_view> out;
  s = Trim(s);
  while (!s.empty() && out.size() + 1 < max_words) {
    const size_t at = s.find_first_of(" \t");
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s = Trim(s.substr(at));
  }
  if (!s.empty()) out.push_back(s);
  return out;
}

// For a JSON string's inside: quotes and backslashes escaped, control
// characters become spaces (one log line stays one line).
inline std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
      continue;
    }
    out += c;
  }
  return out;
}

// Whether two secrets are equal, in time that depends on their lengths only
// (not on where they first differ), so a token cannot be guessed byte by byte.
inline bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | (a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace fedgate
