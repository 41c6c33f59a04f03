// The address of a request for a service: /v1/services/<name>/<path>?query.
// Pure, so the part that faces the network is tested and fuzzed alone.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedgate::gateway {

struct ServiceTarget {
  std::string name;  // the service
  std::string path;  // what the replica receives: "/" + rest, with the query
};

// True for targets under /v1/services/<name>/ (the proxy's, not the API's).
bool IsServiceProxyTarget(std::string_view target);

// INVALID_ARGUMENT for a hostile path: ".." or "." segments (also encoded),
// encoded slashes or backslashes, NUL or control characters, bad %-escapes.
absl::StatusOr<ServiceTarget> ParseServiceTarget(std::string_view target);

// Hop-by-hop header names (RFC 9110 7.6.1), dropped in both directions.
bool IsHopByHop(std::string_view name);

}  // namespace fedgate::gateway
