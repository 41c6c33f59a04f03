#include "gateway/serve/replica_pick.h"

#include <random>
#include <tuple>

namespace fedgate::gateway {

std::shared_ptr<Replica> PickReplica(const std::vector<std::shared_ptr<Replica>>& replicas,
                                     const std::set<std::string>& tried, const std::string& site,
                                     const std::map<std::string, double>& gbps,
                                     const std::string& shun_site) {
  auto key = [&](const Replica& r) {
    const auto link = gbps.find(r.site);
    const double speed = r.site == site ? 0 : link == gbps.end() ? 0 : link->second;
    return std::tuple(!shun_site.empty() && r.site == shun_site ? 1 : 0, r.outstanding.load(),
                      r.site == site ? 0 : 1, -speed);
  };
  std::vector<std::shared_ptr<Replica>> best;
  for (const auto& r : replicas) {
    if (!r->ready || tried.contains(r->job_id)) continue;
    if (best.empty() || key(*r) < key(*best[0])) {
      best.assign(1, r);
    } else if (key(*r) == key(*best[0])) {
      best.push_back(r);
    }
  }
  if (best.empty()) return nullptr;
  thread_local std::minstd_rand rng(std::random_device{}());
  return best[std::uniform_int_distribution<size_t>(0, best.size() - 1)(rng)];
}

}  // namespace fedgate::gateway
