// Slice cgroups: which leftovers belong to this site, and (on a writable
// cgroup2 mount: root, as in CI) that a removal kills what is inside and the
// reaper removes what could not go at once.
#include "gateway/exec/cgroup.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gateway/exec/cgroup_reaper.h"
#include "gateway/exec/process_executor.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

namespace fs = std::filesystem;

TEST(Cgroups, LeftoversAreTheSlicesOfThisSitesJobsOnly) {
  testing::TempDir tmp;
  const std::string root = tmp / "fedgate-site-a", jobs = tmp / "jobs";
  for (const char* d : {"j-00000000000000a1-17", "j-00000000000000a1-18", "j-00000000000000b2-5",
                        "not-a-slice"}) {
    fs::create_directories(root + "/" + d);
  }
  fs::create_directories(jobs + "/j-00000000000000a1");  // b2 is another gateway's job
  auto found = SliceCgroupsOfJobs(root, jobs);
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, (std::vector<std::string>{root + "/j-00000000000000a1-17",
                                             root + "/j-00000000000000a1-18"}));
  EXPECT_TRUE(SliceCgroupsOfJobs(tmp / "missing", jobs).empty());
}

TEST(Cgroups, WithoutCgroupsNothingIsMadeAndRemovingNothingSucceeds) {
  EXPECT_EQ(CreateSliceCgroup(CgroupSupport{}, "j-1-1", 0, 0), "");
  EXPECT_TRUE(RemoveCgroup(""));
  EXPECT_FALSE(KillCgroup(""));
  EXPECT_NE(CgroupSupport{}.Describe().find("no cgroups"), std::string::npos);
}

TEST(Cgroups, RemovingASliceKillsWhatRunsInIt) {
  const CgroupSupport cg = DetectCgroups("fedgate-unit-" + std::to_string(::getpid()));
  // Not a skip: cgroups are the host's, not hardware. Like the netns tests,
  // this needs root (CI runs as root).
  ASSERT_FALSE(cg.root.empty() || !cg.kill)
      << "needs a writable cgroup2 mount with cgroup.kill (run as root): " << cg.Describe();
  const std::string slice = CreateSliceCgroup(cg, "j-00000000000000c3-1", 0, 0);
  ASSERT_FALSE(slice.empty());
  testing::TempDir tmp;
  ProcessExecutor exec;
  auto pid = exec.Launch({{"sleep", "30"}, {"PATH=/usr/bin:/bin"}, tmp / "r.log", "", "", "", ""});
  ASSERT_TRUE(pid.ok()) << pid.status();
  std::ofstream(slice + "/cgroup.procs") << *pid;
  CgroupReaper reaper;
  reaper.Remove(slice);  // kills; the cgroup goes once the killed process is reaped
  std::optional<int> code;
  for (int i = 0; i < 2000 && (!code || reaper.size() > 0); ++i) {
    if (!code) code = exec.Poll(*pid);
    reaper.Sweep();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(code, 128 + SIGKILL);
  EXPECT_EQ(reaper.size(), 0u);
  EXPECT_FALSE(fs::exists(slice));
  ::rmdir(cg.root.c_str());
}

}  // namespace
}  // namespace fedgate::gateway
