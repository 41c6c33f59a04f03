// Jobs that really run: ranks as processes on several sites, one world, the
// rank environment; cancel, rank failures, dead participants and a frozen
// coordinator.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <cstdio>
#include <set>

#include "fedgate/v1/jobs.pb.h"
#include "tests/support/jobs_fixture.h"

namespace fedgate::testing {
namespace {

std::string AllreduceBin() { return FEDGATE_ALLREDUCE_BIN; }

class RunTest : public JobsTest {};

TEST_F(RunTest, StitchedJobFormsOneWorldWithAConsistentEnvironment) {
  AddSite("site-a", {"site-b"}, 8);
  AddSite("site-b", {"site-a", "site-c"}, 4);
  AddSite("site-c", {"site-b"}, 16, "H100");
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c"}); }, 15000));
  const std::string id = Submit(
      "site-a", "name: ar\ngpus: 12\ngpu_models: [A100-80GB]\ncommand: [" + AllreduceBin() + "]\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 60000))
      << Get("site-a", id).reason() << fed_.log("site-a");
  const v1::Job job = Get("site-a", id);
  ASSERT_EQ(job.run().sites_size(), 2);
  EXPECT_EQ(job.run().sites(0).site(), "site-a");
  EXPECT_EQ(job.run().sites(1).site(), "site-b");

  // Every rank's log (rank 8..11 live on site-b and come through site-a).
  std::set<int> ranks;
  std::set<std::string> masters, worlds;
  for (int r = 0; r < 12; ++r) {
    auto log = RunCommand({FedctlBin(), "--gateway", fed_.endpoint("site-a"), "--tls-dir",
                           tmp_ / "alice", "jobs", "logs", id, "--rank", std::to_string(r)});
    ASSERT_EQ(log.exit_code, 0) << log.err;
    // "rank R/N: site S, local rank L, group rank G, GPU X, master M:P"
    int rank = -1, world = -1, local = -1, group = -1, gpu = -1;
    char site[64] = {0}, master[128] = {0};
    ASSERT_EQ(std::sscanf(log.out.c_str(),
                          "rank %d/%d: site %63[^,], local rank %d, group rank %d, GPU %d, "
                          "master %127s",
                          &rank, &world, site, &local, &group, &gpu, master),
              7)
        << log.out;
    ranks.insert(rank);
    worlds.insert(std::to_string(world));
    masters.insert(master);
    EXPECT_EQ(std::string(site), r < 8 ? "site-a" : "site-b") << "rank " << r;
    EXPECT_EQ(local, r < 8 ? r : r - 8) << "LOCAL_RANK";
    EXPECT_EQ(group, r < 8 ? 0 : 1) << "GROUP_RANK";
    EXPECT_NE(log.out.find("allreduce of 65536 doubles OK, every element = 78"), std::string::npos)
        << log.out;
  }
  EXPECT_EQ(ranks.size(), 12u) << "ranks 0..11 once each";
  EXPECT_EQ(*ranks.rbegin(), 11);
  EXPECT_EQ(worlds, std::set<std::string>{"12"});
  EXPECT_EQ(masters.size(), 1u) << "one MASTER_ADDR:MASTER_PORT for all";
  // GPUs come back once the job ended.
  EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-b") == 4 && Free("site-a", "site-a") == 8; },
                         10000));
}

TEST_F(RunTest, CompetingJobsNeverOverbookAndCancelFreesEveryGpu) {
  AddSite("site-a", {"site-b"}, 4);
  AddSite("site-b", {"site-a"}, 4);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    // Longer than the watch below takes even instrumented (fedctl starts in
    // 0.4 s under AddressSanitizer): the running one is cancelled, not done.
    ids.push_back(Submit("site-a", "name: sleeper\ngpus: 6\ncommand: [sleep, '300']\n"));
  }
  // Only one 6-GPU job fits in 8 GPUs; the others wait. Watch for a while:
  // never more than one running, never negative free GPUs.
  std::string running;
  for (int i = 0; i < 30; ++i) {
    int n = 0;
    for (const auto& id : ids) {
      if (Get("site-a", id).state() == v1::Job::RUNNING) {
        ++n;
        running = id;
      }
    }
    ASSERT_LE(n, 1) << "two 6-GPU jobs on 8 GPUs";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(running.empty());
  EXPECT_TRUE(Eventually([&] { return Free("site-b", "site-a") + Free("site-b", "site-b") == 2; },
                         5000));
  // Cancel everything: every GPU comes back on both sites.
  for (const auto& id : ids) {
    auto r = Alice("site-a", {"jobs", "cancel", id});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_TRUE(Eventually(
      [&] {
        return Free("site-a", "site-a") == 4 && Free("site-a", "site-b") == 4 &&
               Free("site-b", "site-a") == 4 && Free("site-b", "site-b") == 4;
      },
      10000))
      << fed_.log("site-b");
  EXPECT_EQ(Get("site-a", running).state(), v1::Job::CANCELLED);
  EXPECT_TRUE(fed_.Capacity("site-a").has_value()) << "both gateways alive: no invariant broke";
  EXPECT_TRUE(fed_.Capacity("site-b").has_value());
}

TEST_F(RunTest, AFailingRankUsesUpTheAttemptsAndFailsWithAReason) {
  AddSite("site-a", {}, 4);
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  const std::string id = Submit("site-a", "name: bad\ngpus: 2\nmax_attempts: 2\ncommand: [false]\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::FAILED, 30000)) << Get("site-a", id).reason();
  const v1::Job job = Get("site-a", id);
  EXPECT_EQ(job.attempt(), 2u);
  EXPECT_NE(job.reason().find("attempt 2 of 2 failed"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find("exit 1"), std::string::npos) << job.reason();
  EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-a") == 4; }, 5000));
}

TEST_F(RunTest, AKilledParticipantMakesTheJobRetryElsewhere) {
  AddSite("site-a", {"site-b", "site-c"}, 4);
  AddSite("site-b", {"site-a"}, 4);
  AddSite("site-c", {"site-a"}, 4);
  fed_.StartAll();
  ASSERT_TRUE(Eventually(
      [&] {
        auto live = fed_.LiveSites("site-a");
        return live.size() == 3;
      },
      15000));
  // 6 GPUs need two sites; ties break by name, so site-a + site-b first.
  const std::string id = Submit("site-a", "name: s\ngpus: 6\ncommand: [sleep, '4']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  const v1::Job first = Get("site-a", id);
  ASSERT_EQ(first.run().sites(1).site(), "site-b");
  fed_.Kill("site-b", SIGKILL);
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 60000)) << Get("site-a", id).reason();
  const v1::Job done = Get("site-a", id);
  EXPECT_EQ(done.attempt(), 2u);
  ASSERT_EQ(done.run().sites_size(), 2);
  EXPECT_EQ(done.run().sites(1).site(), "site-c") << "the retry avoided the dead site";
  ASSERT_EQ(done.run().avoided_sites_size(), 1);
  EXPECT_EQ(done.run().avoided_sites(0), "site-b");
}

TEST_F(RunTest, AFrozenCoordinatorsSlicesStopAtTheLeaseAndFreeTheirGpus) {
  AddSite("site-a", {"site-b"}, 1);
  AddSite("site-b", {"site-a"}, 4);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  const std::string id =
      Submit("site-a", "name: s\ngpus: 4\nallowed_sites: [site-b]\ncommand: [sleep, '60']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  ASSERT_TRUE(Eventually([&] { return Free("site-b", "site-b") == 0; }, 5000));
  fed_.Kill("site-a", SIGSTOP);
  const auto frozen = std::chrono::steady_clock::now();
  // The lease is 3 s here (5 advertise intervals, at least 3 s).
  ASSERT_TRUE(Eventually([&] { return Free("site-b", "site-b") == 4; }, 15000)) << fed_.log("site-b");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen).count();
  std::printf("[ measure ] slice stopped and GPUs freed %.1f s after the coordinator froze\n", s);
  EXPECT_GE(s, 2.5) << "not before the lease";
  EXPECT_NE(fed_.log("site-b").find("lease expired"), std::string::npos);
  fed_.Kill("site-a", SIGCONT);
  // The coordinator finds the slice gone and runs the job again.
  ASSERT_TRUE(Eventually([&] { return Get("site-a", id).attempt() >= 2; }, 20000))
      << Get("site-a", id).reason();
  Alice("site-a", {"jobs", "cancel", id});
}

// The job travels with its slices: a site that runs a slice keeps the job's
// record (spec, tenant, run plan, coordinator, term) and answers `jobs get`
// for it, naming the coordinator; a site that runs none of it and another
// tenant get nothing; the copy goes once the job's ranks there ended.
TEST_F(RunTest, ASiteOfAJobKeepsItsRecordAndAnswersForIt) {
  AddSite("site-a", {"site-b", "site-c"}, 1);
  AddSite("site-b", {"site-a", "site-c"}, 4);
  AddSite("site-c", {"site-a", "site-b"}, 4);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c"}); }, 15000));
  const std::string id =
      Submit("site-a", "name: kept\ngpus: 4\nallowed_sites: [site-b]\ncommand: [sleep, '60']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  const v1::Job at_a = Get("site-a", id);
  EXPECT_EQ(at_a.coordinator(), "site-a");
  EXPECT_EQ(at_a.term(), 1u);
  const v1::Job at_b = Get("site-b", id);
  ASSERT_EQ(at_b.id(), id) << fed_.log("site-b");
  EXPECT_EQ(at_b.coordinator(), "site-a");
  EXPECT_EQ(at_b.term(), 1u);
  EXPECT_EQ(at_b.tenant(), "vision");
  EXPECT_EQ(at_b.spec().name(), "kept");
  EXPECT_EQ(at_b.state(), v1::Job::RUNNING);
  EXPECT_EQ(at_b.run().epoch(), at_a.run().epoch());
  ASSERT_EQ(at_b.run().sites_size(), 1);
  EXPECT_EQ(at_b.run().sites(0).site(), "site-b");
  EXPECT_NE(at_b.reason().find("site-b's copy"), std::string::npos) << at_b.reason();
  const auto vc = RunCommand({FedctlBin(), "--gateway", fed_.endpoint("site-b"), "--tls-dir",
                               tmp_ / "alice", "vc", "get", id});
  EXPECT_NE(vc.out.find("coordinated by site-a at term 1"), std::string::npos) << vc.out << vc.err;
  // Members site-a and site-b: the one other peer witnesses, so that the job
  // has three members.
  ASSERT_EQ(at_b.run().witnesses_size(), 1);
  EXPECT_EQ(at_b.run().witnesses(0), "site-c");
  EXPECT_NE(vc.out.find("witnesses: site-c"), std::string::npos) << vc.out;
  const auto text = RunCommand({FedctlBin(), "--gateway", fed_.endpoint("site-b"), "--tls-dir",
                                 tmp_ / "alice", "jobs", "get", id});
  EXPECT_NE(text.out.find("coordinated by site-a at term 1"), std::string::npos) << text.out;
  // site-c runs none of it but witnesses it: it keeps the record as well
  // (sent with the first renewal after the commit, not with the commit), and
  // fedctl asking there is led to the coordinator's own view.
  EXPECT_TRUE(Eventually([&] { return Get("site-c", id).coordinator() == "site-a"; }, 10000))
      << fed_.log("site-c");
  const v1::Job at_c = Get("site-c", id);
  EXPECT_EQ(at_c.coordinator(), "site-a") << fed_.log("site-c");
  EXPECT_EQ(at_c.term(), 1u);
  EXPECT_NE(at_c.reason().find("site-c's copy"), std::string::npos) << at_c.reason();
  const auto followed = Alice("site-c", {"jobs", "get", id});
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  EXPECT_NE(followed.out.find("running on 1 site(s)"), std::string::npos) << followed.out;
  WriteTlsDir(tmp_ / "bob", ca_.User("speech", "bob"));
  const auto bob = RunCommand({FedctlBin(), "-o", "json", "--gateway", fed_.endpoint("site-b"),
                               "--tls-dir", tmp_ / "bob", "jobs", "get", id});
  EXPECT_NE(bob.exit_code, 0) << "another tenant's job: " << bob.out;
  EXPECT_EQ(bob.out.find("kept"), std::string::npos);
  // The REST API follows too: a call about the job at a member that does not
  // coordinate it is redirected (307) to the coordinator's REST endpoint,
  // which site-a's signed ad names.
  auto curl = [&](const std::string& who, const std::string& site, const std::string& path,
                  std::vector<std::string> extra) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "--cacert", tmp_ / (who + "/ca.pem"),
                                     "--cert", tmp_ / (who + "/cert.pem"), "--key", tmp_ / (who + "/key.pem")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("https://127.0.0.1:" + std::to_string(fed_.http_port(site)) + path);
    return RunCommand(argv);
  };
  const std::string to_a = "https://127.0.0.1:" + std::to_string(fed_.http_port("site-a")) + "/v1/jobs/" + id;
  EXPECT_TRUE(Eventually(
      [&] {
        return curl("alice", "site-c", "/v1/jobs/" + id, {"-o", "/dev/null", "-w", "%{http_code} %{redirect_url}"})
                   .out == "307 " + to_a;
      },
      10000))
      << curl("alice", "site-c", "/v1/jobs/" + id, {"-i"}).out;
  const auto rest_followed = curl("alice", "site-c", "/v1/jobs/" + id, {"-L"});
  EXPECT_NE(rest_followed.out.find("\"coordinator\":\"site-a\""), std::string::npos) << rest_followed.out;
  EXPECT_EQ(rest_followed.out.find("site-c's copy"), std::string::npos) << "the coordinator's view";
  const auto rest_own = curl("alice", "site-c", "/v1/jobs/" + id + "?follow=false", {});
  EXPECT_NE(rest_own.out.find("site-c's copy"), std::string::npos) << rest_own.out;
  EXPECT_EQ(curl("bob", "site-c", "/v1/jobs/" + id, {"-o", "/dev/null", "-w", "%{http_code}"}).out, "404")
      << "another tenant's job is not even redirected";
  // A cancel sent to site-b's REST API reaches the coordinator (POST kept).
  const auto rest_cancel = curl("alice", "site-b", "/v1/jobs/" + id + ":cancel",
                                {"-L", "-X", "POST", "-H", "Content-Type: application/json", "-d", "{}",
                                 "-w", "\n%{http_code}"});
  EXPECT_NE(rest_cancel.out.find("\n200"), std::string::npos) << rest_cancel.out << rest_cancel.err;
  EXPECT_TRUE(WaitState("site-a", id, v1::Job::CANCELLED, 10000)) << Get("site-a", id).reason();
  auto kept_at = [&](const std::string& site) {
    return Alice(site, {"--no-follow", "jobs", "get", id}).exit_code == 0;
  };
  EXPECT_TRUE(Eventually([&] { return !kept_at("site-b"); }, 20000)) << "the copy goes with the slice";
  EXPECT_TRUE(Eventually([&] { return !kept_at("site-c"); }, 20000))
      << "the witness forgets the ended job";
}

TEST_F(RunTest, APyTorchGlooProgramFormsOneWorldAcrossSites) {
  // Debian's python3-torch, init_process_group("gloo", init_method="env://"),
  // nothing set but what fedgate gives every rank.
  AddSite("site-a", {"site-b"}, 2);
  AddSite("site-b", {"site-a"}, 2);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  const std::string script = std::string(FEDGATE_SOURCE_DIR) + "/deploy/workload/torch_allreduce.py";
  const std::string id =
      Submit("site-a", "name: torch\ngpus: 4\ncommand: [/usr/bin/python3, " + script + "]\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 120000)) << Get("site-a", id).reason();
  for (int r = 0; r < 4; ++r) {
    auto log = RunCommand({FedctlBin(), "--gateway", fed_.endpoint("site-a"), "--tls-dir",
                           tmp_ / "alice", "jobs", "logs", id, "--rank", std::to_string(r)});
    EXPECT_NE(log.out.find("torch rank " + std::to_string(r) + "/4: gloo all_reduce OK, every "
                           "element = 10"),
              std::string::npos)
        << log.out;
  }
  EXPECT_EQ(Get("site-a", id).run().sites_size(), 2) << "two sites, one world";
}

TEST_F(RunTest, WatchAndLogsStreamUntilTheJobEnds) {
  AddSite("site-a", {}, 2);
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  const std::string id = Submit(
      "site-a", "name: talk\ngpus: 1\ncommand: [sh, -c, 'echo first; sleep 2; echo last']\n");
  const std::vector<std::string> base = {FedctlBin(), "--gateway", fed_.endpoint("site-a"),
                                         "--tls-dir", tmp_ / "alice"};
  auto with = [&](std::vector<std::string> args) {
    auto argv = base;
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  // Started while the job is still queued or running: both follow it to the end.
  auto logs = RunCommand(with({"jobs", "logs", id, "--rank", "0"}), {}, 60000);
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_EQ(logs.out, "first\nlast\n") << "the whole output, then exit at the end";
  auto watch = RunCommand(with({"jobs", "watch", id}), {}, 60000);
  EXPECT_EQ(watch.exit_code, 0) << watch.err;
  EXPECT_NE(watch.out.find("SUCCEEDED (attempt 1)"), std::string::npos) << watch.out;
  const std::string failing = Submit("site-a", "name: f\ngpus: 1\nmax_attempts: 1\ncommand: [false]\n");
  auto w2 = RunCommand(with({"jobs", "watch", failing}), {}, 60000);
  EXPECT_EQ(w2.exit_code, 1) << "watch exits non-zero when the job did not succeed";
  EXPECT_NE(w2.out.find("FAILED"), std::string::npos) << w2.out;
}

// health.command (DESIGN.md): a GPU that fails leaves the ad within an
// interval, the slice on it stops and the job runs again elsewhere, and the
// GPU comes back once it passes.
TEST_F(RunTest, AFailingGpuLeavesTheAdItsJobMovesAndItReturnsWhenHealthy) {
  const std::string health = tmp_ / "health.txt";
  WriteText(health, "");
  SiteOptions a;
  a.site = "site-a";
  a.peers = {"site-b"};
  a.node_lines = {"{name: site-a-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2}"};
  a.extra_yaml = "health: {command: 'cat " + health + "', interval: 300ms}\n";
  fed_.AddSite(a);
  AddSite("site-b", {"site-a"}, 2);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return Free("site-b", "site-a") == 2 && Free("site-a", "site-b") == 2; },
                         15000));

  // Leaves the ad: the site sees it at its next probe and re-advertises at
  // once; allow one health interval, one advertise interval and slack.
  WriteText(health, "site-a-n1 0 fail Xid 79: GPU has fallen off the bus\n");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return Free("site-b", "site-a") == 1; }, 10000, 20));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("failing GPU left site-b's view of site-a after %.2f s\n", seconds);
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(Metric(fed_.ops_port("site-a"), "fedgate_gpu_healthy{node=\"site-a-n1\",gpu=\"0\"}"), 0);
  WriteText(health, "site-a-n1 0 ok\n");
  ASSERT_TRUE(Eventually([&] { return Free("site-b", "site-a") == 2; }, 10000, 20));

  // A job running on the GPU: stopped, retried on the other site.
  const std::string id = Submit("site-a", "name: h\ngpus: 2\ncommand: [sleep, '60']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  ASSERT_EQ(Get("site-a", id).run().sites(0).site(), "site-a") << "ties break by name";
  WriteText(health, "site-a-n1 1 fail ECC errors\n");
  ASSERT_TRUE(WaitRunningAgain("site-a", id, 2)) << Get("site-a", id).reason();
  const v1::Job moved = Get("site-a", id);
  ASSERT_EQ(moved.run().sites_size(), 1);
  EXPECT_EQ(moved.run().sites(0).site(), "site-b") << "site-a has one healthy GPU left";
  ASSERT_TRUE(Eventually([&] { return Free("site-b", "site-a") == 1; }, 10000))
      << "GPU 0 is free again, GPU 1 stays withdrawn";
  EXPECT_NE(fed_.log("site-a").find("GPU site-a-n1:1 (ECC errors) failed its health check"),
            std::string::npos);

  WriteText(health, "site-a-n1 1 ok\n");
  EXPECT_TRUE(Eventually([&] { return Free("site-b", "site-a") == 2; }, 10000));
  EXPECT_EQ(Alice("site-a", {"jobs", "cancel", id}).exit_code, 0);
}

