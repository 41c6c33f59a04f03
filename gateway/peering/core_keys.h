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

// Where tenants at other sites reach this site's REST API: advertise.http_endpoint,
// else listen.http's host with the port it bound; a wildcard host takes the
// host others dial for gRPC ("" when neither names one).
inline std::string AdvertisedHttpEndpoint(const Config& c, int bound_port) {
  if (!c.advertise.http_endpoint.empty()) return c.advertise.http_endpoint;
  auto wildcard = [](const std::string& h) {
    return h.empty() || h == "0.0.0.0" || h == "::" || h == "[::]" || h == "*";
  };
  std::string host = SplitHostPort(c.listen.http).host;
  if (wildcard(host)) host = SplitHostPort(AdvertisedEndpoint(c)).host;
  if (wildcard(host) || bound_port <= 0) return "";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(bound_port);
}

}  // namespace fedgate::gateway
