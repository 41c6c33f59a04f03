// The process executor with real gateways: ranks are isolated from the
// gateway (user, environment, files) and outlive gateway restarts.
// Needs root (as CI is): only root can run ranks as another user.
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/support/jobs_fixture.h"

namespace fedgate::testing {
namespace {

class BackendTest : public JobsTest {
 protected:
  std::string RankLog(const std::string& site, const std::string& id, int attempt, int rank) {
    return ReadText(fed_.dir(site) + "/data/jobs/" + id + "/attempt-" + std::to_string(attempt) +
                    "/rank-" + std::to_string(rank) + ".log");
  }
};

TEST_F(BackendTest, RanksRunUnprivilegedWithoutTheGatewaysSecretsOrEnvironment) {
  ASSERT_EQ(::geteuid(), 0u) << "this test runs ranks as another user: run it as root (CI does)";
  const passwd* rank_user = ::getpwnam("fedgate-rank");
  ASSERT_NE(rank_user, nullptr) << "deploy/deps.sh adds the fedgate-rank user";
  AddSite("site-a", {}, 1);
  fed_.Start("site-a", {"FEDGATE_TEST_SECRET=hunter2"});
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  const std::string key = fed_.dir("site-a") + "/tls/key.pem";
  const std::string db = fed_.dir("site-a") + "/data/fedgate.db";
  const std::string id = Submit(
      "site-a", "name: probe\ngpus: 1\nenv: {MINE: yes}\ncommand: [sh, -c, 'echo uid=$(id -u); "
                "echo secret=$FEDGATE_TEST_SECRET mine=$MINE; echo home=$HOME pwd=$(pwd); "
                "cat " + key + " >/dev/null 2>&1 && echo READ-KEY; cat " + db +
                " >/dev/null 2>&1 && echo READ-STORE; ls " + fed_.dir("site-a") +
                "/data >/dev/null 2>&1 && echo LIST-DATA; echo end']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 20000)) << Get("site-a", id).reason();
  const std::string log = RankLog("site-a", id, 1, 0);
  EXPECT_NE(log.find("uid=" + std::to_string(rank_user->pw_uid) + "\n"), std::string::npos) << log;
  EXPECT_NE(log.find("secret= mine=yes"), std::string::npos)
      << "only the spec's env reaches the rank, not the gateway's: " << log;
  const std::string work = fed_.work_root() + "/site-a/" + id;
  EXPECT_NE(log.find("home=" + work + " pwd=" + work), std::string::npos) << log;
  EXPECT_EQ(log.find("READ-KEY"), std::string::npos) << log;
  EXPECT_EQ(log.find("READ-STORE"), std::string::npos) << log;
  EXPECT_EQ(log.find("LIST-DATA"), std::string::npos) << log;
  EXPECT_NE(log.find("end"), std::string::npos) << log;
  EXPECT_NE(fed_.log("site-a").find("isolation: ranks run as fedgate-rank"), std::string::npos);
  // The gateway re-executed itself once to size malloc's thread caches.
  EXPECT_NE(fed_.log("site-a").find("malloc: one arena, one cached chunk per size and thread"),
            std::string::npos)
      << fed_.log("site-a");
}

TEST_F(BackendTest, RanksOutliveKillNineAndSigtermOfBothGateways) {
  SiteOptions a, b;
  for (auto* o : {&a, &b}) {
    const bool is_a = o == &a;
    o->site = is_a ? "site-a" : "site-b";
    o->peers = {is_a ? "site-b" : "site-a"};
    o->node_lines = {"{name: " + o->site + "-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2}"};
    o->jobs_lease = "10s";
    fed_.AddSite(*o);
  }
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  const std::string id =
      Submit("site-a", "name: long\ngpus: 4\ncommand: [sh, -c, 'for i in $(seq 1 16); do echo "
                       "tick $i; sleep 0.5; done; echo done']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  // kill -9 of the participant and of the coordinator, then both back.
  fed_.Kill("site-b");
  fed_.Kill("site-a");
  ASSERT_TRUE(fed_.WaitExit("site-a", 5000).has_value());
  ASSERT_TRUE(fed_.WaitExit("site-b", 5000).has_value());
  fed_.Start("site-b");
  fed_.Start("site-a");
  ASSERT_TRUE(fed_.WaitReady("site-a") && fed_.WaitReady("site-b"));
  EXPECT_NE(fed_.log("site-b").find("re-attached to 2 rank(s)"), std::string::npos)
      << fed_.log("site-b");
  // SIGTERM drains and exits 0, leaving the ranks alone.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(fed_.Stop("site-b"), 0);
  fed_.Start("site-b");
  ASSERT_TRUE(fed_.WaitReady("site-b"));
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 30000)) << Get("site-a", id).reason();
  EXPECT_EQ(Get("site-a", id).attempt(), 1u) << "never restarted";
  for (int r = 0; r < 4; ++r) {
    auto logs = Alice("site-a", {"jobs", "logs", id, "--rank", std::to_string(r)});
    ASSERT_EQ(logs.exit_code, 0) << logs.err;
    for (int i = 1; i <= 16; ++i) {
      EXPECT_NE(logs.out.find("tick " + std::to_string(i) + "\n"), std::string::npos)
          << "rank " << r << " tick " << i << ": " << logs.out;
    }
    EXPECT_NE(logs.out.find("done"), std::string::npos) << logs.out;
  }
  // Every GPU is free again on both sides.
  EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-a") == 2 && Free("site-a", "site-b") == 2; },
                         10000));
}