// fedctl nodes cordon | uncordon | drain (site admins): a cordoned node
// leaves the ad and survives a restart, a drain with --preempt moves the job
// running there, tenants may not do it, and every action is in the audit log.
TEST_F(RunTest, CordonAndDrainANodeAreAuditedAndSurviveARestart) {
  AddSite("site-a", {"site-b"}, 2);
  AddSite("site-b", {"site-a"}, 2);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return Free("site-b", "site-a") == 2 && Free("site-a", "site-b") == 2; },
                         15000));
  auto admin = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {FedctlBin(), "--gateway", fed_.endpoint("site-a"), "--tls-dir",
                                     fed_.admin_tls_dir("site-a")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, {}, 60000);
  };
  auto cordon = admin({"nodes", "cordon", "site-a-n1"});
  ASSERT_EQ(cordon.exit_code, 0) << cordon.err;
  EXPECT_NE(cordon.out.find("cordoned"), std::string::npos) << cordon.out;
  EXPECT_TRUE(Eventually([&] { return Free("site-b", "site-a") == 0; }, 5000)) << "left the ad";
  auto unknown = admin({"nodes", "cordon", "no-such-node"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("no node \"no-such-node\""), std::string::npos) << unknown.err;
  auto tenant = Alice("site-a", {"nodes", "cordon", "site-a-n1"});
  EXPECT_NE(tenant.exit_code, 0) << "a tenant user is not a site admin";
  EXPECT_NE(tenant.err.find("PERMISSION_DENIED"), std::string::npos) << tenant.err;

  // Survives a restart.
  ASSERT_EQ(fed_.Stop("site-a"), 0);
  fed_.Start("site-a");
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  auto list = admin({"-o", "json", "nodes", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("\"cordoned\":true"), std::string::npos) << list.out;
  ASSERT_EQ(admin({"nodes", "uncordon", "site-a-n1"}).exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return Free("site-b", "site-a") == 2; }, 10000));

  // Drain with --preempt: the job running on the node runs again on site-b.
  const std::string id = Submit("site-a", "name: d\ngpus: 2\ncommand: [sleep, '60']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  ASSERT_EQ(Get("site-a", id).run().sites(0).site(), "site-a");
  auto drain = admin({"nodes", "drain", "site-a-n1", "--preempt", "--timeout", "30"});
  ASSERT_EQ(drain.exit_code, 0) << drain.err;
  EXPECT_NE(drain.err.find("stopping 1 slice(s) on site-a-n1"), std::string::npos) << drain.err;
  ASSERT_TRUE(WaitRunningAgain("site-a", id, 2)) << Get("site-a", id).reason();
  EXPECT_EQ(Get("site-a", id).run().sites(0).site(), "site-b");
  EXPECT_EQ(Free("site-b", "site-a"), 0u) << "a drained node stays cordoned";
  EXPECT_EQ(Alice("site-a", {"jobs", "cancel", id}).exit_code, 0);

  const std::string audit = ReadText(fed_.dir("site-a") + "/data/audit.log");
  const std::string who = "\"identity\":\"spiffe://aidc/site/site-a/admin/";
  for (const char* action : {"nodes.cordon", "nodes.uncordon", "nodes.drain"}) {
    EXPECT_NE(audit.find(std::string("\"action\":\"") + action + "\""), std::string::npos)
        << action << " missing from\n" << audit;
  }
  EXPECT_NE(audit.find(who), std::string::npos) << audit;
  EXPECT_NE(audit.find("\"node\":\"no-such-node\",\"preempt\":\"false\"},\"result\":\"NOT_FOUND\""),
            std::string::npos)
      << "refused actions are audited too\n" << audit;
  EXPECT_EQ(audit.find("vision"), std::string::npos) << "unauthorized calls never reach the handler";
}

