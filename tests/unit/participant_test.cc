// The participant on a FakeClock with a FakeRankRunner: no real process, no
// polling. What a commit starts and with which environment, how a sweep
// ends slices (exits, failed ranks, lapsed leases, grace then SIGKILL),
// what the store keeps across a restart, and that ranks are started with
// the participant's lock free (another thread can take it meanwhile).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gateway/jobs/participant.h"
#include "gateway/store/store.h"
#include "tests/support/fake_clock.h"
#include "tests/support/fake_rank_runner.h"
#include "tests/support/site_config.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using testing::FakeClock;
using testing::FakeRankRunner;

constexpr const char* kJob = "j-00000000000000a1";

std::string EnvOf(const RankProcessSpec& spec, const std::string& name) {
  for (const auto& kv : spec.env) {
    if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
  }
  return "<unset>";
}

// True when another thread can take `mu` now (so this one does not hold it).
bool LockIsFree(std::mutex& mu) {
  return std::async(std::launch::async, [&mu] {
           if (!mu.try_lock()) return false;
           mu.unlock();
           return true;
         }).get();
}

class ParticipantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::OneNodeSite("site-a", tmp_.path(), 4);
    auto store = Store::Open(tmp_ / "db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    p_ = Make();
  }
  std::unique_ptr<Participant> Make() {
    auto p = std::make_unique<Participant>(config_, &clock_, store_.get());
    auto runner = std::make_unique<FakeRankRunner>();
    runner_ = runner.get();
    p->SetRunner(std::move(runner));
    p->SetOnUsage([this](const std::vector<federation::UsageRecord>& recs) {
      usage_lock_free_ = LockIsFree(p_->mutex_for_test());
      std::lock_guard lock(closed_mu_);
      closed_.insert(closed_.end(), recs.begin(), recs.end());
    });
    return p;
  }
  v1::ReservationKey Key(uint64_t epoch = 1) const {
    v1::ReservationKey k;
    k.set_job_id(kJob);
    k.set_attempt(1);
    k.set_epoch(epoch);
    return k;
  }
  // Holds `gpus` GPUs of n1; returns their indices.
  std::vector<uint32_t> Hold(uint32_t gpus, uint64_t epoch = 1) {
    v1::PrepareRequest r;
    *r.mutable_key() = Key(epoch);
    r.set_tenant("vision");
    r.add_nodes()->set_node("n1");
    r.mutable_nodes(0)->set_gpus(gpus);
    r.set_hold_ttl_ms(30'000);
    auto got = p_->Prepare("bj", r);
    EXPECT_TRUE(got.ok()) << got.status();
    std::vector<uint32_t> out;
    if (got.ok()) out.assign(got->holds(0).indices().begin(), got->holds(0).indices().end());
    return out;
  }
  v1::CommitRequest Run(uint32_t ranks, int64_t lease_ms = 600'000, uint64_t epoch = 1) const {
    v1::CommitRequest c;
    *c.mutable_key() = Key(epoch);
    for (uint32_t i = 0; i < ranks; ++i) {
      auto* r = c.add_ranks();
      r->set_rank(i);
      r->set_local_rank(i);
      r->set_local_world_size(ranks);
      r->set_node("n1");
    }
    c.set_world_size(ranks);
    c.set_master_addr("10.0.0.1");
    c.set_master_port(29501);
    c.add_command("train");
    (*c.mutable_env())["EPOCHS"] = "3";
    c.set_lease_ms(lease_ms);
    return c;
  }
  v1::SliceStatusResponse StatusOf(uint64_t epoch = 1, int64_t lease_ms = 600'000) {
    v1::SliceStatusRequest q;
    *q.mutable_key() = Key(epoch);
    q.set_lease_ms(lease_ms);
    auto st = p_->Status("bj", q);
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? *st : v1::SliceStatusResponse();
  }

  testing::TempDir tmp_;
  Config config_;
  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Participant> p_;
  FakeRankRunner* runner_ = nullptr;
  // Written by whichever thread sweeps: the test's, or the sweeper that
  // Start runs (after a restart).
  std::mutex closed_mu_;
  std::vector<federation::UsageRecord> closed_;
  // The closed records once there are `n` (5 s at most, real time): the
  // sweeper thread may be the one that ends a slice.
  std::vector<federation::UsageRecord> WaitClosed(size_t n) {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard lock(closed_mu_);
        if (closed_.size() >= n) return closed_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard lock(closed_mu_);
    return closed_;
  }
  bool usage_lock_free_ = false;
};

