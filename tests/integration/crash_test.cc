// kill -9 at each step of the reservation protocol, on the coordinator and on
// the participant; after a restart every hold ends committed-and-running or
// released, the job completes exactly once, and every GPU comes back.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "fedgate/v1/jobs.pb.h"
#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

struct CrashCase {
  const char* point;
  const char* site;  // which gateway dies
};

class CrashTest : public ::testing::TestWithParam<CrashCase> {};

TEST_P(CrashTest, RestartEndsWithTheJobDoneAndEveryGpuFree) {
  const CrashCase c = GetParam();
  TestCa ca;
  TestFederation fed(&ca);
  TempDir tmp;
  WriteTlsDir(tmp / "alice", ca.User("vision", "alice"));
  for (const char* s : {"site-a", "site-b"}) {
    SiteOptions o;
    o.site = s;
    o.peers = {std::string(s) == "site-a" ? "site-b" : "site-a"};
    o.node_lines = {std::string("{name: n1, address: 127.0.0.1, gpu_model: H100, gpus: 4}")};
    fed.AddSite(o);
  }
  for (const char* s : {"site-a", "site-b"}) {
    fed.Start(s, std::string(s) == c.site
                     ? std::vector<std::string>{std::string("FEDGATE_CRASH_AT=") + c.point}
                     : std::vector<std::string>{});
  }
  ASSERT_TRUE(Eventually([&] { return fed.Converged({"site-a", "site-b"}); }, 15000));
  auto fedctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {FedctlBin(), "-o", "json", "--gateway", fed.endpoint("site-a"),
                                     "--tls-dir", tmp / "alice"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  };
  // 6 GPUs: both sites (4 + 2), so both take part in the reservation.
  WriteText(tmp / "job.yaml", "name: c\ngpus: 6\nmax_attempts: 3\ncommand: [sleep, '1']\n");
  auto r = fedctl({"jobs", "submit", "-f", tmp / "job.yaml", "--idempotency-key", "once"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::SubmitJobResponse sub;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &sub).ok());
  const std::string id = sub.job().id();

  auto died = fed.WaitExit(c.site, 30000);
  ASSERT_TRUE(died.has_value()) << c.point << " was never reached";
  EXPECT_EQ(*died, 128 + SIGKILL);
  fed.Start(c.site);  // without the crash point
  ASSERT_TRUE(fed.WaitReady(c.site));

  auto state = [&] {
    auto g = fedctl({"jobs", "get", id});
    v1::GetJobResponse resp;
    google::protobuf::util::JsonParseOptions lax;
    lax.ignore_unknown_fields = true;
    (void)google::protobuf::util::JsonStringToMessage(g.out, &resp, lax);
    return resp.job();
  };
  ASSERT_TRUE(Eventually([&] { return state().state() == v1::Job::SUCCEEDED; }, 60000))
      << c.point << ": " << state().state() << " " << state().reason() << "\n"
      << fed.log("site-a") << fed.log("site-b");
  EXPECT_LE(state().attempt(), 3u);
  // No GPU stays held past the hold TTL and the sweep.
  auto free = [&](const std::string& viewer) {
    auto cap = fed.Capacity(viewer);
    uint32_t n = 0;
    if (cap) {
      for (const auto& s : cap->sites()) n += s.free_gpus();
    }
    return n;
  };
  EXPECT_TRUE(Eventually([&] { return free("site-a") == 8 && free("site-b") == 8; }, 45000))
      << c.point << ": free " << free("site-a") << "/" << free("site-b");
  // The idempotency key still names the one job.
  r = fedctl({"jobs", "submit", "-f", tmp / "job.yaml", "--idempotency-key", "once"});
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &sub).ok());
  EXPECT_EQ(sub.job().id(), id);
}

INSTANTIATE_TEST_SUITE_P(
    EveryStep, CrashTest,
    ::testing::Values(CrashCase{"coordinator-after-reserving", "site-a"},
                      CrashCase{"coordinator-after-prepare", "site-a"},
                      CrashCase{"coordinator-after-decision", "site-a"},
                      CrashCase{"coordinator-after-first-commit", "site-a"},
                      CrashCase{"participant-after-prepare", "site-b"},
                      CrashCase{"participant-after-commit", "site-b"}),
    [](const auto& info) {
      std::string n = info.param.point;
      for (auto& ch : n) ch = ch == '-' ? '_' : ch;
      return n;
    });

}  // namespace
}  // namespace fedgate::testing
