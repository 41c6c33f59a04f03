// The process executor without a shim (ranks are this test's children):
// exit codes, signals to the whole process group, the log, the rank's
// allowlisted environment, and pids told apart by their start time.
#include "gateway/exec/process_executor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

// Polls until the rank ended (a bounded wait, not a timing check).
std::optional<int> WaitExit(ProcessExecutor& exec, pid_t pid) {
  for (int i = 0; i < 3000; ++i) {
    if (auto code = exec.Poll(pid)) return code;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::nullopt;
}

RankProcessSpec Sh(const std::string& script, const std::string& log) {
  return {{"/bin/sh", "-c", script}, RankEnv({{"GREETING", "hi"}}, "/tmp", "tester"), log, "",
          "", "", ""};
}

TEST(ProcessExecutor, ARankExitsWithItsCodeAndWritesItsLog) {
  testing::TempDir tmp;
  ProcessExecutor exec;
  const std::string log = tmp / "attempt-1/rank-0.log";
  auto pid = exec.Launch(Sh("echo $GREETING from $USER; echo oops >&2; exit 3", log));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(WaitExit(exec, *pid), 3);
  EXPECT_EQ(testing::ReadText(log), "hi from tester\noops\n") << "stdout and stderr, in order";
}

TEST(ProcessExecutor, SignalsReachTheWholeProcessGroup) {
  testing::TempDir tmp;
  ProcessExecutor exec;
  // The rank starts a child of its own; SIGTERM to the group ends both.
  auto pid = exec.Launch(Sh("sleep 30 & echo $! > child; wait", tmp / "rank.log"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_FALSE(exec.Poll(*pid)) << "still running";
  exec.Signal(*pid, SIGTERM);
  EXPECT_EQ(WaitExit(exec, *pid), 128 + SIGTERM);
}

TEST(ProcessExecutor, AMissingProgramIsAnErrorNamingIt) {
  testing::TempDir tmp;
  ProcessExecutor exec;
  auto pid = exec.Launch({{"/nonexistent/train"}, {}, tmp / "r.log", "", "", "", ""});
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("/nonexistent/train"), std::string::npos) << pid.status();
}

TEST(ProcessExecutor, TheRankEnvironmentIsAnAllowlist) {
  ::setenv("FEDGATE_TEST_SECRET", "s3cret", 1);
  const auto env = RankEnv({{"MASTER_PORT", "29500"}, {"PATH", "/opt/bin"}}, "/work/j-1", "rank");
  ::unsetenv("FEDGATE_TEST_SECRET");
  auto has = [&](const std::string& kv) { return std::count(env.begin(), env.end(), kv) == 1; };
  EXPECT_TRUE(has("MASTER_PORT=29500"));
  EXPECT_TRUE(has("PATH=/opt/bin")) << "the job's own wins";
  EXPECT_TRUE(has("HOME=/work/j-1"));
  EXPECT_TRUE(has("USER=rank"));
  for (const auto& kv : env) EXPECT_EQ(kv.rfind("FEDGATE_TEST_SECRET", 0), std::string::npos);
}

TEST(ProcessExecutor, StartTimesTellAProcessFromAnother) {
  const auto mine = ProcStartTime(::getpid());
  ASSERT_TRUE(mine.has_value());
  EXPECT_GT(*mine, 0u);
  EXPECT_EQ(ProcStartTime(::getpid()), mine) << "stable";
  EXPECT_FALSE(ProcStartTime(0x7ffffff0)) << "no such pid";
}

}  // namespace
}  // namespace fedgate::gateway
