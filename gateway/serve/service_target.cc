#include "gateway/serve/service_target.h"

#include <array>
#include <cctype>

#include "base/str_cat.h"
#include "federation/names.h"

namespace fedgate::gateway {
namespace {

constexpr std::string_view kPrefix = "/v1/services/";

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool IsServiceProxyTarget(std::string_view target) {
  if (target.substr(0, kPrefix.size()) != kPrefix) return false;
  const auto rest = target.substr(kPrefix.size());
  const size_t slash = rest.find('/');
  return slash != std::string_view::npos && slash > 0 && rest.substr(0, slash).find('?') == std::string_view::npos;
}

absl::StatusOr<ServiceTarget> ParseServiceTarget(std::string_view target) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(StrCat(parts...)); };
  if (!IsServiceProxyTarget(target)) return absl::NotFoundError("not a service's address");
  if (target.size() > 8192) return bad("request target longer than 8192 bytes");
  const auto rest = target.substr(kPrefix.size());
  const size_t slash = rest.find('/');
  ServiceTarget out;
  out.name = std::string(rest.substr(0, slash));
  if (!federation::IsValidName(out.name)) {
    return bad("\"", out.name.substr(0, 63), "\" is not a service name");
  }
  const auto after = rest.substr(slash);  // "/path?query"
  const size_t q = after.find('?');
  const auto path = after.substr(0, q);
  // Check every segment as the replica will decode it.
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string decoded;
    const auto seg = path.substr(start, end - start);
    for (size_t i = 0; i < seg.size(); ++i) {
      char c = seg[i];
      if (c == '%') {
        if (i + 2 >= seg.size()) return bad("bad %-escape in the path");
        const int hi = Hex(seg[i + 1]), lo = Hex(seg[i + 2]);
        if (hi < 0 || lo < 0) return bad("bad %-escape in the path");
        c = static_cast<char>(hi * 16 + lo);
        if (c == '/' || c == '\\') return bad("encoded slash in the path");
        i += 2;
      }
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("control character in the path");
      if (c == '\\') return bad("backslash in the path");
      decoded.push_back(c);
    }
    if (decoded == ".." || decoded == ".") return bad("\"", decoded, "\" segment in the path");
    start = end + 1;
  }
  for (char c : after.substr(q == std::string_view::npos ? after.size() : q)) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == ' ') {
      return bad("control character in the query");
    }
  }
  out.path = std::string(after);
  return out;
}

bool IsHopByHop(std::string_view name) {
  static constexpr std::array<std::string_view, 8> kHop = {
      "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
      "te", "trailer", "upgrade", "proxy-connection"};
  for (auto h : kHop) {
    if (EqualsNoCase(name, h)) return true;
  }
  return false;
}

}  // namespace fedgate::gateway
