#include "gateway/jobs/usage_gather.h"

#include <algorithm>
#include <set>

#include "gateway/jobs/fan_out.h"
#include "gateway/jobs/participant_client.h"
#include "gateway/peering/core.h"

namespace fedgate::gateway {

JobManager::GatheredUsage GatherUsage(GatewayCore* core, ParticipantClient* client,
                                      int64_t since_ms, int64_t until_ms,
                                      const std::string& tenant) {
  const std::string& self = core->config().site;
  JobManager::GatheredUsage g;
  std::vector<std::string> sites = {self};
  const auto down = core->DownPeers();
  const std::set<std::string> asked = core->SitesForJobs();
  for (const auto& site : asked) {
    if (site == self) continue;
    if (down.contains(site)) {
      g.unreachable.push_back(site);
    } else {
      sites.push_back(site);
    }
  }
  const v1::GetCapacityResponse capacity = core->Capacity();
  for (const auto& s : capacity.sites()) {
    if (!asked.contains(s.site())) g.unreachable.push_back(s.site());
  }
  std::vector<absl::StatusOr<v1::ListUsageResponse>> answers(sites.size(),
                                                             absl::UnknownError("no answer"));
  FanOut fan;
  for (int i : RemoteFirst(sites, self)) {
    v1::ListUsageRequest req;
    req.set_since_unix_ms(since_ms);
    req.set_until_unix_ms(until_ms);
    req.set_tenant(tenant);
    client->ListUsage(sites[i], req, 5000, fan.Collect(&answers[i]));
  }
  fan.Wait();
  for (size_t i = 0; i < sites.size(); ++i) {
    if (!answers[i].ok()) {
      g.unreachable.push_back(sites[i]);
      continue;
    }
    for (const auto& p : answers[i]->records()) {
      g.records.push_back({p.job_id(), p.attempt(), p.epoch(), p.site(), p.node(), p.gpu_model(),
                           p.tenant(), p.priority(), p.gpus(), p.start_unix_ms(), p.end_unix_ms(),
                           p.reason()});
    }
  }
  std::sort(g.unreachable.begin(), g.unreachable.end());
  return g;
}

}  // namespace fedgate::gateway
