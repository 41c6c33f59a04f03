#include "gateway/exec/cgroup_reaper.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "gateway/exec/cgroup.h"

namespace fedgate::gateway {

void CgroupReaper::Remove(const std::string& path) {
  if (path.empty() || RemoveCgroup(path)) return;
  Add(path);
}

void CgroupReaper::Add(std::string path) {
  if (path.empty()) return;
  std::lock_guard lock(mu_);
  pending_.emplace_back(std::move(path), 0);
}

void CgroupReaper::Sweep(int max_tries) {
  std::lock_guard lock(mu_);
  std::erase_if(pending_, [max_tries](auto& entry) {
    auto& [path, tries] = entry;
    if (RemoveCgroup(path)) return true;
    if (++tries < max_tries) return false;
    spdlog::warn("cannot remove cgroup {}: its processes did not exit within a minute of "
                 "cgroup.kill ({})", path, std::strerror(errno));
    return true;
  });
}

size_t CgroupReaper::size() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

}  // namespace fedgate::gateway
