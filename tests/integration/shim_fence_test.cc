// fedgate-shim's own fence (gateway/exec/shim.h), with the real shim binary:
// a rank whose gateway stopped renewing its fence file is stopped by its
// shim (SIGTERM, then SIGKILL after the grace), and one whose fence keeps
// moving runs on. This is what keeps a gateway that is dead or stopped from
// leaving ranks running after its coordinator replaced them.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gateway/exec/process_executor.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void WriteFence(const std::string& path, int64_t deadline_ms, int64_t grace_ms) {
  std::ofstream(path + ".tmp") << deadline_ms << " " << grace_ms << "\n";
  std::filesystem::rename(path + ".tmp", path);
}

class ShimFence : public ::testing::Test {
 protected:
  void SetUp() override { exec_.Configure(FEDGATE_SHIM_BIN, RankUser{}); }
  absl::StatusOr<pid_t> Launch(const std::string& script) {
    return exec_.Launch({{"/bin/sh", "-c", script}, {"PATH=/usr/bin:/bin"}, tmp_ / "rank.log",
                         tmp_ / "rank.exit", "", "", fence_});
  }
  // Polls until the rank ended (a bounded wait, not a timing check).
  std::optional<int> WaitExit(pid_t pid, int max_ms) {
    for (int i = 0; i < max_ms / 20; ++i) {
      if (auto code = exec_.Poll(pid, tmp_ / "rank.exit")) return code;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }
  testing::TempDir tmp_;
  std::string fence_ = tmp_ / "fence";
  ProcessExecutor exec_;
};

TEST_F(ShimFence, ARankIsStoppedByItsShimOnceTheFencePasses) {
  WriteFence(fence_, NowUnixMs() + 800, 3000);
  auto pid = Launch("trap 'echo stopped; exit 7' TERM; sleep 60 & wait");
  ASSERT_TRUE(pid.ok()) << pid.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(exec_.Poll(*pid, tmp_ / "rank.exit")) << "runs until its fence";
  EXPECT_EQ(WaitExit(*pid, 10000), 7) << "SIGTERM reached the rank, which ended in its grace";
  const std::string log = testing::ReadText(tmp_ / "rank.log");
  EXPECT_NE(log.find("fedgate-shim: the gateway has not renewed this slice"), std::string::npos)
      << log;
  EXPECT_NE(log.find("stopped"), std::string::npos) << log;
}

TEST_F(ShimFence, ARankThatIgnoresTheStopIsKilledAfterTheGrace) {
  WriteFence(fence_, NowUnixMs() + 300, 700);
  auto pid = Launch("trap '' TERM; while :; do sleep 0.1; done");
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(WaitExit(*pid, 10000), 128 + SIGKILL);
  EXPECT_EQ(testing::ReadText(tmp_ / "rank.exit"), "137\n") << "the code is on disk for a gateway restarted later";
}

TEST_F(ShimFence, AFenceThatKeepsMovingKeepsTheRankRunning) {
  WriteFence(fence_, NowUnixMs() + 600, 1000);
  std::atomic<bool> renewing = true;
  std::thread renewer([&] {
    while (renewing) {
      WriteFence(fence_, NowUnixMs() + 600, 1000);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto pid = Launch("trap 'exit 9' TERM; sleep 60 & wait");
  ASSERT_TRUE(pid.ok()) << pid.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  const bool running = !exec_.Poll(*pid, tmp_ / "rank.exit").has_value();
  renewing = false;
  renewer.join();
  EXPECT_TRUE(running) << "renewed every 100 ms, 600 ms ahead: never past its fence";
  EXPECT_EQ(WaitExit(*pid, 10000), 9) << "stopped once the renewals ended";
}

TEST_F(ShimFence, WithoutAFenceFileTheRankRunsUntilItEnds) {
  auto pid = Launch("sleep 1.5; exit 4");
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(WaitExit(*pid, 10000), 4);
}

}  // namespace
}  // namespace fedgate::gateway
