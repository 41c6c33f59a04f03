// Slice cgroups whose killed processes were still exiting when their slice
// ended: each later sweep tries again, for up to a minute, instead of
// waiting (or sleeping) for the kernel where the caller holds a lock.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace fedgate::gateway {

class CgroupReaper {
 public:
  // Removes `path` now if it can, else keeps it for a later Sweep.
  void Remove(const std::string& path);
  // Keeps `path` for the next Sweep without trying now.
  void Add(std::string path);
  // One try at every kept cgroup; one still there after `max_tries` sweeps
  // holds a process the kernel cannot kill, which is logged and dropped.
  void Sweep(int max_tries = 600);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, int>> pending_ ABSL_GUARDED_BY(mu_);  // path, tries
};

}  // namespace fedgate::gateway
