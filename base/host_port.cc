#include "base/host_port.h"

#include <charconv>

namespace fedgate {

HostPort SplitHostPort(std::string_view endpoint) {
  HostPort out;
  const size_t colon = endpoint.rfind(':');
  std::string_view host = colon == std::string_view::npos ? endpoint : endpoint.substr(0, colon);
  if (colon != std::string_view::npos) out.port = std::string(endpoint.substr(colon + 1));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  out.host = std::string(host);
  return out;
}

std::optional<int> ParsePort(std::string_view port) {
  int v = 0;
  const char* end = port.data() + port.size();
  auto [p, ec] = std::from_chars(port.data(), end, v);
  if (port.empty() || ec != std::errc() || p != end || v < 0 || v > 65535) return std::nullopt;
  return v;
}

}  // namespace fedgate
