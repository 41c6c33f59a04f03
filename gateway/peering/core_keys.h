// What GatewayCore keeps in the store and says in handshakes.
#pragma once

#include <string>

#include "base/host_port.h"
#include "gateway/config/config.h"

namespace fedgate::gateway {

inline constexpr const char* kTenantHomesKey = "tenant_homes";
inline constexpr const char* kSeqKey = "ad_seq";
inline constexpr const char* kIncarnationKey = "ad_incarnation";
inline constexpr const char* kSignedAdsCapability = "ads.signed.v1";

// advertise.endpoint, else listen.grpc unless that is a wildcard address
// nobody can dial ("": the site cannot be reached beyond its peers).
inline std::string AdvertisedEndpoint(const Config& c) {
  if (!c.advertise.endpoint.empty()) return c.advertise.endpoint;
  const auto [host, port] = SplitHostPort(c.listen.grpc);
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*") return "";
  return c.listen.grpc;
}

}  // namespace fedgate::gateway
