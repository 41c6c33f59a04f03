// recovery: replace with real gateways, real ranks (the PyTorch trainer of
// deploy/workload, gloo on CPU) and real checkpoint copies: four sites on
// loopback, a 2-site job, one of its slices lost (its site killed -9 with
// its ranks, a GPU failing its health check, a rank exiting 1 once). The
// job stays RUNNING in attempt 1, the survivors' GPUs are never free, the
// lost slice is reserved again on the spare site, and the final weights
// equal those of an uninterrupted run.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "fedgate/v1/jobs.pb.h"
#include "tests/support/jobs_fixture.h"

namespace fedgate::testing {
namespace {

const char* kSites[] = {"site-a", "site-b", "site-c", "site-d"};

std::string Trainer() { return std::string(FEDGATE_SOURCE_DIR) + "/deploy/workload/torch_trainer.py"; }

std::vector<pid_t> RankPids(const std::string& job, const std::string& site = "") {
  return JobRankPids(job, site);
}

class ReplaceTest : public JobsTest {
 protected:
  // Four sites of two GPUs, all peers; site-a (the coordinator) runs no
  // ranks, so the job's two slices and the spare are b, c and d.
  void StartFour(const std::string& health_file = "") {
    for (const char* s : kSites) {
      std::vector<std::string> peers;
      for (const char* p : kSites) {
        if (std::string(p) != s) peers.push_back(p);
      }
      std::string extra;
      if (!health_file.empty() && std::string(s) != "site-a") {
        extra = "health: {command: 'cat " + health_file + "', interval: 300ms}\n";
      }
      AddSite(s, peers, 2, "A100-80GB", extra);
    }
    fed_.StartAll();
    ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c", "site-d"}); },
                           20000));
  }
  std::string Spec(const std::string& name, const std::string& args, bool replace = true) {
    return "name: " + name +
           "\ngpus: 4\nmax_sites: 2\nmin_gpus_per_site: 2\navoided_sites: [site-a]\n" +
           (replace ? "recovery: replace\ncheckpoint: {keep: 2}\n" : "") +
           "command: [/usr/bin/python3, " + Trainer() + args + "]\n";
  }
  std::string Digest(const std::string& id) {
    auto log = Alice("site-a", {"jobs", "logs", id, "--rank", "0"});
    const std::string key = "final weights sha256 ";
    const auto at = log.out.find(key);
    if (at == std::string::npos) return "no digest in rank 0's log: " + log.out + log.err;
    return log.out.substr(at + key.size(), 64);
  }
  // The digest of an uninterrupted run of the same program and world.
  std::string Reference(const std::string& args) {
    const std::string id = Submit("site-a", Spec("reference", args, false));
    EXPECT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 90000)) << Get("site-a", id).reason();
    return Digest(id);
  }
  std::string CheckpointDir(const std::string& site, const std::string& id) {
    return fed_.work_root() + "/" + site + "/" + id + "/checkpoints";
  }
  bool HasCheckpoint(const std::string& site, const std::string& id) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(CheckpointDir(site, id), ec)) {
      if (e.path().filename().string().rfind("step-", 0) == 0) return true;
    }
    return false;
  }
  // Watches the job while it recovers: it must never leave RUNNING, and the
  // survivor's GPUs must never show free in the coordinator's view.
  struct Watch {
    std::atomic<bool> stop{false};
    std::atomic<int> left_running{0}, survivor_free{0};
    std::thread t;
    ~Watch() {
      stop = true;
      if (t.joinable()) t.join();
    }
  };
  void StartWatch(Watch* w, const std::string& id, const std::string& survivor) {
    w->t = std::thread([this, w, id, survivor] {
      while (!w->stop) {
        // Free GPUs first: a job whose new world has not started yet
        // (restart 0) had its GPUs held when they were read.
        const uint32_t free = Free("site-a", survivor);
        const v1::Job j = Get("site-a", id);
        if (j.state() != v1::Job::RUNNING && j.state() != v1::Job::SUCCEEDED) ++w->left_running;
        if (j.state() == v1::Job::SUCCEEDED) break;
        if (j.run().restart() == 0 && free != 0) ++w->survivor_free;
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
      }
    });
  }
  // Runs the job until `lose` takes one slice away; checks the recovery.
  void RunAndLose(const std::string& args, bool lose_rank0_site,
                  const std::function<void(const std::string& id, const std::string& site)>& lose,
                  bool site_moves) {
    // The same run without the failure it is asked to stage.
    const std::string want = Reference(args.substr(0, args.find(", --fail-rank")));
    ASSERT_EQ(want.size(), 64u) << want;
    const std::string id = Submit("site-a", Spec("train", args));
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 30000)) << Get("site-a", id).reason();
    const v1::Job before = Get("site-a", id);
    ASSERT_EQ(before.run().sites_size(), 2);
    const std::string lost = before.run().sites(lose_rank0_site ? 0 : 1).site();
    const std::string survivor = before.run().sites(lose_rank0_site ? 1 : 0).site();
    std::set<std::string> spare = {"site-b", "site-c", "site-d"};
    spare.erase(lost);
    spare.erase(survivor);
    // Mid-run, with a checkpoint at both sites (rank 0 writes, fedgate copies).
    ASSERT_TRUE(Eventually([&] { return HasCheckpoint(lost, id) && HasCheckpoint(survivor, id); },
                           60000))
        << Get("site-a", id).reason();
    Watch w;
    StartWatch(&w, id, survivor);
    lose(id, lost);
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 120000))
        << Get("site-a", id).reason() << fed_.log("site-a");
    w.stop = true;
    const v1::Job after = Get("site-a", id);
    EXPECT_EQ(after.attempt(), 1u) << "replaced in place, not retried";
    EXPECT_EQ(after.run().restart(), 1u) << "one loss is one restart";
    EXPECT_EQ(w.left_running, 0) << "the job left RUNNING during its recovery";
    EXPECT_EQ(w.survivor_free, 0) << "the survivor's GPUs showed free during the recovery";
    std::set<std::string> now;
    for (const auto& s : after.run().sites()) now.insert(s.site());
    if (site_moves) {
      EXPECT_EQ(now, (std::set<std::string>{survivor, *spare.begin()}))
          << "the lost slice is re-reserved on the spare site";
      // The members changed one at a time: the spare joined, then the lost
      // site left (each step held by a majority of the members before it).
      EXPECT_EQ(std::set<std::string>(after.run().members().begin(), after.run().members().end()),
                (std::set<std::string>{"site-a", survivor, *spare.begin()}));
      EXPECT_FALSE(after.run().has_member_change()) << after.run().member_change().DebugString();
      const auto story = Alice("site-a", {"jobs", "events", id});
      const auto joined = story.out.find(*spare.begin() + " joined the job's members");
      const auto left = story.out.find(lost + " left the job's members");
      EXPECT_NE(joined, std::string::npos) << story.out;
      EXPECT_NE(left, std::string::npos) << story.out;
      EXPECT_LT(joined, left) << "joined first, then left: " << story.out;
    } else {
      EXPECT_EQ(now, (std::set<std::string>{survivor, lost})) << "restarted where it was";
    }
    EXPECT_EQ(Digest(id), want) << "recovery lost or repeated a step";
    EXPECT_TRUE(Eventually([&] { return RankPids(id).empty(); }, 10000));
  }
};

