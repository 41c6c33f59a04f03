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

// What a node's ad says besides free GPUs: GPUs a guaranteed job may
// preempt, and GPUs being freed by preemption, kept for a job (by job id).
// Also what a capacity view counts but placement never offers: GPUs that
// failed their health check, and whether the admins cordoned the node.
struct NodeExtra {
  uint32_t preemptible = 0;
  std::map<std::string, uint32_t> kept_for;
  uint32_t unhealthy = 0;
  bool cordoned = false;
};
using NodeExtras = std::map<std::string, NodeExtra>;

v1::CapacityAd MakeOwnAd(const std::string& site, const std::vector<Node>& nodes, uint64_t seq,
                         int64_t now_ms, int64_t ttl_ms, int64_t interval_ms,
                         const FreeGpus& free = {}, const NodeExtras& extras = {});

// Whom an offer is for: GPUs kept for `job_id` count as free to it, and with
// `preempt` so do preemptible GPUs (a guaranteed job that may preempt).
struct OfferFor {
  std::string job_id;
  bool preempt = false;
};

// Sites sorted by name; the local site has state local; withdrawn ads are
// left out; a silent origin is "down" and offers 0 free GPUs.
v1::GetCapacityResponse BuildCapacityView(const std::string& self_site,
                                          const std::vector<Node>& local_nodes,
                                          const std::vector<const StoredAd*>& ads, int64_t now_ms,
                                          const FreeGpus& local_free = {},
                                          const NodeExtras& local_extras = {});
// The same over copies of the ads.
v1::GetCapacityResponse BuildCapacityView(const std::string& self_site,
                                          const std::vector<Node>& local_nodes,
                                          const std::vector<StoredAd>& ads, int64_t now_ms,
                                          const FreeGpus& local_free = {},
                                          const NodeExtras& local_extras = {});

// Per-node offers for placement: the local inventory and every fresh,
// non-withdrawn ad; a silent origin is offered as down.
std::vector<SiteOffer> BuildOffers(const std::string& self_site,
                                   const std::vector<Node>& local_nodes,
                                   const std::vector<const StoredAd*>& ads, int64_t now_ms,
                                   const FreeGpus& local_free = {},
                                   const NodeExtras& local_extras = {}, const OfferFor& whom = {});

// Whether the origin of a stored ad is silent (down) now.
bool IsSilent(const StoredAd& stored, int64_t now_ms);

}  // namespace fedgate::federation