TEST_F(ParticipantTest, CommitStartsEachRankOnItsHeldGpuWithTheRankEnvironment) {
  const auto gpus = Hold(2);
  ASSERT_EQ(gpus.size(), 2u);
  ASSERT_TRUE(p_->Commit("bj", Run(2)).ok());
  const auto launched = runner_->launched();
  ASSERT_EQ(launched.size(), 2u);
  for (uint32_t i = 0; i < 2; ++i) {
    const auto& spec = launched[i].spec;
    EXPECT_EQ(EnvOf(spec, "RANK"), std::to_string(i));
    EXPECT_EQ(EnvOf(spec, "CUDA_VISIBLE_DEVICES"), std::to_string(gpus[i])) << "the held GPU";
    EXPECT_EQ(EnvOf(spec, "WORLD_SIZE"), "2");
    EXPECT_EQ(EnvOf(spec, "MASTER_PORT"), "29501");
    EXPECT_EQ(EnvOf(spec, "FEDGATE_JOB_ID"), kJob);
    EXPECT_EQ(EnvOf(spec, "FEDGATE_SITE"), "site-a");
    EXPECT_EQ(EnvOf(spec, "FEDGATE_NODE_ADDR"), "10.0.0.1");
    EXPECT_EQ(EnvOf(spec, "EPOCHS"), "3") << "the spec's env";
    EXPECT_EQ(EnvOf(spec, "HOME"), tmp_ / ("work/" + std::string(kJob)));
    EXPECT_EQ(spec.log_path, tmp_ / ("jobs/" + std::string(kJob) + "/attempt-1/rank-" +
                                     std::to_string(i) + ".log"));
    EXPECT_EQ(spec.argv.back(), "train");
  }
  EXPECT_EQ(p_->FreeGpus()["n1"], 2u);
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::RUNNING);
  auto open = store_->ListUsage(clock_.NowMs(), INT64_MAX, "");
  ASSERT_TRUE(open.ok());
  ASSERT_EQ(open->size(), 1u) << "one open usage record per node";
  EXPECT_EQ((*open)[0].gpus, 2u);
  EXPECT_EQ((*open)[0].gpu_model, "A100");
  auto rows = store_->LoadSlices();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u) << "the ranks are stored before the commit answers";
  EXPECT_EQ((*rows)[0].procs, "0:1000:42,1:1001:42");
}

TEST_F(ParticipantTest, RanksStartAndUsageClosesWithTheLockFree) {
  // The core's Tick runs in this callback (it asks the participant for its
  // free GPUs): it must never run under the participant's lock.
  int changes = 0;
  bool free_at_change = true;
  p_->SetOnCapacityChange([&] {
    free_at_change = free_at_change && LockIsFree(p_->mutex_for_test());
    ++changes;
  });
  Hold(2);
  int checked = 0;
  bool free_at_launch = true;
  runner_->on_launch = [&](const RankProcessSpec&) {
    free_at_launch = free_at_launch && LockIsFree(p_->mutex_for_test());
    ++checked;
  };
  ASSERT_TRUE(p_->Commit("bj", Run(2)).ok());
  EXPECT_EQ(checked, 2);
  EXPECT_TRUE(free_at_launch) << "a rank was spawned under the participant's lock";
  for (const auto& l : runner_->launched()) runner_->Exit(l.pid, 0);
  p_->Sweep();
  ASSERT_EQ(closed_.size(), 1u);
  EXPECT_TRUE(usage_lock_free_) << "usage was reported under the participant's lock";
  EXPECT_GE(changes, 2) << "the hold and the release change what is offered";
  EXPECT_TRUE(free_at_change) << "a capacity change was reported under the lock";
}

