// A measured link, as probes record them and ads carry them.
#pragma once

#include <cstdint>
#include <string>

#include "fedgate/v1/federation.pb.h"

namespace fedgate::testing {

inline v1::Link MakeLink(const std::string& from, const std::string& to, double gbps,
                         int64_t measured_at_ms) {
  v1::Link l;
  l.set_from(from);
  l.set_to(to);
  l.set_gbps(gbps);
  l.set_measured_at_unix_ms(measured_at_ms);
  return l;
}

}  // namespace fedgate::testing
