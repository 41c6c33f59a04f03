// Asking several sites at once and collecting every answer. Each call of
// ParticipantCalls answers by its own deadline, so Wait returns by the
// latest one. Used by the reservation round (prepare, commit), the renewal
// pass, stopping a run and gathering usage.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"

namespace fedgate::gateway {

class FanOut {
 public:
  // The `done` of one call: stores its answer in `*slot` and counts it in.
  template <typename T>
  std::function<void(absl::StatusOr<T>)> Collect(absl::StatusOr<T>* slot) {
    Add();
    return [this, slot](absl::StatusOr<T> r) {
      *slot = std::move(r);
      Done();
    };
  }
  // The same for an answer the caller takes as it comes (under no lock of
  // the fan-out's: `take` must be thread-safe).
  template <typename T>
  std::function<void(absl::StatusOr<T>)> Collect(std::function<void(absl::StatusOr<T>)> take) {
    Add();
    return [this, take = std::move(take)](absl::StatusOr<T> r) {
      take(std::move(r));
      Done();
    };
  }
  // Blocks until every collected call has answered.
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  void Add() {
    std::lock_guard lock(mu_);
    ++pending_;
  }
  void Done() {
    std::lock_guard lock(mu_);
    if (--pending_ == 0) cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
};

// The order to call `sites` in: a call to this site (`self`) runs inline
// on the caller's thread, so the remote ones go out first and both halves
// overlap. Indices into `sites`.
inline std::vector<int> RemoteFirst(const std::vector<std::string>& sites,
                                    const std::string& self) {
  std::vector<int> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < static_cast<int>(sites.size()); ++i) {
      if ((sites[i] == self) == (pass == 1)) order.push_back(i);
    }
  }
  return order;
}

}  // namespace fedgate::gateway
