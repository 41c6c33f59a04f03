// Which ready replica of a service gets a request (docs/services.md).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gateway/serve/service_controller.h"

namespace fedgate::gateway {

// The ready replica with the fewest requests in flight; on a tie the one on
// `site` (this gateway's), then the one whose site has the fastest measured
// link with `site` (`gbps` by site; unmeasured counts as slowest), then any
// of the equals at random (so an idle service spreads its requests). After
// a failure, replicas on `shun_site` (the failed one's) come last: a site
// that goes takes all its replicas at once. Null when none is ready or all
// were `tried`.
std::shared_ptr<Replica> PickReplica(const std::vector<std::shared_ptr<Replica>>& replicas,
                                     const std::set<std::string>& tried, const std::string& site,
                                     const std::map<std::string, double>& gbps,
                                     const std::string& shun_site = "");

}  // namespace fedgate::gateway
