// `fedctl usage` across the federation: this site's ledger and that of
// every site that answers this one's reservation calls (peers, and sites
// accepting jobs from the federation), asked at once; other sites known
// from relayed ads, and sites that do not answer, are reported unreachable.
#pragma once

#include <cstdint>
#include <string>

#include "gateway/jobs/job_manager.h"

namespace fedgate::gateway {

class GatewayCore;
class ParticipantClient;

JobManager::GatheredUsage GatherUsage(GatewayCore* core, ParticipantClient* client,
                                      int64_t since_ms, int64_t until_ms,
                                      const std::string& tenant);

}  // namespace fedgate::gateway