TEST_F(ParticipantTest, ASliceWhoseRanksAllExitedSucceedsAndFreesItsGpus) {
  Hold(2);
  ASSERT_TRUE(p_->Commit("bj", Run(2)).ok());
  const auto launched = runner_->launched();
  runner_->Exit(launched[0].pid, 0);
  p_->Sweep();
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::RUNNING) << "one rank still runs";
  EXPECT_EQ(p_->FreeGpus()["n1"], 2u);
  runner_->Exit(launched[1].pid, 0);
  clock_.Advance(5000);
  p_->Sweep();
  const auto st = StatusOf();
  EXPECT_EQ(st.state(), v1::SliceStatusResponse::SUCCEEDED);
  EXPECT_EQ(st.exit_codes().size(), 2u);
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
  ASSERT_EQ(closed_.size(), 1u);
  EXPECT_EQ(closed_[0].reason, "succeeded");
  EXPECT_EQ(closed_[0].end_ms - closed_[0].start_ms, 5000);
  auto rows = store_->LoadSlices();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u) << "an ended slice's end stays until it is pruned";
  EXPECT_EQ((*rows)[0].procs, "") << "no rank to re-attach to";
  v1::SliceRecord rec;
  ASSERT_TRUE(rec.ParseFromString((*rows)[0].detail));
  EXPECT_EQ(rec.gpus_size(), 0) << "and no GPU to hold again";
  EXPECT_EQ(rec.ended().state(), v1::SliceStatusResponse::SUCCEEDED);
  EXPECT_EQ(rec.ended().exit_codes().size(), 2u);
}

TEST_F(ParticipantTest, AFailedRankStopsItsSiblingsAndSigkillsThemAfterTheGrace) {
  Hold(2);
  ASSERT_TRUE(p_->Commit("bj", Run(2)).ok());
  const auto launched = runner_->launched();
  runner_->IgnoreSigterm(true);
  runner_->Exit(launched[0].pid, 3);
  p_->Sweep();
  EXPECT_EQ(runner_->SignalsTo(launched[1].pid), std::vector<int>{SIGTERM});
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::FAILED);
  EXPECT_EQ(p_->FreeGpus()["n1"], 2u) << "GPUs stay used until every rank exited";
  clock_.Advance(2999);
  p_->Sweep();
  EXPECT_EQ(runner_->SignalsTo(launched[1].pid).size(), 1u) << "still within the grace";
  clock_.Advance(2);
  p_->Sweep();
  EXPECT_EQ(runner_->SignalsTo(launched[1].pid), (std::vector<int>{SIGTERM, SIGKILL}));
  p_->Sweep();
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
  const auto st = StatusOf();
  EXPECT_EQ(st.message(), "a rank failed");
  EXPECT_EQ(st.exit_codes().at(0), 3);
  EXPECT_EQ(st.exit_codes().at(1), 128 + SIGKILL);
}

TEST_F(ParticipantTest, ASliceWhoseLeaseLapsesIsStopped) {
  Hold(1);
  ASSERT_TRUE(p_->Commit("bj", Run(1, 5000)).ok());
  clock_.Advance(4000);
  StatusOf(1, 5000);  // a renewal
  clock_.Advance(4000);
  p_->Sweep();
  EXPECT_EQ(StatusOf(1, 5000).state(), v1::SliceStatusResponse::RUNNING) << "renewed";
  clock_.Advance(5001);
  p_->Sweep();
  const pid_t pid = runner_->launched()[0].pid;
  EXPECT_EQ(runner_->SignalsTo(pid), std::vector<int>{SIGTERM});
  p_->Sweep();
  const auto st = StatusOf();
  EXPECT_EQ(st.state(), v1::SliceStatusResponse::FAILED);
  EXPECT_NE(st.message().find("lease expired"), std::string::npos) << st.message();
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
}

