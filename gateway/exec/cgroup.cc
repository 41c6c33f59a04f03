#include "gateway/exec/cgroup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/str_cat.h"

namespace fedgate::gateway {
namespace {

bool Write(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  f << value;
  f.flush();
  return static_cast<bool>(f);
}

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool Has(const std::string& words, const std::string& word) {
  std::istringstream in(words);
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

}  // namespace

std::string CgroupSupport::Describe() const {
  if (root.empty()) return "no cgroups (no writable cgroup2 mount)";
  return StrCat("cgroup v2 at ", root, ": ", kill ? "cgroup.kill" : "no cgroup.kill", "; ",
                memory ? "memory.max" : "no memory controller", "; ",
                pids ? "pids.max" : "no pids controller");
}

std::vector<std::string> Cgroup2Mounts() {
  std::vector<std::string> out;
  std::ifstream mounts("/proc/self/mounts");
  std::string dev, mnt, type, rest;
  while (mounts >> dev >> mnt >> type && std::getline(mounts, rest)) {
    if (type == "cgroup2") out.push_back(mnt);
  }
  return out;
}

CgroupSupport DetectCgroups(const std::string& name) {
  CgroupSupport out;
  for (const std::string& mnt : Cgroup2Mounts()) {
    const std::string root = mnt + "/" + name;
    if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) continue;
    if (::access((root + "/cgroup.procs").c_str(), W_OK) != 0) continue;
    out.root = root;
    out.kill = ::access((root + "/cgroup.kill").c_str(), F_OK) == 0;
    // Controllers must be enabled on every level down to the slices.
    const std::string offered = Read(mnt + "/cgroup.controllers");
    for (const char* c : {"memory", "pids"}) {
      if (!Has(offered, c)) continue;
      (void)Write(mnt + "/cgroup.subtree_control", StrCat("+", c));
      (void)Write(root + "/cgroup.subtree_control", StrCat("+", c));
    }
    const std::string enabled = Read(root + "/cgroup.subtree_control");
    out.memory = Has(enabled, "memory");
    out.pids = Has(enabled, "pids");
    break;
  }
  return out;
}

std::string CreateSliceCgroup(const CgroupSupport& cg, const std::string& slice,
                              int64_t memory_limit_bytes, int64_t pids_limit) {
  if (cg.root.empty()) return "";
  const std::string path = cg.root + "/" + slice;
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return "";
  if (cg.memory && memory_limit_bytes > 0) (void)Write(path + "/memory.max", std::to_string(memory_limit_bytes));
  if (cg.pids && pids_limit > 0) (void)Write(path + "/pids.max", std::to_string(pids_limit));
  return path;
}

std::vector<std::string> SliceCgroupsOfJobs(const std::string& root, const std::string& jobs_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    const size_t dash = name.rfind('-');
    if (!e.is_directory(ec) || dash == std::string::npos) continue;
    if (std::filesystem::is_directory(StrCat(jobs_dir, "/", name.substr(0, dash)), ec)) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

bool KillCgroup(const std::string& path) {
  if (path.empty() || ::access((path + "/cgroup.kill").c_str(), W_OK) != 0) return false;
  return Write(path + "/cgroup.kill", "1");
}

bool RemoveCgroup(const std::string& path) {
  if (path.empty()) return true;
  if (!Read(path + "/cgroup.procs").empty()) KillCgroup(path);
  return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
}

}  // namespace fedgate::gateway
