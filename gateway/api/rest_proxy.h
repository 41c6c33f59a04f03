// The service proxy a REST server hands /v1/services/<name>/<path> to:
// its sockets' deadlines are the server's, and where this site runs
// replicas (a participant) it relays their coordinators' requests on.
#pragma once

#include <memory>

#include "gateway/serve/service_proxy.h"

namespace fedgate::gateway {

class Deadlines;
class GatewayCore;
class Metrics;
class Participant;
class ServiceController;
struct Config;

std::unique_ptr<ServiceProxy> MakeRestProxy(const Config& config, ServiceController* services,
                                            GatewayCore* core, Metrics* metrics,
                                            Participant* participant, Deadlines* deadlines);

}  // namespace fedgate::gateway
