// The federation's capacity as one gateway sees it: its live inventory plus
// the fresh ads of every other site.
#pragma once

#include <map>
#include <vector>

#include "federation/ad_store.h"
#include "federation/inventory.h"
#include "federation/placement.h"
#include "fedgate/v1/admin.pb.h"

namespace fedgate::federation {

// How many advertise intervals without a newer seq mark an origin down.
inline constexpr int kMissedIntervalsForDown = 3;

// This site's own ad from its inventory.
// Free GPUs per node name; a node not in it has all its GPUs free.
using FreeGpus = std::map<std::string, uint32_t>;

v1::CapacityAd MakeOwnAd(const std::string& site, const std::vector<Node>& nodes, uint64_t seq,
                         int64_t now_ms, int64_t ttl_ms, int64_t interval_ms,
                         const FreeGpus& free = {});

// Sites sorted by name; the local site has state local; withdrawn ads are
// left out; a silent origin is "down" and offers 0 free GPUs.
v1::GetCapacityResponse BuildCapacityView(const std::string& self_site,
                                          const std::vector<Node>& local_nodes,
                                          const std::vector<StoredAd>& ads, int64_t now_ms,
                                          const FreeGpus& local_free = {});

// Per-node offers for placement: the local inventory and every fresh,
// non-withdrawn ad; a silent origin is offered as down.
std::vector<SiteOffer> BuildOffers(const std::string& self_site,
                                   const std::vector<Node>& local_nodes,
                                   const std::vector<StoredAd>& ads, int64_t now_ms,
                                   const FreeGpus& local_free = {});

}  // namespace fedgate::federation
