// The coordinator's verdicts as pure functions (federation/round_verdict):
// what a prepare round's answers and a renewal pass's slice states mean.
#include "federation/round_verdict.h"

#include <gtest/gtest.h>

namespace fedgate::federation {
namespace {

using SliceState = v1::SliceStatusResponse;

v1::RunPlan TwoSites(const std::string& quota_site = "") {
  v1::RunPlan run;
  run.set_epoch(1'000'000);
  run.set_world_size(3);
  run.set_quota_site(quota_site);
  for (const auto& [site, ranks] : {std::pair<std::string, int>{"bj", 2}, {"sh", 1}}) {
    auto* s = run.add_sites();
    s->set_site(site);
    for (int i = 0; i < ranks; ++i) s->add_ranks()->set_node(site + "-n1");
  }
  return run;
}

v1::PrepareRequest Ask(const std::string& node, uint32_t gpus) {
  v1::PrepareRequest r;
  auto* n = r.add_nodes();
  n->set_node(node);
  n->set_gpus(gpus);
  return r;
}

v1::PrepareResponse Held(const std::string& node, std::vector<uint32_t> idx, uint32_t port = 0) {
  v1::PrepareResponse r;
  auto* h = r.add_holds();
  h->set_node(node);
  for (uint32_t i : idx) h->add_indices(i);
  r.set_master_port(port);
  return r;
}

SliceState Slice(SliceState::State st, const std::string& by = "") {
  SliceState s;
  s.set_state(st);
  s.set_preempted_by(by);
  return s;
}

TEST(JudgePrepare, EveryHoldGivesEachRankItsGpuAndTheFirstSiteThePort) {
  auto run = TwoSites();
  const auto v = JudgePrepare({Ask("bj-n1", 2), Ask("sh-n1", 1)},
                              {Held("bj-n1", {5, 3}, 29511), Held("sh-n1", {0}, 29999)}, -1, "",
                              &run);
  EXPECT_TRUE(v.failed.empty()) << v.failed;
  EXPECT_EQ(run.master_port(), 29511u);
  EXPECT_EQ(run.sites(0).ranks(0).gpu(), 5u);
  EXPECT_EQ(run.sites(0).ranks(1).gpu(), 3u);
  EXPECT_EQ(run.sites(1).ranks(0).gpu(), 0u);
}

TEST(JudgePrepare, AWrongAnswerOrARefusalFailsTheRound) {
  auto run = TwoSites();
  auto twice = JudgePrepare({Ask("bj-n1", 2), Ask("sh-n1", 1)},
                            {Held("bj-n1", {1, 1}), Held("sh-n1", {0})}, -1, "", &run);
  EXPECT_NE(twice.failed.find("reservation failed at bj: GPU bj-n1/1 returned twice"),
            std::string::npos)
      << twice.failed;
  auto refused = JudgePrepare({Ask("bj-n1", 2), Ask("sh-n1", 1)},
                              {Held("bj-n1", {0, 1}), absl::ResourceExhaustedError("no GPUs")}, -1,
                              "", &run);
  EXPECT_EQ(refused.failed, "reservation failed at sh: no GPUs; will retry");
  auto preempting = JudgePrepare(
      {Ask("bj-n1", 2), Ask("sh-n1", 1)},
      {Held("bj-n1", {0, 1}), absl::UnavailableError("preempting 1 slice(s) (j-1)")}, -1, "", &run);
  EXPECT_EQ(preempting.failed, "preempting at sh: preempting 1 slice(s) (j-1)");
}

TEST(JudgePrepare, AQuotaOnlyHomeDecidesTheClassAndCanRefuse) {
  auto run = TwoSites("home");
  v1::PrepareResponse quota;
  quota.set_quota_class("borrowed");
  auto ok = JudgePrepare({Ask("bj-n1", 2), Ask("sh-n1", 1), {}},
                         {Held("bj-n1", {0, 1}), Held("sh-n1", {0}), quota}, 2, "home", &run);
  EXPECT_TRUE(ok.failed.empty()) << ok.failed;
  EXPECT_TRUE(run.borrowed());
  auto no = JudgePrepare({Ask("bj-n1", 2), Ask("sh-n1", 1), {}},
                         {Held("bj-n1", {0, 1}), Held("sh-n1", {0}),
                          absl::ResourceExhaustedError("waiting for quota: tenant t holds 8")},
                         2, "home", &run);
  EXPECT_EQ(no.failed, "waiting for quota: tenant t holds 8");
}

TEST(JudgeRenewal, RunningSucceededAndRecommit) {
  const auto run = TwoSites();
  std::map<std::string, int64_t> seen;
  v1::JobSpec spec;
  auto v = JudgeRenewal(spec, 1, run, {Slice(SliceState::RUNNING), Slice(SliceState::HELD)},
                        2'000'000, 5000, &seen);
  EXPECT_EQ(v.kind, RenewVerdict::kRunning);
  EXPECT_EQ(v.recommit, std::vector<int>{1});
  EXPECT_EQ(seen.at("bj"), 2'000'000);
  v = JudgeRenewal(spec, 1, run, {Slice(SliceState::SUCCEEDED), Slice(SliceState::SUCCEEDED)},
                   2'001'000, 5000, &seen);
  EXPECT_EQ(v.kind, RenewVerdict::kSucceeded);
  EXPECT_EQ(v.reason, "all 3 rank(s) exited 0 on 2 site(s)");
  EXPECT_EQ(v.worst_gap_ms, 1000);
}

TEST(JudgeRenewal, ASiteSilentPastTheLeaseFailsTheJobAndIsAvoided) {
  const auto run = TwoSites();
  std::map<std::string, int64_t> seen = {{"bj", 1'000'000}, {"sh", 1'000'000}};
  v1::JobSpec spec;
  auto v = JudgeRenewal(spec, 1, run, {Slice(SliceState::RUNNING), absl::UnavailableError("down")},
                        1'004'000, 5000, &seen);
  EXPECT_EQ(v.kind, RenewVerdict::kRunning) << "silent, but within the lease";
  v = JudgeRenewal(spec, 1, run, {Slice(SliceState::RUNNING), absl::UnavailableError("down")},
                   1'006'000, 5000, &seen);
  EXPECT_EQ(v.kind, RenewVerdict::kFailed);
  EXPECT_EQ(v.bad_site, "sh");
  EXPECT_EQ(v.reason, "site sh silent for 6 s: down");
}

TEST(JudgeRenewal, PreemptionFailedRanksTimeLimitAndALostQuotaHold) {
  auto run = TwoSites();
  std::map<std::string, int64_t> seen;
  v1::JobSpec spec;
  auto v = JudgeRenewal(spec, 1, run,
                        {Slice(SliceState::RUNNING), Slice(SliceState::FAILED, "j-boss")},
                        2'000'000, 5000, &seen);
  EXPECT_EQ(v.kind, RenewVerdict::kPreempted);
  EXPECT_EQ(v.preempted_at, "sh");
  EXPECT_EQ(v.preempted_by, "j-boss");
  SliceState failed = Slice(SliceState::FAILED);
  failed.set_message("a rank failed");
  (*failed.mutable_exit_codes())[2] = 3;
  v = JudgeRenewal(spec, 1, run, {Slice(SliceState::RUNNING), failed}, 2'000'000, 5000, &seen);
  EXPECT_EQ(v.kind, RenewVerdict::kFailed);
  EXPECT_EQ(v.reason, "site sh: a rank failed (rank 2 exit 3)");
  EXPECT_TRUE(v.bad_site.empty()) << "a failed rank says nothing against its site";
  spec.set_time_limit("10s");
  v = JudgeRenewal(spec, 2, run, {Slice(SliceState::RUNNING), Slice(SliceState::RUNNING)},
                   1'011'000, 5000, &seen);
  EXPECT_EQ(v.kind, RenewVerdict::kTimeLimit);
  EXPECT_EQ(v.reason, "stopped: attempt 2 ran past its time_limit of 10s");
  spec.clear_time_limit();
  run.set_quota_site("home");
  v = JudgeRenewal(spec, 1, run,
                   {Slice(SliceState::RUNNING), Slice(SliceState::RUNNING),
                    Slice(SliceState::UNKNOWN)},
                   2'000'000, 5000, &seen);
  EXPECT_EQ(v.kind, RenewVerdict::kFailed);
  EXPECT_EQ(v.reason, "the quota hold at home site home was lost");
  v = JudgeRenewal(spec, 1, run,
                   {Slice(SliceState::RUNNING), Slice(SliceState::RUNNING),
                    Slice(SliceState::HELD)},
                   2'000'000, 5000, &seen);
  EXPECT_EQ(v.kind, RenewVerdict::kRunning);
  EXPECT_TRUE(v.recommit_quota);
}

}  // namespace
}  // namespace fedgate::federation
