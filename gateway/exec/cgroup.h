// Per-slice cgroups (v2), where this host lets the gateway use them: each
// slice's ranks go into their own cgroup, so a stop kills every process of
// the slice (cgroup.kill), also ones that left the rank's process group,
// and memory and pids limits apply where those controllers exist. What is
// there is detected, used and reported; nothing is assumed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fedgate::gateway {

struct CgroupSupport {
  std::string root;  // our folder in a writable cgroup2 mount; "" = no cgroups
  bool kill = false;    // cgroup.kill
  bool memory = false;  // memory.max
  bool pids = false;    // pids.max
  // One line for the start-up log ("cgroup v2 at ...: cgroup.kill; no memory ...").
  std::string Describe() const;
};

// Every cgroup2 mount point in /proc/self/mounts, in order.
std::vector<std::string> Cgroup2Mounts();

// Looks for a cgroup2 mount (in /proc/self/mounts) where `name` can be
// created and enables the memory and pids controllers for it where the
// kernel offers them.
CgroupSupport DetectCgroups(const std::string& name);

// The slice's cgroup with the limits that can apply (0 = none); "" when
// cgroups are not available or it cannot be made.
std::string CreateSliceCgroup(const CgroupSupport& cg, const std::string& slice,
                              int64_t memory_limit_bytes, int64_t pids_limit);
// The slice cgroups (<job>-<epoch>) under `root` whose job has a folder in
// `jobs_dir`: one site's. Another gateway may use the same root (the same
// site name); its jobs are not in this jobs_dir.
std::vector<std::string> SliceCgroupsOfJobs(const std::string& root, const std::string& jobs_dir);
// Kills every process in it (cgroup.kill); false when that is not possible.
bool KillCgroup(const std::string& path);
// Kills what is left in it and removes it; true once it is gone. False
// while killed processes are still exiting (EBUSY): try again later, it
// does not wait.
bool RemoveCgroup(const std::string& path);

}  // namespace fedgate::gateway
