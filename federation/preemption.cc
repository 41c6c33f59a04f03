#include "federation/preemption.h"

#include <algorithm>
#include <limits>

namespace fedgate::federation {
namespace {

bool Covers(const std::map<std::string, uint32_t>& freed,
            const std::map<std::string, uint32_t>& deficit) {
  for (const auto& [node, need] : deficit) {
    auto it = freed.find(node);
    if ((it == freed.end() ? 0 : it->second) < need) return false;
  }
  return true;
}

uint32_t Useful(const VictimCandidate& c, const std::map<std::string, uint32_t>& deficit) {
  uint32_t n = 0;
  for (const auto& [node, g] : c.gpus_by_node) {
    if (deficit.contains(node)) n += g;
  }
  return n;
}

}  // namespace

std::optional<std::vector<std::string>> ChooseVictims(
    const std::vector<VictimCandidate>& candidates,
    const std::map<std::string, uint32_t>& deficit) {
  std::vector<const VictimCandidate*> useful;
  for (const auto& c : candidates) {
    if (Useful(c, deficit) > 0) useful.push_back(&c);
  }
  std::map<std::string, uint32_t> all;
  for (const auto* c : useful) {
    for (const auto& [node, g] : c->gpus_by_node) all[node] += g;
  }
  if (!Covers(all, deficit)) return std::nullopt;
  std::vector<std::string> out;
  if (deficit.empty()) return out;
  if (useful.size() <= 16) {
    double best = std::numeric_limits<double>::infinity();
    int best_count = 0;
    uint32_t best_mask = 0;
    for (uint32_t mask = 1; mask < (1u << useful.size()); ++mask) {
      std::map<std::string, uint32_t> freed;
      double lost = 0;
      for (size_t i = 0; i < useful.size(); ++i) {
        if (!(mask & (1u << i))) continue;
        lost += useful[i]->lost_gpu_seconds;
        for (const auto& [node, g] : useful[i]->gpus_by_node) freed[node] += g;
      }
      const int count = __builtin_popcount(mask);
      if ((lost < best || (lost == best && count < best_count)) && Covers(freed, deficit)) {
        best = lost;
        best_count = count;
        best_mask = mask;
      }
    }
    for (size_t i = 0; i < useful.size(); ++i) {
      if (best_mask & (1u << i)) out.push_back(useful[i]->id);
    }
    return out;
  }
  // Many candidates: cheapest per useful GPU first, then drop any victim the
  // others already cover, most expensive first.
  std::sort(useful.begin(), useful.end(), [&](const auto* a, const auto* b) {
    return a->lost_gpu_seconds / Useful(*a, deficit) < b->lost_gpu_seconds / Useful(*b, deficit);
  });
  std::vector<const VictimCandidate*> chosen;
  std::map<std::string, uint32_t> freed;
  for (const auto* c : useful) {
    if (Covers(freed, deficit)) break;
    chosen.push_back(c);
    for (const auto& [node, g] : c->gpus_by_node) freed[node] += g;
  }
  std::sort(chosen.begin(), chosen.end(), [](const auto* a, const auto* b) {
    return a->lost_gpu_seconds > b->lost_gpu_seconds;
  });
  for (auto it = chosen.begin(); it != chosen.end();) {
    auto without = freed;
    for (const auto& [node, g] : (*it)->gpus_by_node) without[node] -= g;
    if (Covers(without, deficit)) {
      freed = std::move(without);
      it = chosen.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto* c : chosen) out.push_back(c->id);
  return out;
}

}  // namespace fedgate::federation