// A gateway stopped (SIGSTOP, a long pause) past its slice's fence while the
// ranks finished: its first sweep after sees both, and the ranks' exits
// decide. Seen in chaos_bench: the slice was reported stopped by its lease,
// and its coordinator ran the whole world again.
TEST_F(ParticipantTest, RanksThatAllExitedZeroSucceedEvenWhenTheFenceHasPassedToo) {
  Hold(2);
  ASSERT_TRUE(p_->Commit("bj", Run(2, 5000)).ok());
  const auto launched = runner_->launched();
  runner_->Exit(launched[0].pid, 0);
  runner_->Exit(launched[1].pid, 0);
  clock_.Advance(60'000);  // far past the lease and any fence
  p_->Sweep();
  const auto st = StatusOf();
  EXPECT_EQ(st.state(), v1::SliceStatusResponse::SUCCEEDED) << st.message();
  EXPECT_TRUE(runner_->SignalsTo(launched[0].pid).empty()) << "nothing left to stop";
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
  ASSERT_EQ(closed_.size(), 1u);
  EXPECT_EQ(closed_[0].reason, "succeeded");
}

// One rank still running at the fence: the slice is stopped by it, and the
// rank that had exited 0 does not make it a success.
TEST_F(ParticipantTest, ARankStillRunningAtTheFenceStopsTheSliceThoughItsSiblingExitedZero) {
  Hold(2);
  ASSERT_TRUE(p_->Commit("bj", Run(2, 5000)).ok());
  const auto launched = runner_->launched();
  runner_->Exit(launched[0].pid, 0);
  clock_.Advance(60'000);
  p_->Sweep();
  EXPECT_EQ(runner_->SignalsTo(launched[1].pid), std::vector<int>{SIGTERM});
  p_->Sweep();
  const auto st = StatusOf();
  EXPECT_EQ(st.state(), v1::SliceStatusResponse::FAILED);
  EXPECT_NE(st.message().find("lease expired"), std::string::npos) << st.message();
}

TEST_F(ParticipantTest, AnAbortWhileRanksStartStopsThemAsTheyStart) {
  Hold(2);
  // The abort runs on a thread of its own while rank 1 starts; it must not
  // wait for the commit (a thread, not std::async: a failing run must not
  // hang in the future's destructor).
  std::promise<absl::Status> aborted;
  std::thread aborter;
  bool answered_in_time = false;
  runner_->on_launch = [&](const RankProcessSpec& spec) {
    if (EnvOf(spec, "RANK") != "1") return;
    aborter = std::thread([&] {
      v1::AbortRequest a;
      *a.mutable_key() = Key();
      a.set_reason("the job was cancelled");
      auto st = p_->Abort("bj", a);
      aborted.set_value(st.status());
    });
    answered_in_time = aborted.get_future().wait_for(std::chrono::seconds(10)) ==
                       std::future_status::ready;
  };
  ASSERT_TRUE(p_->Commit("bj", Run(2)).ok());
  aborter.join();
  ASSERT_TRUE(answered_in_time) << "Abort waited for the commit's spawns";
  for (const auto& l : runner_->launched()) {
    EXPECT_EQ(runner_->SignalsTo(l.pid), std::vector<int>{SIGTERM}) << "rank pid " << l.pid;
  }
  p_->Sweep();
  const auto st = StatusOf();
  EXPECT_EQ(st.state(), v1::SliceStatusResponse::FAILED);
  EXPECT_EQ(st.message(), "aborted: the job was cancelled");
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
}

TEST_F(ParticipantTest, ACommitWhoseRanksDoNotFitTheHoldStartsNothing) {
  Hold(2);
  auto three = p_->Commit("bj", Run(3));
  EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument) << three.status();
  auto one = p_->Commit("bj", Run(1));
  EXPECT_EQ(one.status().code(), absl::StatusCode::kInvalidArgument) << one.status();
  EXPECT_NE(one.status().message().find("1 rank(s) for the 2 GPU(s) held on node n1"),
            std::string::npos)
      << one.status();
  auto foreign = p_->Commit("sh", Run(2));
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kPermissionDenied) << foreign.status();
  EXPECT_TRUE(runner_->launched().empty());
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::HELD) << "the hold is untouched";
  ASSERT_TRUE(p_->Commit("bj", Run(2)).ok());
  ASSERT_TRUE(p_->Commit("bj", Run(2)).ok()) << "a duplicate commit answers OK";
  EXPECT_EQ(runner_->launched().size(), 2u) << "... and starts nothing more";
}

TEST_F(ParticipantTest, ARankThatCannotStartCountsAsExited127) {
  Hold(1);
  runner_->FailLaunches(true);
  ASSERT_TRUE(p_->Commit("bj", Run(1)).ok());
  p_->Sweep();
  const auto st = StatusOf();
  EXPECT_EQ(st.state(), v1::SliceStatusResponse::FAILED);
  EXPECT_EQ(st.exit_codes().at(0), 127);
  EXPECT_NE(testing::ReadText(tmp_ / ("jobs/" + std::string(kJob) + "/attempt-1/rank-0.log"))
                .find("fedgate: fake: cannot start"),
            std::string::npos);
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
}

