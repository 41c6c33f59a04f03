// The job queue's order, behind a policy interface. The seed policy: shortest
// job first on estimated_duration / gpus, with aging so long jobs never
// starve, and guaranteed before spot. Pure: the caller passes the time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fedgate::federation {

struct QueuedJob {
  std::string id;
  uint32_t gpus = 1;
  int64_t estimated_duration_ms = 3600 * 1000;
  bool spot = false;
  int64_t submitted_at_ms = 0;
};

class QueuePolicy {
 public:
  virtual ~QueuePolicy() = default;
  // Job ids in the order placement should try them.
  virtual std::vector<std::string> Order(const std::vector<QueuedJob>& jobs,
                                         int64_t now_ms) const = 0;
};

// Priority = (estimated_duration / gpus) minus waited time * aging_factor;
// lower runs first. With aging_factor 1, a job that waited as long as its
// own duration-per-GPU has caught up with a zero-length job.
class ShortestJobFirst final : public QueuePolicy {
 public:
  explicit ShortestJobFirst(double aging_factor = 1.0) : aging_(aging_factor) {}
  std::vector<std::string> Order(const std::vector<QueuedJob>& jobs,
                                 int64_t now_ms) const override;
  // The score behind the order (lower first), for explanations.
  double Score(const QueuedJob& job, int64_t now_ms) const;

 private:
  double aging_;
};

}  // namespace fedgate::federation
