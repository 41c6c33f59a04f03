// Preemption at the site that owns the victims: a guaranteed job that found
// too few free GPUs gets the cheapest preemptible slices stopped for it,
// their GPUs kept (earmarked) until it prepares again.
#include <spdlog/spdlog.h>

#include <fstream>

#include "base/str_cat.h"
#include "federation/clock.h"
#include "federation/preemption.h"
#include "federation/saturating.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

uint32_t Participant::GpusComingLocked(const std::string& job_id, const std::string& node,
                                       size_t* waiting) const {
  // GPUs this job will have once the victims it already chose have exited.
  uint32_t coming = 0;
  for (const auto& [key, s] : slices_) {
    if (s.preempted_by != job_id || s.released) continue;
    auto g = s.gpus_by_node.find(node);
    if (g != s.gpus_by_node.end()) {
      coming += g->second;
      ++*waiting;
    }
  }
  return coming;
}

absl::Status Participant::PreemptLocked(const std::string& job_id,
                                        const std::vector<federation::NodeRequest>& want,
                                        const absl::Status& refused) {
  const int64_t now = clock_->NowMs();
  std::map<std::string, uint32_t> asked, deficit;
  for (const auto& w : want) asked[w.node] += w.gpus;
  size_t waiting = 0;
  for (const auto& [node, n] : asked) {
    const uint32_t have =
        ledger_.FreeGpusFor(node, job_id) + GpusComingLocked(job_id, node, &waiting);
    if (n > have) deficit[node] = n - have;
  }
  const int64_t keep_until = federation::SatAdd(now, config_.preemption.grace_ms + 60'000);
  if (deficit.empty()) {
    for (const auto& [node, n] : asked) ledger_.Earmark(job_id, node, n, keep_until);
    return absl::UnavailableError(StrCat("preempting: waiting for ", waiting,
                                         " preempted slice(s) to stop; their GPUs are kept for job ",
                                         job_id));
  }
  std::vector<federation::VictimCandidate> candidates;
  std::map<std::string, SliceKey> by_id;
  for (const auto& [key, s] : slices_) {
    if (!s.preemptible || s.stopping || s.launching || s.state != SliceState::RUNNING ||
        key.first == job_id || now - s.started_at_ms < config_.preemption.min_runtime_ms) {
      continue;
    }
    uint32_t gpus = 0;
    for (const auto& [node, g] : s.gpus_by_node) gpus += g;
    const std::string id = StrCat(key.first, "@", key.second);
    candidates.push_back({id, s.gpus_by_node, gpus * (now - s.started_at_ms) / 1000.0});
    by_id[id] = key;
  }
  auto victims = federation::ChooseVictims(candidates, deficit);
  if (!victims) {
    return absl::ResourceExhaustedError(
        StrCat(refused.message(), " (", candidates.size(),
               " preemptible slice(s) here do not free enough)"));
  }
  const int64_t deadline_s = (now + config_.preemption.grace_ms) / 1000;
  std::string names;
  for (const auto& id : *victims) {
    Slice& v = slices_.at(by_id.at(id));
    // The deadline first, then SIGTERM: a rank that traps it can read it.
    // (A few bytes into the rank's own folder: the one file write made
    // under the lock, since the signal that follows must come after it.)
    for (const auto& f : v.preempt_files) std::ofstream(f, std::ios::trunc) << deadline_s << "\n";
    v.preempted_by = job_id;
    StopSliceLocked(&v, StrCat("preempted by ", job_id), config_.preemption.grace_ms);
    names += StrCat(names.empty() ? "" : ", ", v.key.job_id());
  }
  for (const auto& [node, n] : asked) ledger_.Earmark(job_id, node, n, keep_until);
  spdlog::info("job {}: preempting {} slice(s) here ({}); SIGKILL after {} ms", job_id,
               victims->size(), names, config_.preemption.grace_ms);
  return absl::UnavailableError(StrCat("preempting ", victims->size(), " slice(s) (", names,
                                       "); their GPUs are kept for job ", job_id));
}

}  // namespace fedgate::gateway