// A participant that goes away without a sweep leaves its slice's row and
// open usage record in the store, as a crash would.
TEST_F(ParticipantTest, AfterARestartUnsupervisedRanksAreKilledAndTheirUsageCloses) {
  Hold(1);
  ASSERT_TRUE(p_->Commit("bj", Run(1)).ok());
  p_ = Make();
  p_->Start();
  EXPECT_EQ(runner_->SignalsTo(1000), std::vector<int>{SIGKILL})
      << "the stored rank (same pid and start time) is killed";
  const auto st = StatusOf();
  EXPECT_EQ(st.state(), v1::SliceStatusResponse::FAILED);
  EXPECT_NE(st.message().find("the gateway restarted"), std::string::npos) << st.message();
  ASSERT_EQ(closed_.size(), 1u);
  EXPECT_EQ(closed_[0].reason, "gateway restarted: ranks stopped");
  auto rows = store_->LoadSlices();
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->empty());
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
}

TEST_F(ParticipantTest, AfterARestartSupervisedRanksAreFollowedToTheirEnd) {
  Hold(1);
  ASSERT_TRUE(p_->Commit("bj", Run(1)).ok());
  p_ = Make();
  runner_->SetSupervised(true);
  p_->Start();
  EXPECT_TRUE(runner_->SignalsTo(1000).empty());
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::RUNNING);
  EXPECT_EQ(p_->FreeGpus()["n1"], 3u) << "its GPU is held again";
  EXPECT_TRUE(closed_.empty()) << "its usage stays open";
  runner_->Exit(1000, 0);
  p_->Sweep();
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::SUCCEEDED);
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
  const auto closed = WaitClosed(1);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].reason, "succeeded");
}


// recovery: replace at a site. The slice's GPUs outlive a failed rank (the
// slice parks), a halt stops the ranks but keeps the GPUs, a commit of a
// higher restart starts the next world on the same GPUs with FEDGATE_RESTART,
// and a parked slice whose lease lapses frees its GPUs.
v1::CommitRequest Keep(v1::CommitRequest c, uint32_t restart = 0) {
  c.set_keep_hold(true);
  c.set_restart(restart);
  c.set_checkpoint_keep(2);
  c.add_world_sites("site-a");
  c.add_world_sites("site-b");
  return c;
}

TEST_F(ParticipantTest, UnderKeepHoldAFailedRankParksTheSliceAndTheNextWorldTakesItsGpus) {
  const auto gpus = Hold(2);
  ASSERT_TRUE(p_->Commit("bj", Keep(Run(2))).ok());
  auto first = runner_->launched();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(EnvOf(first[0].spec, "FEDGATE_RESTART"), "0");
  EXPECT_EQ(EnvOf(first[0].spec, "FEDGATE_CHECKPOINT_DIR"),
            tmp_ / ("work/" + std::string(kJob) + "/checkpoints"));
  runner_->Exit(first[1].pid, 1);
  p_->Sweep();  // rank 1 failed: rank 0 gets SIGTERM, GPUs kept
  EXPECT_EQ(runner_->SignalsTo(first[0].pid), std::vector<int>{SIGTERM});
  p_->Sweep();  // every rank exited: parked
  auto st = StatusOf();
  EXPECT_EQ(st.state(), v1::SliceStatusResponse::FAILED);
  EXPECT_TRUE(st.held());
  EXPECT_TRUE(st.parked());
  EXPECT_EQ(st.restart(), 0u);
  EXPECT_EQ(p_->FreeGpus()["n1"], 2u) << "the parked slice keeps its 2 GPUs";
  EXPECT_TRUE(closed_.empty()) << "its usage stays open";
  ASSERT_TRUE(p_->Commit("bj", Keep(Run(2), 1)).ok());
  auto all = runner_->launched();
  ASSERT_EQ(all.size(), 4u);
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(EnvOf(all[i].spec, "FEDGATE_RESTART"), "1");
    EXPECT_EQ(EnvOf(all[i].spec, "CUDA_VISIBLE_DEVICES"), std::to_string(gpus[i - 2]))
        << "the same GPUs";
  }
  EXPECT_NE(all[2].spec.exit_file, first[0].spec.exit_file) << "one exit file per world";
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::RUNNING);
  EXPECT_EQ(StatusOf().restart(), 1u);
  ASSERT_TRUE(p_->Commit("bj", Keep(Run(2), 1)).ok());
  EXPECT_EQ(runner_->launched().size(), 4u) << "a duplicate commit of world 1 starts nothing";
  auto open = store_->ListUsage(0, INT64_MAX, "");
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->size(), 1u) << "one usage record through both worlds";
  runner_->Exit(all[2].pid, 0);
  runner_->Exit(all[3].pid, 0);
  p_->Sweep();
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::SUCCEEDED);
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u) << "success frees the GPUs";
}