TEST_F(BackendTest, AStopKillsTheWholeSliceCgroupEvenEscapedProcesses) {
  AddSite("site-a", {}, 1);
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  ASSERT_NE(fed_.log("site-a").find("cgroup v2 at"), std::string::npos)
      << "this host offers a writable cgroup2 mount (CI does): " << fed_.log("site-a");
  const std::string id = Submit(
      "site-a", "name: stray\ngpus: 1\ncommand: [sh, -c, 'setsid sleep 300 & echo stray=$!; "
                "sleep 300']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  long stray = 0;
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string log = RankLog("site-a", id, 1, 0);
        const size_t at = log.find("stray=");
        return at != std::string::npos && std::sscanf(log.c_str() + at, "stray=%ld", &stray) == 1;
      },
      5000));
  ASSERT_EQ(::kill(static_cast<pid_t>(stray), 0), 0) << "the escaped process runs";
  // The slice has its own cgroup, and it goes with the slice.
  const std::string log = fed_.log("site-a");
  const size_t at = log.find("cgroup v2 at ") + 13;
  const std::string root = log.substr(at, log.find(':', at) - at);
  auto slice_cgroups = [&] {
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
      n += e.path().filename().string().rfind(id + "-", 0) == 0;
    }
    return n;
  };
  ASSERT_EQ(slice_cgroups(), 1) << "under " << root;
  ASSERT_EQ(Alice("site-a", {"jobs", "cancel", id}).exit_code, 0);
  EXPECT_TRUE(Eventually([&] { return ::kill(static_cast<pid_t>(stray), 0) != 0; }, 10000))
      << "a process that left the rank's process group dies with the slice's cgroup";
  EXPECT_TRUE(Eventually([&] { return slice_cgroups() == 0; }, 10000))
      << slice_cgroups() << " cgroup(s) of job " << id << " left under " << root;

  // A gateway that went down before its slices' cgroups were gone left them
  // (here one still holding an escaped process): its next run removes those
  // of its own jobs, and only those.
  ASSERT_TRUE(fed_.Stop("site-a").has_value());
  const std::string leftover = root + "/" + id + "-77";
  const std::string foreign = root + "/not-a-job-of-site-a-1";
  ASSERT_EQ(::mkdir(leftover.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(foreign.c_str(), 0755), 0);
  const pid_t sleeper = ::fork();
  if (sleeper == 0) {
    ::execlp("sleep", "sleep", "300", nullptr);
    ::_exit(127);
  }
  {
    std::ofstream procs(leftover + "/cgroup.procs");
    procs << sleeper << std::flush;
    ASSERT_TRUE(procs.good()) << "cannot move pid " << sleeper << " into " << leftover;
  }
  fed_.Start("site-a");
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  int status = 0;
  const bool reaped = Eventually([&] { return ::waitpid(sleeper, &status, WNOHANG) == sleeper; }, 10000);
  if (!reaped) ::kill(sleeper, SIGKILL);
  EXPECT_TRUE(reaped && WIFSIGNALED(status)) << "the leftover cgroup's process was not killed";
  EXPECT_TRUE(Eventually([&] { return !std::filesystem::exists(leftover); }, 10000)) << leftover;
  EXPECT_TRUE(std::filesystem::exists(foreign)) << "not a job of this site: someone else's";
  ::rmdir(foreign.c_str());
  if (!reaped) ::waitpid(sleeper, &status, 0);
}

TEST_F(BackendTest, ConcurrentJobsNeverShareAMasterPort) {
  AddSite("site-a", {}, 4, "A100-80GB", "executor: {port_range: 31000-31003, work_dir: " +
                                            fed_.work_root() + "/site-a}\n");
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(Submit("site-a", "name: p\ngpus: 1\ncommand: [sh, -c, 'echo port=$MASTER_PORT; "
                                   "sleep 2']\n"));
  }
  std::set<std::string> ports;
  for (const auto& id : ids) {
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 20000)) << Get("site-a", id).reason();
    const std::string log = RankLog("site-a", id, 1, 0);
    const size_t at = log.find("port=");
    ASSERT_NE(at, std::string::npos) << log;
    ports.insert(log.substr(at + 5, 5));
  }
  EXPECT_EQ(ports, (std::set<std::string>{"31000", "31001", "31002", "31003"}))
      << "four jobs at once, four ports of the range";
}

}  // namespace
}  // namespace fedgate::testing