TEST_F(ReplaceTest, ASiteKilledWithItsRanksCostsOneSliceNotTheJob) {
  ASSERT_NO_FATAL_FAILURE(StartFour());
  RunAndLose(", --steps, '60', --step-seconds, '0.15'", /*lose_rank0_site=*/true,
             [&](const std::string& id, const std::string& site) {
               fed_.Kill(site, SIGKILL);
               for (pid_t p : RankPids(id, site)) ::kill(p, SIGKILL);
             },
             /*site_moves=*/true);
}

TEST_F(ReplaceTest, ARankExitingOnceRestartsTheWorldWhereItIs) {
  ASSERT_NO_FATAL_FAILURE(StartFour());
  RunAndLose(", --steps, '50', --step-seconds, '0.1', --fail-rank, '3', --fail-at-step, '30'",
             false, [](const std::string&, const std::string&) {}, /*site_moves=*/false);
}

TEST_F(ReplaceTest, AGpuFailingItsHealthCheckMovesOnlyItsSlice) {
  const std::string health = tmp_ / "health.txt";
  WriteText(health, "");
  ASSERT_NO_FATAL_FAILURE(StartFour(health));
  RunAndLose(", --steps, '60', --step-seconds, '0.15'", false,
             [&](const std::string&, const std::string& site) {
               WriteText(health, site + "-n1 1 fail Xid 79: GPU has fallen off the bus\n");
             },
             /*site_moves=*/true);
}

TEST_F(ReplaceTest, ACancelDuringTheReplacementStopsEveryRank) {
  ASSERT_NO_FATAL_FAILURE(StartFour());
  // No spare capacity: the replacement waits for capacity (site-d is full).
  const std::string blocker = Submit(
      "site-a", "name: blocker\ngpus: 2\nallowed_sites: [site-d]\ncommand: [sleep, '120']\n");
  ASSERT_TRUE(WaitState("site-a", blocker, v1::Job::RUNNING, 20000));
  const std::string id =
      Submit("site-a", Spec("train", ", --steps, '400', --step-seconds, '0.1'"));
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 30000)) << Get("site-a", id).reason();
  const v1::Job job = Get("site-a", id);
  const std::string lost = job.run().sites(1).site();
  ASSERT_TRUE(Eventually([&] { return RankPids(id).size() >= 4; }, 30000)) << RankPids(id).size();
  fed_.Kill(lost, SIGKILL);
  for (pid_t p : RankPids(id, lost)) ::kill(p, SIGKILL);
  ASSERT_TRUE(Eventually(
      [&] { return Get("site-a", id).reason().find("waiting for capacity") != std::string::npos; },
      30000))
      << Get("site-a", id).reason();
  EXPECT_EQ(Get("site-a", id).state(), v1::Job::RUNNING);
  EXPECT_EQ(Alice("site-a", {"jobs", "cancel", id}).exit_code, 0);
  EXPECT_TRUE(WaitState("site-a", id, v1::Job::CANCELLED, 10000));
  EXPECT_TRUE(Eventually([&] { return RankPids(id).empty(); }, 15000))
      << RankPids(id).size() << " rank(s) of the cancelled job still run";
  const std::string survivor = job.run().sites(0).site();
  EXPECT_TRUE(Eventually([&] { return Free("site-a", survivor) == 2; }, 15000))
      << "the survivor's GPUs come back with the cancel";
  EXPECT_EQ(Alice("site-a", {"jobs", "cancel", blocker}).exit_code, 0);
}

}  // namespace
}  // namespace fedgate::testing
