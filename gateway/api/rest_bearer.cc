#include "gateway/api/rest_bearer.h"

#include "base/str_cat.h"
#include "gateway/serve/service_controller.h"
#include "gateway/serve/service_target.h"
#include "gateway/serve/service_tokens.h"

namespace fedgate::gateway {

namespace http = boost::beast::http;

// listen.serve: a service's request with its bearer token (no client
// certificate). The token names the service, and so its tenant.
bool ServeWithBearerToken(ServiceProxy::Downstream& stream, boost::beast::flat_buffer& buf,
                          ServiceProxy::Head&& head, ServiceProxy* proxy, ServiceController* services,
                          ServiceTokens* tokens) {
  const std::string_view target(head.get().target().data(), head.get().target().size());
  auto parsed = ParseServiceTarget(target);
  const std::string name = parsed.ok() ? parsed->name : "-";
  auto refuse = [&](int code, const std::string& why) {
    return proxy->Refuse(stream, buf, name, code, why, code == 401);
  };
  if (!IsServiceProxyTarget(target)) {
    return refuse(404, "listen.serve answers /v1/services/<name>/<path> only");
  }
  if (!parsed.ok()) return refuse(400, std::string(parsed.status().message()));
  const auto auth = head.get()[http::field::authorization];
  if (auth.size() <= 7 || !boost::beast::iequals(auth.substr(0, 7), "Bearer ")) {
    return refuse(401, "a bearer token is required (Authorization: Bearer ...; fedctl services token NAME)");
  }
  const auto id = tokens->Lookup(std::string(auth.substr(7)));
  auto route = id ? services->RouteById(*id) : absl::StatusOr<ServiceRoute>(absl::NotFoundError(""));
  if (!route.ok()) return refuse(401, "unknown or revoked token");
  if (route->name != parsed->name) {
    return refuse(403, StrCat("this token opens another service, not \"", name, "\""));
  }
  head.get().erase(http::field::authorization);  // fedgate's credential, not the replica's
  boost::system::error_code ec;
  const auto peer = stream.next_layer().remote_endpoint(ec);
  return proxy->Serve(stream, buf, std::move(head), route->tenant,
                      ec ? std::string("unknown") : peer.address().to_string(), /*relayed=*/true);
}

}  // namespace fedgate::gateway
