#include "federation/queue_policy.h"

#include <algorithm>

namespace fedgate::federation {

double ShortestJobFirst::Score(const QueuedJob& job, int64_t now_ms) const {
  const double per_gpu = static_cast<double>(job.estimated_duration_ms) /
                         static_cast<double>(std::max<uint32_t>(1, job.gpus));
  const double waited = static_cast<double>(std::max<int64_t>(0, now_ms - job.submitted_at_ms));
  return per_gpu - aging_ * waited;
}

std::vector<std::string> ShortestJobFirst::Order(const std::vector<QueuedJob>& jobs,
                                                 int64_t now_ms) const {
  std::vector<const QueuedJob*> sorted;
  for (const auto& j : jobs) sorted.push_back(&j);
  std::stable_sort(sorted.begin(), sorted.end(), [&](const QueuedJob* a, const QueuedJob* b) {
    if (a->spot != b->spot) return !a->spot;  // guaranteed first
    const double sa = Score(*a, now_ms), sb = Score(*b, now_ms);
    if (sa != sb) return sa < sb;
    if (a->submitted_at_ms != b->submitted_at_ms) return a->submitted_at_ms < b->submitted_at_ms;
    return a->id < b->id;
  });
  std::vector<std::string> out;
  for (const auto* j : sorted) out.push_back(j->id);
  return out;
}

}  // namespace fedgate::federation
