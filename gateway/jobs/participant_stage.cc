// Staging at a participant: the coordinator asks while it holds this site's
// GPUs; each ask keeps the prepared hold alive and reports the copies.
#include <algorithm>

#include "base/str_cat.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

absl::StatusOr<v1::StageResponse> Participant::Stage(const std::string& from,
                                                     const v1::StageRequest& req) {
  if (stager_ == nullptr) return absl::UnimplementedError("this site stages no datasets");
  const auto& key = req.key();
  {
    std::lock_guard lock(mu_);
    if (auto st = ledger_.CheckOwner(key.job_id(), from); !st.ok()) return st;
    if (auto st = CheckTermLocked(key, from); !st.ok()) return st;
    if (auto st = ledger_.Extend(key.job_id(), key.attempt(), key.epoch(), clock_->NowMs(),
                                 std::clamp<int64_t>(req.hold_ttl_ms(), 1000, 300000));
        !st.ok()) {
      return st;
    }
  }
  // Copies run on the stager's threads: this only starts or reads them.
  return stager_->Ensure({req.items().begin(), req.items().end()});
}

std::set<std::string> Participant::DatasetsInUse() {
  std::lock_guard lock(mu_);
  std::set<std::string> out;
  for (const auto& [key, s] : slices_) out.insert(s.datasets.begin(), s.datasets.end());
  return out;
}

}  // namespace fedgate::gateway
