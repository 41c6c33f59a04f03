// Placement: which sites and GPUs a job gets. A pure function of the job's
// constraints, the sites' offers and the bandwidth between them.
//
// Objective (DESIGN.md), lexicographic over feasible sets of sites: the
// job's preferred_sites in their order when a feasible set fits within them;
// then fewest sites; then the least time to stage the job's datasets to the
// chosen sites (federation/dataset.h); then the highest bottleneck link among
// the chosen sites (an unknown link counts as 0, a single site as unbounded);
// then the least capacity left free on the chosen sites (best fit); then the
// set whose sorted site names compare first.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fedgate::federation {

struct JobRequest {
  uint32_t gpus = 0;
  std::vector<std::string> gpu_models;  // any of; empty = any
  uint32_t min_gpu_memory_gib = 0;
  uint32_t max_sites = 0;  // 0 = no limit
  uint32_t min_gpus_per_site = 1;
  double min_link_gbps = 0;  // an unknown link never satisfies a value > 0
  std::vector<std::string> allowed_sites;  // empty = all
  std::vector<std::string> avoided_sites;
  std::vector<std::string> preferred_sites;  // tried first, in order
  std::vector<std::string> datasets;         // staged to every chosen site that lacks them
  // MIG slices of this profile instead of whole GPUs ("" = whole GPUs):
  // only nodes advertised as "<model> MIG <profile>" (federation/mig.h).
  std::string mig_profile;
};

struct NodeOffer {
  std::string name;
  std::string gpu_model;
  uint32_t gpu_memory_gib = 0;
  uint32_t free_gpus = 0;
};

struct SiteOffer {
  std::string site;
  bool up = true;
  std::vector<NodeOffer> nodes;
  std::map<std::string, uint64_t> datasets;  // held here: name -> bytes
};

struct Slice {
  std::string site;
  std::string node;
  uint32_t gpus = 0;
  uint32_t first_rank = 0;
};

struct SiteExplanation {
  std::string site;
  bool used = false;
  std::string reason;  // why used, or why not
};

struct Placement {
  std::vector<std::string> sites;  // in rank order
  std::vector<Slice> slices;       // site by site, node by node
  double bottleneck_gbps = std::numeric_limits<double>::infinity();
  uint32_t leftover_gpus = 0;  // eligible GPUs left free on the chosen sites
  double staging_seconds = 0;  // the slowest chosen site's staging of the datasets
};

struct PlacementResult {
  std::optional<Placement> placement;  // nullopt: infeasible now
  std::vector<SiteExplanation> explanation;  // one per offered site, sorted
  std::string summary;
};

// Link bandwidth between two sites in Gbit/s, nullopt when unknown.
using PairGbps = std::function<std::optional<double>(const std::string&, const std::string&)>;

// Link bandwidth between offers[a] and offers[b], by position: callers with a
// large view resolve names once (LinkMatrix::SiteId) instead of per pair.
using OfferPairGbps = std::function<std::optional<double>(size_t a, size_t b)>;

// Exact over all site sets while that is cheap (`exact_budget` candidate sets
// per set size); beyond it a greedy search seeded from the 8 sites with the
// most matching free GPUs.
PlacementResult Place(const JobRequest& job, const std::vector<SiteOffer>& offers,
                      const PairGbps& links, uint64_t exact_budget = 200000);
PlacementResult PlaceByIndex(const JobRequest& job, const std::vector<SiteOffer>& offers,
                             const OfferPairGbps& links, uint64_t exact_budget = 200000);

// The objective value of a set of sites, for comparing placements.
struct Score {
  uint32_t sites = 0;
  double staging_seconds = 0;
  double bottleneck_gbps = 0;
  uint32_t leftover_gpus = 0;
};
// True when `a` is strictly better than `b` (ignoring the name tie-break).
bool Better(const Score& a, const Score& b);

}  // namespace fedgate::federation
