// "host:port", "[v6]:port" and "v6::addr:port" split once, the same way
// everywhere (configs, peer endpoints, bench targets).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fedgate {

struct HostPort {
  std::string host;  // without brackets
  std::string port;  // as written; empty when there was no colon
};

// Splits at the last colon; "[::1]:80" gives "::1" and "80".
HostPort SplitHostPort(std::string_view endpoint);
// The port as a number in 0..65535, or nullopt.
std::optional<int> ParsePort(std::string_view port);

}  // namespace fedgate