// Per-second metering: a 4-GPU job across two sites that ran about 6 s shows
// 4 x its runtime in GPU-seconds (within a second per GPU), gathered from
// both sites' ledgers, by tenant and by site, as JSON and CSV.
TEST_F(RunTest, UsageCountsGpuSecondsFromEverySite) {
  AddSite("site-a", {"site-b"}, 2);
  AddSite("site-b", {"site-a"}, 2);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return Free("site-a", "site-b") == 2; }, 15000));
  const std::string id = Submit("site-a", "name: m\ngpus: 4\ncommand: [sleep, '6']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 40000)) << Get("site-a", id).reason();
  auto by_tenant = Alice("site-a", {"usage"});
  ASSERT_EQ(by_tenant.exit_code, 0) << by_tenant.err;
  v1::UsageResponse u;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(by_tenant.out, &u).ok()) << by_tenant.out;
  ASSERT_EQ(u.usage_size(), 1) << by_tenant.out;
  EXPECT_EQ(u.usage(0).tenant(), "vision");
  EXPECT_NEAR(u.usage(0).gpu_seconds(), 4 * 6.0, 4.0) << by_tenant.out;
  EXPECT_EQ(by_tenant.out.find("\"site\""), std::string::npos) << "rows carry the --by key only";
  auto by_site = Alice("site-a", {"usage", "--by", "site"});
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(by_site.out, &u).ok()) << by_site.out;
  ASSERT_EQ(u.usage_size(), 2) << by_site.out;
  EXPECT_EQ(u.usage(1).site(), "site-b");
  EXPECT_NEAR(u.usage(1).gpu_seconds(), 2 * 6.0, 2.0);
  EXPECT_TRUE(u.unreachable_sites().empty());
  auto csv = RunCommand({FedctlBin(), "-o", "csv", "--gateway", fed_.endpoint("site-a"), "--tls-dir",
                         tmp_ / "alice", "usage", "--by", "site", "--since", "1h"});
  EXPECT_EQ(csv.out.rfind("site,gpu_seconds,cost\nsite-a,", 0), 0u) << csv.out << csv.err;
  auto rest = RunCommand({"/usr/bin/curl", "-s", "--cacert", tmp_ / "alice/ca.pem", "--cert", tmp_ / "alice/cert.pem",
                          "--key", tmp_ / "alice/key.pem",
                          "https://127.0.0.1:" + std::to_string(fed_.http_port("site-a")) +
                              "/v1/usage?by=model"});
  EXPECT_NE(rest.out.find("\"model\":\"A100-80GB\""), std::string::npos) << rest.out << rest.err;
  auto other = Alice("site-a", {"usage", "--tenant", "nlp"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("may only see its own usage"), std::string::npos) << other.err;
  auto bad = Alice("site-a", {"usage", "--since", "yesterday"});
  EXPECT_NE(bad.err.find("--since \"yesterday\" is neither RFC 3339 nor a duration"), std::string::npos)
      << bad.err;
  const double metered = Metric(fed_.ops_port("site-b"),
                                "fedgate_gpu_seconds_total{tenant=\"vision\",model=\"A100-80GB\","
                                "priority=\"guaranteed\"}");
  EXPECT_NEAR(metered, 2 * 6.0, 2.0);
}

}  // namespace
}  // namespace fedgate::testing
