#include "gateway/ops/gpu_probe.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "gateway/exec/run_command.h"
#include "gateway/ops/metrics.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using fedgate::testing::ReadText;
using fedgate::testing::TempDir;
using fedgate::testing::WriteText;

TEST(RunCommand, CapturesOutputAndExitCode) {
  auto r = RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, 5000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  auto capped = RunCommand({"/bin/sh", "-c", "head -c 100000 /dev/zero"}, 5000, 1000);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->out.size(), 1000u) << "output is capped, the command still finishes";
  EXPECT_EQ(RunCommand({"/nonexistent/tool"}, 1000).status().code(), absl::StatusCode::kNotFound);
}

TEST(RunCommand, AHungCommandIsKilledWithItsWholeProcessGroup) {
  TempDir tmp;
  const auto start = std::chrono::steady_clock::now();
  auto r = RunCommand({"/bin/sh", "-c", "sleep 60 & echo $! > " + (tmp / "child") + "; sleep 60"},
                      300);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const pid_t child = std::stoi(ReadText(tmp / "child"));
  // The background sleep was in the command's process group: killed too
  // (it may linger as a zombie of init for a moment).
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    const std::string stat = ReadText("/proc/" + std::to_string(child) + "/stat");
    gone = stat.empty() || stat.find(") Z") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "pid " << child << " survived";
}

TEST(NvidiaSmi, ParsesSamplesAndTreatsUnreadableFieldsAsFailure) {
  auto r = ParseNvidiaSmi(
      "0, GPU-aaa, 1024, 81920, 37\n"
      "1, GPU-bbb, [GPU is lost], [GPU is lost], [GPU is lost]\n"
      "2, GPU-ccc, 10, 81920, [N/A]\n");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_TRUE((*r)[0].ok);
  EXPECT_DOUBLE_EQ((*r)[0].memory_used_bytes, 1024.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ((*r)[0].utilization_percent, 37);
  EXPECT_EQ((*r)[0].uuid, "GPU-aaa");
  EXPECT_FALSE((*r)[1].ok);
  EXPECT_NE((*r)[1].reason.find("GPU is lost"), std::string::npos);
  EXPECT_TRUE((*r)[2].ok) << "[N/A] is an unsupported field, not a sick GPU";
  EXPECT_LT((*r)[2].utilization_percent, 0);
  EXPECT_FALSE(ParseNvidiaSmi("0, GPU-aaa, 1\n").ok());
}

class ProbeTest : public ::testing::Test {
 protected:
  GpuHealthProbe::Options Options(const std::string& script, int64_t interval_ms = 2000) {
    WriteText(tmp_ / "probe.sh", script);
    GpuHealthProbe::Options o;
    o.command = "sh " + (tmp_ / "probe.sh");
    o.interval_ms = interval_ms;
    o.nodes = {{"n1", 4}, {"n2", 2}};
    o.try_nvml = o.try_nvidia_smi = false;
    return o;
  }
  GpuHealthProbe::Apply Record() {
    return [this](const std::map<std::string, std::set<uint32_t>>& failed,
                  const std::vector<federation::GpuHealth::Change>&) {
      ++applied_;
      failed_ = failed;
    };
  }
  TempDir tmp_;
  Metrics metrics_;
  int applied_ = 0;
  std::map<std::string, std::set<uint32_t>> failed_;
};

TEST_F(ProbeTest, ACommandWithdrawsFailingGpusAndReturnsThemWhenTheyPass) {
  GpuHealthProbe probe(Options("echo 'n1 2 fail Xid 48'\necho 'n2 0 ok'\n"), &metrics_, Record());
  EXPECT_EQ(probe.kind(), "command");
  EXPECT_EQ(metrics_.Get("fedgate_gpu_healthy", {{"node", "n1"}, {"gpu", "2"}}), 1)
      << "healthy until a probe says otherwise";
  ASSERT_TRUE(probe.RunOnce().ok());
  EXPECT_EQ(applied_, 1);
  EXPECT_EQ(failed_, (std::map<std::string, std::set<uint32_t>>{{"n1", {2}}}));
  EXPECT_EQ(metrics_.Get("fedgate_gpu_healthy", {{"node", "n1"}, {"gpu", "2"}}), 0);
  EXPECT_EQ(metrics_.Get("fedgate_gpu_healthy", {{"node", "n2"}, {"gpu", "1"}}), 1);
  ASSERT_TRUE(probe.RunOnce().ok());
  EXPECT_EQ(applied_, 1) << "no change, no callback";

  WriteText(tmp_ / "probe.sh", "echo 'n2 1 ok'\n");
  ASSERT_TRUE(probe.RunOnce().ok());
  EXPECT_EQ(applied_, 1) << "an unlisted GPU keeps its state";
  WriteText(tmp_ / "probe.sh", "echo 'n1 2 ok'\n");
  ASSERT_TRUE(probe.RunOnce().ok());
  EXPECT_EQ(applied_, 2);
  EXPECT_TRUE(failed_.empty());
  EXPECT_EQ(metrics_.Get("fedgate_gpu_health_probe_runs_total", {{"result", "ok"}}), 4);
}

TEST_F(ProbeTest, HungFailingOrGarbledProbesChangeNothing) {
  GpuHealthProbe probe(Options("echo 'n1 0 fail'\n", 300), &metrics_, Record());
  ASSERT_TRUE(probe.RunOnce().ok());
  ASSERT_EQ(applied_, 1);
  const struct {
    const char* script;
    absl::StatusCode code;
  } bad[] = {
      {"echo 'n1 0 ok'\nsleep 30\n", absl::StatusCode::kDeadlineExceeded},
      {"echo 'n1 0 ok'\nexit 2\n", absl::StatusCode::kUnavailable},
      {"echo 'n1 0 ok'\necho 'n9 0 ok'\n", absl::StatusCode::kInvalidArgument},
  };
  for (const auto& b : bad) {
    WriteText(tmp_ / "probe.sh", b.script);
    EXPECT_EQ(probe.RunOnce().status().code(), b.code) << b.script;
    EXPECT_EQ(applied_, 1) << b.script;
  }
  EXPECT_EQ(metrics_.Get("fedgate_gpu_healthy", {{"node", "n1"}, {"gpu", "0"}}), 0)
      << "still withdrawn: none of those rounds said it passes";
  EXPECT_EQ(metrics_.Get("fedgate_gpu_health_probe_runs_total", {{"result", "timeout"}}), 1);
  EXPECT_EQ(metrics_.Get("fedgate_gpu_health_probe_runs_total", {{"result", "error"}}), 2);
}

TEST_F(ProbeTest, WithoutAnyProbeGpusAreHealthyAndNothingRuns) {
  GpuHealthProbe::Options o;
  o.nodes = {{"n1", 2}};
  o.try_nvml = o.try_nvidia_smi = false;
  o.local_node = "n1";
  GpuHealthProbe probe(o, &metrics_, Record());
  EXPECT_EQ(probe.kind(), "none");
  probe.Start();
  probe.Stop();
  EXPECT_EQ(applied_, 0);
  EXPECT_EQ(metrics_.Get("fedgate_gpu_healthy", {{"node", "n1"}, {"gpu", "1"}}), 1);
}

}  // namespace
}  // namespace fedgate::gateway
