#include "gateway/api/rest_proxy.h"

#include "gateway/api/socket_deadlines.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

std::unique_ptr<ServiceProxy> MakeRestProxy(const Config& config, ServiceController* services,
                                            GatewayCore* core, Metrics* metrics,
                                            Participant* participant, Deadlines* deadlines) {
  auto proxy = std::make_unique<ServiceProxy>(
      services, core, metrics, config,
      [deadlines](int fd, std::chrono::milliseconds in) { deadlines->Arm(fd, in); },
      [deadlines](int fd) { deadlines->Disarm(fd); });
  if (participant != nullptr) {  // coordinators' requests for this site's replicas
    proxy->SetLocalReplicas([participant](const std::string& from, const std::string& tenant,
                                          const std::string& job)
                                -> absl::StatusOr<std::pair<std::string, uint32_t>> {
      auto r = participant->ServiceReplica(from, tenant, job);
      if (!r.ok()) return r.status();
      return std::pair(r->addr, r->port);
    });
  }
  return proxy;
}

}  // namespace fedgate::gateway
