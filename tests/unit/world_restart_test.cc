// The world-restart verdict (recovery: replace) as a pure function: when a
// restart starts, how it moves through its stages, what it asks to send,
// and when the job falls back to a new attempt.
#include "federation/world_restart.h"

#include <gtest/gtest.h>

#include "federation/job_spec.h"

namespace fedgate::federation {
namespace {

using Answers = std::vector<absl::StatusOr<v1::SliceStatusResponse>>;
using State = v1::SliceStatusResponse;
using Stage = v1::Replacement;

constexpr int64_t kLease = 3000;

v1::SliceStatusResponse Slice(State::State s, bool held = false, bool parked = false,
                              std::vector<uint64_t> steps = {}) {
  v1::SliceStatusResponse r;
  r.set_state(s);
  r.set_held(held);
  r.set_parked(parked);
  for (auto n : steps) r.add_checkpoint_steps(n);
  return r;
}

class WorldRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.set_gpus(4);
    spec_.add_command("train");
    spec_.set_recovery("replace");
    spec_.mutable_checkpoint()->set_keep(2);
    spec_ = WithDefaults(spec_);
    run_.set_epoch(100);
    run_.set_world_size(4);
    for (const char* s : {"b", "c"}) {
      auto* site = run_.add_sites();
      site->set_site(s);
      for (int i = 0; i < 2; ++i) site->add_ranks()->set_rank(run_.sites_size() * 2 - 2 + i);
    }
  }
  WorldVerdict Judge(const Answers& a, int64_t now) {
    return JudgeWorld(spec_, now, kLease, 60'000, a, &last_ok_, gbps_, &run_);
  }
  v1::JobSpec spec_;
  v1::RunPlan run_;
  std::map<std::string, int64_t> last_ok_;
  std::function<double(const std::string&, const std::string&)> gbps_ =
      [](const std::string& from, const std::string&) { return from == "c" ? 10.0 : 1.0; };
};

TEST_F(WorldRestartTest, AHealthyWorldRunsOnAndEndsWhenEverySliceSucceeded) {
  auto v = Judge({Slice(State::RUNNING), Slice(State::RUNNING)}, 1000);
  EXPECT_EQ(v.kind, WorldVerdict::kRunning);
  EXPECT_FALSE(run_.has_replacing());
  v = Judge({Slice(State::SUCCEEDED), Slice(State::SUCCEEDED)}, 2000);
  EXPECT_EQ(v.kind, WorldVerdict::kSucceeded);
}

TEST_F(WorldRestartTest, ASilentSiteIsLostOnlyPastTheLeaseThenItsSliceIsReplaced) {
  Judge({Slice(State::RUNNING), Slice(State::RUNNING)}, 1000);
  auto v = Judge({Slice(State::RUNNING), absl::UnavailableError("down")}, 3500);
  EXPECT_FALSE(run_.has_replacing()) << "2.5 s of silence is within the lease";
  EXPECT_EQ(v.worst_gap_ms, 2500) << "site b answered 2.5 s after its last answer";
  v = Judge({Slice(State::RUNNING), absl::UnavailableError("down")}, 4100);
  ASSERT_TRUE(run_.has_replacing());
  EXPECT_TRUE(v.changed);
  EXPECT_EQ(run_.replacing().why(), "site c unreachable");
  EXPECT_EQ(v.halt, std::vector<int>{0}) << "the survivor's ranks stop, its GPUs stay";
  EXPECT_EQ(run_.replacing().stage(), Stage::STOPPING);
  // The survivor parks: every slice is ready or lost, so reserving starts.
  v = Judge({Slice(State::FAILED, true, true, {8}), absl::UnavailableError("down")}, 4300);
  EXPECT_EQ(run_.replacing().stage(), Stage::RESERVING);
  EXPECT_EQ(std::vector<std::string>(run_.replacing().lost_sites().begin(),
                                     run_.replacing().lost_sites().end()),
            std::vector<std::string>{"c"});
  EXPECT_TRUE(v.wake_placer);
  EXPECT_NE(v.status.find("replacing slice of c (site c unreachable): reserving"),
            std::string::npos)
      << v.status;
}

TEST_F(WorldRestartTest, OneLossIsOneRestartEvenWhenTheSurvivorsRanksFailToo) {
  // The survivor's ranks fail first (their collective lost its peers).
  auto v = Judge({Slice(State::FAILED, true, false), absl::UnavailableError("down")}, 1000);
  ASSERT_TRUE(run_.has_replacing());
  EXPECT_EQ(run_.replacing().stage(), Stage::STOPPING) << "waits for the silent site";
  EXPECT_TRUE(v.halt.empty());
  v = Judge({Slice(State::FAILED, true, true), absl::UnavailableError("down")}, 2000);
  EXPECT_EQ(run_.replacing().stage(), Stage::STOPPING) << "still within the lease";
  v = Judge({Slice(State::FAILED, true, true), absl::UnavailableError("down")}, 4100);
  EXPECT_EQ(run_.replacing().stage(), Stage::RESERVING);
  EXPECT_EQ(run_.replacing().lost_sites_size(), 1);
  EXPECT_EQ(run_.restart(), 0u) << "the restart counts when the new world starts";
}

TEST_F(WorldRestartTest, AFailedRankRestartsInPlaceAfterTheNewestCheckpointIsEverywhere) {
  Judge({Slice(State::FAILED, true, false), Slice(State::RUNNING)}, 1000);
  ASSERT_TRUE(run_.has_replacing());
  auto v = Judge({Slice(State::FAILED, true, true, {4, 8}), Slice(State::FAILED, true, true, {4, 8, 12})},
                 1500);
  EXPECT_EQ(run_.replacing().stage(), Stage::CHECKPOINT);
  EXPECT_EQ(run_.replacing().lost_sites_size(), 0) << "nothing lost: restart where it is";
  EXPECT_EQ(run_.replacing().checkpoint_step(), 12u) << "the newest any site holds";
  ASSERT_EQ(v.copy_to.size(), 1u);
  EXPECT_EQ(v.copy_to.at("c"), std::vector<std::string>{"b"});
  v = Judge({Slice(State::FAILED, true, true, {8, 12}), Slice(State::FAILED, true, true, {8, 12})},
            2000);
  EXPECT_EQ(run_.replacing().stage(), Stage::RELAUNCH);
  EXPECT_TRUE(v.wake_placer);
  EXPECT_TRUE(v.copy_to.empty());
}

TEST_F(WorldRestartTest, TheFastestHolderCopiesTheCheckpoint) {
  auto* d = run_.add_sites();
  d->set_site("d");
  run_.mutable_replacing()->set_stage(Stage::CHECKPOINT);
  run_.mutable_replacing()->set_since_unix_ms(1000);
  gbps_ = [](const std::string& from, const std::string& to) {
    return from == "b" && to == "d" ? 5.0 : 1.0;
  };
  auto v = Judge({Slice(State::FAILED, true, true, {12}), Slice(State::FAILED, true, true, {12}),
                  Slice(State::HELD, true, true)},
                 1500);
  ASSERT_EQ(v.copy_to.size(), 1u);
  EXPECT_EQ(v.copy_to.at("b"), std::vector<std::string>{"d"});
}

TEST_F(WorldRestartTest, AGpuFailureLosesTheSliceAndNoCheckpointGoesStraightToRelaunch) {
  spec_.clear_checkpoint();
  auto failed = Slice(State::FAILED);  // its GPUs freed by the site
  failed.set_message("GPU 1 failed its health check");
  Judge({Slice(State::RUNNING), failed}, 1000);
  ASSERT_TRUE(run_.has_replacing());
  EXPECT_EQ(run_.replacing().why(), "site c: GPU 1 failed its health check");
  Judge({Slice(State::FAILED, true, true), failed}, 1200);
  EXPECT_EQ(run_.replacing().stage(), Stage::RESERVING);
  run_.mutable_replacing()->clear_lost_sites();
  run_.mutable_replacing()->set_stage(Stage::RELAUNCH);
  run_.mutable_sites(1)->set_site("d");
  auto v = Judge({Slice(State::FAILED, true, true), Slice(State::HELD, true, true)}, 1400);
  EXPECT_EQ(run_.replacing().stage(), Stage::RELAUNCH);
  EXPECT_TRUE(v.wake_placer);
}

TEST_F(WorldRestartTest, ASurvivorLostWhileReservingIsReplacedToo) {
  run_.mutable_replacing()->set_stage(Stage::CHECKPOINT);
  run_.mutable_replacing()->set_since_unix_ms(1000);
  auto v = Judge({Slice(State::UNKNOWN), Slice(State::FAILED, true, true)}, 1500);
  EXPECT_EQ(run_.replacing().stage(), Stage::RESERVING);
  EXPECT_EQ(run_.replacing().lost_sites(0), "b");
  EXPECT_TRUE(v.changed);
}

TEST_F(WorldRestartTest, AfterItsReplacementsOrPastTheTimeoutTheJobFallsBack) {
  run_.set_restart(3);  // max_replacements defaults to 3
  auto v = Judge({Slice(State::RUNNING), absl::UnavailableError("down")}, 1000);
  v = Judge({Slice(State::RUNNING), absl::UnavailableError("down")}, 4100);
  EXPECT_EQ(v.kind, WorldVerdict::kFallBack);
  EXPECT_EQ(v.bad_site, "c");
  EXPECT_NE(v.reason.find("used its 3 replacement(s)"), std::string::npos) << v.reason;

  run_.set_restart(0);
  run_.mutable_replacing()->set_stage(Stage::RESERVING);
  run_.mutable_replacing()->set_since_unix_ms(5000);
  v = Judge({Slice(State::FAILED, true, true), Slice(State::UNKNOWN)}, 64'000);
  EXPECT_EQ(v.kind, WorldVerdict::kRunning);
  v = Judge({Slice(State::FAILED, true, true), Slice(State::UNKNOWN)}, 65'001);
  EXPECT_EQ(v.kind, WorldVerdict::kFallBack);
  EXPECT_NE(v.reason.find("replace_timeout"), std::string::npos) << v.reason;
}

TEST_F(WorldRestartTest, APreemptedSliceIsAPreemptionNotAReplacement) {
  auto p = Slice(State::FAILED);
  p.set_preempted_by("j-1");
  auto v = Judge({Slice(State::RUNNING), p}, 1000);
  EXPECT_EQ(v.kind, WorldVerdict::kPreempted);
  EXPECT_EQ(v.preempted_by, "j-1");
}

TEST_F(WorldRestartTest, TheReplacementSliceKeepsTheLostRankNumbersOnItsHeldGpus) {
  v1::SiteRun lost;
  lost.set_site("c");
  for (uint32_t r : {3u, 2u}) {
    auto* k = lost.add_ranks();
    k->set_rank(r);
    k->set_group_rank(1);
  }
  v1::PlanResponse plan;
  plan.add_sites("d");
  auto* sl = plan.add_slices();
  sl->set_site("d");
  sl->set_node("d-n1");
  sl->set_gpus(2);
  v1::PrepareResponse held;
  auto* h = held.add_holds();
  h->set_node("d-n1");
  h->add_indices(5);
  h->add_indices(7);
  const v1::SiteRun out = ReplacementSite(lost, plan, held, 777);
  EXPECT_EQ(out.site(), "d");
  EXPECT_EQ(out.epoch(), 777u);
  ASSERT_EQ(out.ranks_size(), 2);
  EXPECT_EQ(out.ranks(0).rank(), 2u);
  EXPECT_EQ(out.ranks(1).rank(), 3u);
  EXPECT_EQ(out.ranks(0).gpu(), 5u);
  EXPECT_EQ(out.ranks(1).gpu(), 7u);
  EXPECT_EQ(out.ranks(1).local_rank(), 1u);
  EXPECT_EQ(out.ranks(1).local_world_size(), 2u);
  EXPECT_EQ(out.ranks(0).node(), "d-n1");
  EXPECT_EQ(out.ranks(0).group_rank(), 1u);
}

TEST_F(WorldRestartTest, SiteEpochFallsBackToTheRunsEpoch) {
  run_.mutable_sites(1)->set_epoch(250);
  EXPECT_EQ(SiteEpoch(run_, 0), 100u);
  EXPECT_EQ(SiteEpoch(run_, 1), 250u);
}

}  // namespace
}  // namespace fedgate::federation
