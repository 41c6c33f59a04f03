// Wakes the job API's open streams without a thread per stream: a Watch when
// its job's state is written, a following Logs stream on a shared tick (a
// log grows without any state write). One dispatcher thread for all of them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace fedgate::gateway {

class JobEvents {
 public:
  explicit JobEvents(int64_t tick_ms);
  ~JobEvents();
  JobEvents(const JobEvents&) = delete;
  JobEvents& operator=(const JobEvents&) = delete;

  void Start();
  // Wakes nothing after it returns.
  void Stop();

  // `wake` runs on the dispatcher thread, one at a time, and must not block:
  // after every write of `job_id`, and every tick when `on_tick`.
  uint64_t Subscribe(const std::string& job_id, bool on_tick, std::function<void()> wake);
  // Returns once no `wake` of the token runs (or is about to), so the owner
  // may be deleted.
  void Unsubscribe(uint64_t token);
  // A write of the job landed.
  void Notify(const std::string& job_id);

  size_t subscribers();

 private:
  struct Sub {
    std::string job;
    bool on_tick = false;
    std::function<void()> wake;
  };
  void Loop();

  const int64_t tick_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_;
  std::map<uint64_t, Sub> subs_ ABSL_GUARDED_BY(mu_);
  std::multimap<std::string, uint64_t> by_job_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> written_ ABSL_GUARDED_BY(mu_);  // jobs written since the last dispatch
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t running_ ABSL_GUARDED_BY(mu_) = 0;  // the token whose wake runs now
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fedgate::gateway
