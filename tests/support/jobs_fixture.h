// A federation of real gateways and a tenant user, alice of tenant
// "vision", who drives it with fedctl: the base of the job tests.
#pragma once

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fedgate/v1/jobs.pb.h"
#include "tests/support/harness.h"

namespace fedgate::testing {

class JobsTest : public ::testing::Test {
 protected:
  void AddSite(const std::string& site, std::vector<std::string> peers, int gpus,
               const std::string& model = "A100-80GB", const std::string& extra_yaml = "") {
    SiteOptions o;
    o.extra_yaml = extra_yaml;
    o.site = site;
    o.peers = std::move(peers);
    o.node_lines = {"{name: " + site + "-n1, address: 127.0.0.1, gpu_model: " + model +
                    ", gpus: " + std::to_string(gpus) + "}"};
    fed_.AddSite(o);
  }
  void SetUp() override { WriteTlsDir(tmp_ / "alice", ca_.User("vision", "alice")); }

  CommandResult Alice(const std::string& site, std::vector<std::string> args) {
    std::vector<std::string> argv = {FedctlBin(), "-o", "json", "--gateway", fed_.endpoint(site),
                                     "--tls-dir", tmp_ / "alice"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  std::string Submit(const std::string& site, const std::string& spec) {
    const std::string file = tmp_ / ("job-" + std::to_string(++n_) + ".yaml");
    WriteText(file, spec);
    auto r = Alice(site, {"jobs", "submit", "-f", file});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    v1::SubmitJobResponse resp;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &resp).ok()) << r.out;
    return resp.job().id();
  }
  // The job as `site`'s gateway has it (its own view, not its coordinator's).
  v1::Job Get(const std::string& site, const std::string& id) {
    auto r = Alice(site, {"--no-follow", "jobs", "get", id});
    v1::GetJobResponse resp;
    google::protobuf::util::JsonParseOptions lax;
    lax.ignore_unknown_fields = true;
    (void)google::protobuf::util::JsonStringToMessage(r.out, &resp, lax);
    return resp.job();
  }
  bool WaitState(const std::string& site, const std::string& id, v1::Job::State state,
                 int timeout_ms) {
    return Eventually([&] { return Get(site, id).state() == state; }, timeout_ms, 100);
  }
  // The job runs again as `attempt` (a retry after its slice was stopped).
  bool WaitRunningAgain(const std::string& site, const std::string& id, uint32_t attempt) {
    return Eventually(
        [&] {
          const v1::Job j = Get(site, id);
          return j.attempt() == attempt && j.state() == v1::Job::RUNNING;
        },
        30000, 100);
  }
  uint32_t Free(const std::string& viewer, const std::string& site) {
    auto cap = fed_.Capacity(viewer);
    if (!cap) return 0;
    for (const auto& s : cap->sites()) {
      if (s.site() == site) return s.free_gpus();
    }
    return 0;
  }

  TestCa ca_;
  TestFederation fed_{&ca_};
  TempDir tmp_;
  int n_ = 0;
};

}  // namespace fedgate::testing
