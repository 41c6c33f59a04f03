// The participant's side of governance on a FakeClock: victims are chosen
// only past preemption.min_runtime, get the deadline in their preempt file
// and SIGTERM, and their GPUs are kept for the preemptor; a quota-only
// prepare at the home site holds quota and its lease frees it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "gateway/jobs/participant.h"
#include "gateway/store/store.h"
#include "tests/support/fake_clock.h"
#include "tests/support/site_config.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using testing::FakeClock;

v1::ReservationKey Key(const std::string& job, uint64_t epoch) {
  v1::ReservationKey k;
  k.set_job_id(job);
  k.set_attempt(1);
  k.set_epoch(epoch);
  return k;
}

class ParticipantGovernanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::OneNodeSite("site-a", tmp_.path(), 4, "127.0.0.1");
    config_.preemption.grace_ms = 1000;
    config_.preemption.min_runtime_ms = 60'000;
    config_.tenants = {{"vision", 4, {}, 0, 1}};
  }
  v1::PrepareRequest Ask(const std::string& job, uint64_t epoch, uint32_t gpus, bool preempt) {
    v1::PrepareRequest r;
    *r.mutable_key() = Key(job, epoch);
    r.set_tenant("t");
    r.add_nodes()->set_node("n1");
    r.mutable_nodes(0)->set_gpus(gpus);
    r.set_hold_ttl_ms(30'000);
    r.set_preempt(preempt);
    return r;
  }
  v1::CommitRequest Run(const std::string& job, uint64_t epoch, uint32_t gpus, bool preemptible) {
    v1::CommitRequest c;
    *c.mutable_key() = Key(job, epoch);
    for (uint32_t i = 0; i < gpus; ++i) {
      auto* r = c.add_ranks();
      r->set_rank(i);
      r->set_local_rank(i);
      r->set_local_world_size(gpus);
      r->set_node("n1");
    }
    c.set_world_size(gpus);
    c.set_master_addr("127.0.0.1");
    c.set_master_port(29500);
    c.add_command("sleep");
    c.add_command("30");
    c.set_lease_ms(600'000);
    c.set_preemptible(preemptible);
    return c;
  }

  testing::TempDir tmp_;
  Config config_;
  FakeClock clock_;
};

TEST_F(ParticipantGovernanceTest, PreemptsOnlyOldEnoughSpotSlicesAndKeepsTheirGpus) {
  Participant p(config_, &clock_, nullptr);
  const std::string spot = "j-000000000000000a", young = "j-000000000000000b";
  const std::string guaranteed = "j-000000000000000c", other = "j-000000000000000d";
  ASSERT_TRUE(p.Prepare("sh", Ask(spot, 1, 3, false)).ok());
  ASSERT_TRUE(p.Commit("sh", Run(spot, 1, 3, true)).ok());
  clock_.Advance(61'000);
  ASSERT_TRUE(p.Prepare("sh", Ask(young, 1, 1, false)).ok());
  ASSERT_TRUE(p.Commit("sh", Run(young, 1, 1, true)).ok());
  EXPECT_EQ(p.NodeExtras()["n1"].preemptible, 3u) << "the young slice is not offered";

  // Needs all 4: only 3 are preemptible (the 1-GPU slice is too young).
  auto refused = p.Prepare("bj", Ask(guaranteed, 1, 4, true));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  // Needs 3: the old spot slice goes.
  auto pre = p.Prepare("bj", Ask(guaranteed, 2, 3, true));
  ASSERT_EQ(pre.status().code(), absl::StatusCode::kUnavailable) << pre.status();
  EXPECT_NE(pre.status().message().find("preempting 1 slice(s) (" + spot + ")"), std::string::npos)
      << pre.status();
  const std::string file = tmp_ / ("work/" + spot + "/.fedgate-preempt-1-0");
  EXPECT_EQ(std::stoll(testing::ReadText(file)), (clock_.NowMs() + 1000) / 1000)
      << "the deadline: now + grace, Unix seconds";
  v1::SliceStatusRequest sq;
  *sq.mutable_key() = Key(spot, 1);
  sq.set_lease_ms(600'000);
  auto st = p.Status("sh", sq);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state(), v1::SliceStatusResponse::FAILED);
  EXPECT_EQ(st->preempted_by(), guaranteed);
  EXPECT_EQ(p.NodeExtras()["n1"].kept_for[guaranteed], 3u);
  // The victim's ranks exit on SIGTERM; their GPUs are kept for the preemptor.
  for (int i = 0; i < 100 && p.FreeGpus()["n1"] == 0 && p.NodeExtras()["n1"].kept_for.size() == 1;
       ++i) {
    p.Sweep();
    auto waiting = p.Prepare("bj", Ask(guaranteed, 3 + i, 3, true));
    if (waiting.ok()) break;
    EXPECT_NE(waiting.status().message().find("waiting for 1 preempted slice(s)"), std::string::npos)
        << waiting.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(p.Prepare("xx", Ask(other, 1, 1, false)).status().code(),
            absl::StatusCode::kResourceExhausted)
      << "nobody else gets the freed GPUs";
  auto got = p.Prepare("bj", Ask(guaranteed, 500, 3, false));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(p.NodeExtras()["n1"].kept_for.empty());
  p.Stop();
}

// What the site's ad says besides free GPUs: failed GPUs and cordons, as
// counts for every site's capacity view.
TEST_F(ParticipantGovernanceTest, AdExtrasCarryUnhealthyGpusAndCordons) {
  Participant p(config_, &clock_, nullptr);
  EXPECT_EQ(p.NodeExtras()["n1"].unhealthy, 0u);
  EXPECT_FALSE(p.NodeExtras()["n1"].cordoned);
  p.SetUnhealthy({{"n1", {0, 2}}}, {});
  ASSERT_TRUE(p.SetCordoned("n1", true).ok());
  EXPECT_EQ(p.NodeExtras()["n1"].unhealthy, 2u);
  EXPECT_TRUE(p.NodeExtras()["n1"].cordoned);
  p.SetUnhealthy({}, {});
  ASSERT_TRUE(p.SetCordoned("n1", false).ok());
  EXPECT_EQ(p.NodeExtras()["n1"].unhealthy, 0u);
  EXPECT_FALSE(p.NodeExtras()["n1"].cordoned);
}

TEST_F(ParticipantGovernanceTest, QuotaOnlyPrepareHoldsQuotaUntilItsLeaseLapses) {
  Participant p(config_, &clock_, nullptr);
  auto quota = [&](const std::string& job, uint64_t epoch, uint32_t gpus) {
    v1::PrepareRequest r;
    *r.mutable_key() = Key(job, epoch);
    r.set_tenant("vision");
    (*r.mutable_quota_gpus())["A100"] = gpus;
    r.set_hold_ttl_ms(30'000);
    return p.Prepare("bj", r);
  };
  auto a = quota("j-00000000000000a1", 1, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->quota_class(), "guaranteed");
  EXPECT_TRUE(a->holds().empty()) << "no GPUs asked, none held";
  auto b = quota("j-00000000000000a2", 1, 2);
  ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("waiting for quota"), std::string::npos);
  v1::CommitRequest c;
  *c.mutable_key() = Key("j-00000000000000a1", 1);
  c.add_command("x");
  c.set_world_size(1);
  c.set_master_port(1);
  c.set_lease_ms(5000);
  ASSERT_TRUE(p.Commit("bj", c).ok()) << "a commit without ranks commits the quota hold";
  EXPECT_EQ(p.Quotas()[0].used_gpus(), 3u);
  v1::SliceStatusRequest sq;
  *sq.mutable_key() = Key("j-00000000000000a1", 1);
  sq.set_lease_ms(5000);
  auto st = p.Status("bj", sq);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state(), v1::SliceStatusResponse::RUNNING);
  clock_.Advance(5001);
  p.Sweep();
  EXPECT_EQ(p.Quotas()[0].used_gpus(), 0u) << "the lease lapsed: the coordinator went silent";
  EXPECT_TRUE(quota("j-00000000000000a2", 2, 2).ok());
}

// A committed quota hold is one stored row: a restart restores it, and once
// its lease lapsed the sweep deletes the row. The single record of older
// versions is read once and replaced by rows.
TEST_F(ParticipantGovernanceTest, CommittedQuotaHoldsSurviveARestartUntilTheirLeaseLapses) {
  auto store = Store::Open(tmp_ / "data");
  ASSERT_TRUE(store.ok()) << store.status();
  {
    v1::QuotaHoldRecords old;
    auto* r = old.add_holds();
    *r->mutable_key() = Key("j-00000000000000b1", 7);
    r->set_coordinator("bj");
    r->set_tenant("vision");
    (*r->mutable_gpus())["A100"] = 1;
    r->set_committed(true);
    ASSERT_TRUE((*store)->PutKv("quota_holds", old.SerializeAsString()).ok());
  }
  auto commit_quota = [&](Participant& p, const std::string& job, uint32_t gpus) {
    v1::PrepareRequest r;
    *r.mutable_key() = Key(job, 1);
    r.set_tenant("vision");
    (*r.mutable_quota_gpus())["A100"] = gpus;
    r.set_hold_ttl_ms(30'000);
    ASSERT_TRUE(p.Prepare("bj", r).ok());
    v1::CommitRequest c;
    *c.mutable_key() = Key(job, 1);
    c.add_command("x");
    c.set_world_size(1);
    c.set_master_port(1);
    c.set_lease_ms(5000);
    ASSERT_TRUE(p.Commit("bj", c).ok());
  };
  {
    Participant p(config_, &clock_, store->get());
    p.Start();
    EXPECT_EQ(p.Quotas()[0].used_gpus(), 1u) << "the old single record was read";
    commit_quota(p, "j-00000000000000b2", 2);
    EXPECT_EQ(p.Quotas()[0].used_gpus(), 3u);
  }
  EXPECT_FALSE((*store)->GetKv("quota_holds")->has_value());
  EXPECT_EQ((*store)->ListKv("quota_hold/")->size(), 2u);
  {
    Participant p(config_, &clock_, store->get());
    p.Start();
    EXPECT_EQ(p.Quotas()[0].used_gpus(), 3u) << "both holds restored";
    // Restored holds get a fresh lease (at least 2 x jobs.lease; b2 had 5 s);
    // nobody renews them.
    clock_.Advance(std::max<int64_t>(2 * config_.jobs.lease_ms, 5000) + 1);
    p.Sweep();
    EXPECT_EQ(p.Quotas()[0].used_gpus(), 0u);
  }
  EXPECT_EQ((*store)->ListKv("quota_hold/")->size(), 0u) << "released holds' rows are deleted";
  Participant p(config_, &clock_, store->get());
  p.Start();
  EXPECT_EQ(p.Quotas()[0].used_gpus(), 0u);
}

}  // namespace
}  // namespace fedgate::gateway