TEST_F(ParticipantTest, AHaltKeepsTheGpusAndARestartWhileRanksStopIsRefused) {
  Hold(2);
  ASSERT_TRUE(p_->Commit("bj", Keep(Run(2))).ok());
  runner_->IgnoreSigterm(true);
  v1::AbortRequest halt;
  *halt.mutable_key() = Key();
  halt.set_keep_hold(true);
  halt.set_reason("world 0 restarts");
  ASSERT_TRUE(p_->Abort("bj", halt).ok());
  p_->Sweep();
  auto st = StatusOf();
  EXPECT_TRUE(st.held());
  EXPECT_FALSE(st.parked()) << "ranks still stopping";
  auto refused = p_->Commit("bj", Keep(Run(2), 1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  clock_.Advance(10'000);  // past the grace: SIGKILL
  p_->Sweep();
  p_->Sweep();
  EXPECT_TRUE(StatusOf().parked());
  EXPECT_EQ(p_->FreeGpus()["n1"], 2u);
  // An abort without keep_hold ends it: the GPUs come back.
  v1::AbortRequest end;
  *end.mutable_key() = Key();
  ASSERT_TRUE(p_->Abort("bj", end).ok());
  p_->Sweep();
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
}

TEST_F(ParticipantTest, AParkedSliceWhoseLeaseLapsesFreesItsGpus) {
  Hold(2);
  v1::CommitRequest park = Keep(Run(2, /*lease_ms=*/5'000));
  park.set_park(true);
  ASSERT_TRUE(p_->Commit("bj", park).ok());
  EXPECT_TRUE(runner_->launched().empty()) << "a parked commit starts no rank";
  auto st = StatusOf(1, 5'000);
  EXPECT_EQ(st.state(), v1::SliceStatusResponse::HELD);
  EXPECT_TRUE(st.parked());
  clock_.Advance(4'000);
  StatusOf(1, 5'000);  // renews it
  clock_.Advance(4'000);
  p_->Sweep();
  EXPECT_EQ(p_->FreeGpus()["n1"], 2u) << "renewed: still held";
  clock_.Advance(6'000);
  p_->Sweep();
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u) << "its lease lapsed";
  ASSERT_EQ(closed_.size(), 1u);
}

TEST_F(ParticipantTest, OnlySitesOfTheWorldMaySendAJobsCheckpoints) {
  Hold(2);
  ASSERT_TRUE(p_->Commit("bj", Keep(Run(2))).ok());
  auto ok = p_->CheckpointReceiver("site-b", kJob);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->dir, tmp_ / ("work/" + std::string(kJob) + "/checkpoints"));
  EXPECT_EQ(p_->CheckpointReceiver("site-c", kJob).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p_->CheckpointReceiver("site-b", "j-00000000000000ff").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p_->CheckpointReceiver("site-b", "../etc").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto jobs = p_->CheckpointJobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].others, std::vector<std::string>{"site-b"});
  EXPECT_EQ(jobs[0].keep, 2u);
}

TEST_F(ParticipantTest, AParkedReplacementOutlivesAGatewayRestartAndStartsItsWorldAfter) {
  Hold(2);
  v1::CommitRequest park = Keep(Run(2), 0);
  park.set_park(true);
  ASSERT_TRUE(p_->Commit("bj", park).ok());
  p_->Stop();  // no rank ran: nothing to detach
  p_ = Make();
  runner_->SetSupervised(true);
  p_->Start();
  auto st = StatusOf();
  EXPECT_TRUE(st.parked()) << "re-attached parked, from its stored record";
  EXPECT_EQ(p_->FreeGpus()["n1"], 2u);
  ASSERT_TRUE(p_->CheckpointReceiver("site-b", kJob).ok()) << "its world is remembered";
  ASSERT_TRUE(p_->Commit("bj", Keep(Run(2), 1)).ok());
  ASSERT_EQ(runner_->launched().size(), 2u);
  EXPECT_EQ(EnvOf(runner_->launched()[0].spec, "FEDGATE_RESTART"), "1");
  p_->Stop();
}

}  // namespace
}  // namespace fedgate::gateway

namespace fedgate::gateway {
namespace {

// A record of three members (bj, site-a, sh) that a successor may take over.
v1::JobCopy CopyNaming(uint64_t version, const std::string& coordinator, const std::string& tenant,
                       uint32_t attempt, const std::string& job = kJob) {
  v1::Job j;
  j.set_id(job);
  j.set_tenant(tenant);
  j.set_coordinator(coordinator);
  j.set_term(1);
  j.set_attempt(attempt);
  j.set_reason(absl::StrCat("copy ", version));
  j.mutable_run()->add_sites()->set_site("site-a");
  j.mutable_run()->add_sites()->set_site("sh");
  j.mutable_run()->set_takeover_after_ms(30'000);
  v1::JobCopy c;
  c.set_job(j.SerializeAsString());
  c.set_version(version);
  return c;
}

// The job's record travels with its slice: kept at commit, replaced only by
// a newer version, refused when it names another job, coordinator or
// tenant, reported in every status, kept across a restart, and forgotten
// once the slice's ranks ended and its coordinator said the job ended (a
// success it saw is kept until then: it may be lost before telling anyone).
TEST_F(ParticipantTest, TheJobsRecordIsKeptBesideItsSliceAndGoesWithIt) {
  Hold(2);
  auto c = Run(2);
  *c.mutable_copy() = CopyNaming(3, "bj", "vision", 1);
  ASSERT_TRUE(p_->Commit("bj", c).ok());
  auto kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << kept.status();
  EXPECT_EQ((*kept)->coordinator(), "bj");
  EXPECT_EQ(StatusOf().copy_version(), 3u);
  auto renew = [&](const v1::JobCopy& cp) -> uint64_t {
    v1::SliceStatusRequest q;
    *q.mutable_key() = Key();
    q.set_lease_ms(600'000);
    *q.mutable_copy() = cp;
    auto st = p_->Status("bj", q);
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? st->copy_version() : 0;
  };
  auto kept_copy = [&] { return (*p_->JobFromCopy(kJob))->reason(); };
  EXPECT_EQ(renew(CopyNaming(5, "bj", "vision", 1)), 5u);
  EXPECT_EQ(kept_copy(), "copy 5");
  EXPECT_EQ(renew(CopyNaming(4, "bj", "vision", 9)), 5u) << "an older copy changes nothing";
  EXPECT_EQ(renew(CopyNaming(6, "sh", "vision", 9)), 5u) << "another coordinator named";
  EXPECT_EQ(renew(CopyNaming(6, "bj", "speech", 9)), 5u) << "another tenant";
  EXPECT_EQ(renew(CopyNaming(6, "bj", "vision", 9, "j-00000000000000ff")), 5u) << "another job";
  v1::JobCopy garbage;
  garbage.set_job("\xff\xff not a job");
  garbage.set_version(8);
  EXPECT_EQ(renew(garbage), 5u);
  EXPECT_EQ(kept_copy(), "copy 5");
  // A restarted gateway that re-attaches to the slice keeps the copy.
  p_ = Make();
  runner_->SetSupervised(true);
  p_->Start();
  EXPECT_EQ(StatusOf().copy_version(), 5u) << "kept across a restart";
  EXPECT_EQ(kept_copy(), "copy 5");
  runner_->Exit(1000, 0);
  runner_->Exit(1001, 0);
  p_->Sweep();
  auto still = p_->JobFromCopy(kJob);
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE(still->has_value()) << "bj has not seen the end yet (a successor may need it)";
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::SUCCEEDED);
  p_->Sweep();
  still = p_->JobFromCopy(kJob);
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE(still->has_value()) << "seen, but bj has not said the job ended";
  v1::JobCopy end = CopyNaming(6, "bj", "vision", 1);
  v1::Job ended;
  ASSERT_TRUE(ended.ParseFromString(end.job()));
  ended.set_state(v1::Job::SUCCEEDED);
  end.set_job(ended.SerializeAsString());
  EXPECT_EQ(renew(end), 6u) << "the end notice is acknowledged";
  p_->Sweep();
  auto gone = p_->JobFromCopy(kJob);
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value()) << "no slice holds GPUs for it any more";
  EXPECT_TRUE(store_->ListJobCopies()->empty());
  EXPECT_EQ(StatusOf().copy_version(), 0u);
}

}  // namespace
}  // namespace fedgate::gateway

namespace fedgate::gateway {
namespace {

// Fencing by term: once a site keeps a job's record, it serves calls only at
// the record's term and from its coordinator; a higher term without grants
// is hostile, an older one is stale; each refusal is counted and changes
// nothing.
TEST_F(ParticipantTest, OnceTheRecordIsKeptOnlyItsTermIsServed) {
  Hold(2);
  auto c = Run(2);
  *c.mutable_copy() = CopyNaming(3, "bj", "vision", 1);
  ASSERT_TRUE(p_->Commit("bj", c).ok());
  auto call = [&](uint64_t term) {
    v1::SliceStatusRequest q;
    *q.mutable_key() = Key();
    q.mutable_key()->set_term(term);
    q.set_lease_ms(600'000);
    return p_->Status("bj", q);
  };
  EXPECT_TRUE(call(0).ok()) << "no term: a gateway from before terms, the first";
  EXPECT_TRUE(call(1).ok());
  const auto claimed = call(2);
  EXPECT_EQ(claimed.status().code(), absl::StatusCode::kPermissionDenied) << claimed.status();
  EXPECT_NE(claimed.status().message().find("without a majority of grants"), std::string::npos);
  EXPECT_EQ(p_->TermRefusals()["hostile"], 1u);
  v1::AbortRequest abort;
  *abort.mutable_key() = Key();
  abort.mutable_key()->set_term(5);
  EXPECT_EQ(p_->Abort("bj", abort).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusOf().state(), v1::SliceStatusResponse::RUNNING) << "the refused abort stopped nothing";
  // A copy may not move the term.
  v1::Job next;
  next.set_id(kJob);
  next.set_tenant("vision");
  next.set_coordinator("bj");
  next.set_term(2);
  v1::JobCopy moved;
  moved.set_job(next.SerializeAsString());
  moved.set_version(9);
  v1::SliceStatusRequest q;
  *q.mutable_key() = Key();
  q.set_lease_ms(600'000);
  *q.mutable_copy() = moved;
  ASSERT_TRUE(p_->Status("bj", q).ok());
  EXPECT_EQ(p_->TermRefusals()["bad_copy"], 1u);
  auto stored = store_->GetJobCopy(kJob);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->version, 3u) << "the refused copy was not written";
  EXPECT_TRUE(call(1).ok());
  // A record at term 2 (as a takeover would leave it) found after a
  // restart: term 1 is over.
  ASSERT_TRUE(store_->PutJobCopy(kJob, 9, next.SerializeAsString()).ok());
  p_ = Make();
  runner_->SetSupervised(true);
  p_->Start();
  // A renewal of term 1 is answered with the term here, renewing nothing.
  const auto stale = call(1);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ(stale->moved_term(), 2u);
  EXPECT_NE(stale->message().find("term 1 is over"), std::string::npos) << stale->message();
  EXPECT_EQ(p_->TermRefusals()["stale"], 1u);
  EXPECT_TRUE(call(2).ok());
  p_->Stop();
}

}  // namespace
}  // namespace fedgate::gateway

namespace fedgate::gateway {
namespace {

// The check behind "a port another program listens on is not handed out",
// on real sockets.
TEST(PortTakenHere, AListenerTakesItsPortAndAnotherHostsAddressSaysNothing) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);  // as a server listening on 0.0.0.0
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(sa);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const uint32_t port = ntohs(sa.sin_port);
  EXPECT_TRUE(PortTakenHere("127.0.0.1", port));
  EXPECT_FALSE(PortTakenHere("192.0.2.1", port)) << "not this host's address (TEST-NET-1)";
  EXPECT_FALSE(PortTakenHere("not-an-ip", port));
  ::close(fd);
  EXPECT_FALSE(PortTakenHere("127.0.0.1", port));
}

}  // namespace
}  // namespace fedgate::gateway
