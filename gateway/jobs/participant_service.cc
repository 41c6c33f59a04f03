// Where a service's replica listens, for the gateway that relays its
// coordinator's requests to it (docs/services.md).
#include "base/str_cat.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

absl::StatusOr<Participant::ServedReplica> Participant::ServiceReplica(const std::string& from,
                                                                       const std::string& tenant,
                                                                       const std::string& job_id) {
  std::lock_guard lock(mu_);
  std::optional<ServedReplica> found;
  for (auto it = slices_.lower_bound({job_id, 0}); it != slices_.end() && it->first.first == job_id; ++it) {
    const Slice& s = it->second;
    if (s.released || s.stopping || s.parked || s.state != SliceState::RUNNING) continue;
    const federation::Hold* h = ledger_.Find(job_id, it->first.second);
    if (h == nullptr || h->master_port == 0 || h->gpus.empty()) continue;
    if (h->coordinator != from || h->tenant != tenant) {
      return absl::PermissionDeniedError(StrCat("replica ", job_id, " here is not one of ", from,
                                                "'s services of tenant ", tenant));
    }
    for (const auto& n : nodes_) {
      if (n.name == h->gpus[0].node) found = ServedReplica{n.address, h->master_port};  // newest epoch last
    }
  }
  if (!found) return absl::NotFoundError(StrCat("no replica ", job_id, " runs on this site"));
  return *found;
}

}  // namespace fedgate::gateway
