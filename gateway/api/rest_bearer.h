// listen.serve: a service's request with its bearer token instead of a
// client certificate (fedctl services token). The token names the service,
// and so its tenant; 404 for anything but /v1/services/<name>/<path>, 401
// without a valid token, 403 with another service's.
#pragma once

#include "gateway/serve/service_proxy.h"

namespace fedgate::gateway {

class ServiceController;
class ServiceTokens;

// Returns whether the connection may serve another request.
bool ServeWithBearerToken(ServiceProxy::Downstream& stream, boost::beast::flat_buffer& buf,
                          ServiceProxy::Head&& head, ServiceProxy* proxy, ServiceController* services,
                          ServiceTokens* tokens);

}  // namespace fedgate::gateway
