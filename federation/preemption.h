// Which running slices a site preempts for a guaranteed job (DESIGN.md
// "Queue policy"): among its spot and borrowed slices that have run at least
// preemption.min_runtime, the set that frees enough GPUs on every node the
// job needs while losing the fewest GPU-seconds of work. Pure.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fedgate::federation {

struct VictimCandidate {
  std::string id;                                // the slice, for the caller
  std::map<std::string, uint32_t> gpus_by_node;  // what stopping it frees
  double lost_gpu_seconds = 0;                   // GPUs x time it has run
};

// The victims that cover `deficit` (GPUs still needed per node) at the least
// total lost GPU-seconds, ties to fewer victims; nullopt when even all the
// candidates do not cover it. Exact up to 16 candidates touching the
// deficit's nodes, greedy by loss per freed GPU beyond that.
std::optional<std::vector<std::string>> ChooseVictims(
    const std::vector<VictimCandidate>& candidates, const std::map<std::string, uint32_t>& deficit);

}  // namespace fedgate::federation
