#include "federation/scheduler.h"

#include <gtest/gtest.h>

#include <random>

namespace fedgate::federation {
namespace {

constexpr int64_t kMin = 60 * 1000;

SchedJob J(const std::string& id, uint32_t gpus, int64_t est_min, int64_t submitted_min = 0,
           bool spot = false, const std::string& tenant = "t") {
  return {id, tenant, gpus, est_min * kMin, spot, submitted_min * kMin, {}};
}

// Starts a job when `free` (the caller's own copy) has room.
Scheduler::TryStart Starter(GpusByModel* free) {
  return [free](const SchedJob& j) -> std::optional<GpusByModel> {
    if ((*free)["A100"] < j.gpus) return std::nullopt;
    (*free)["A100"] -= j.gpus;
    return GpusByModel{{"A100", j.gpus}};
  };
}

// 8 GPUs, 6 busy until minute 60. Queue: big (8 GPUs), then small ones.
struct Scene {
  GpusByModel free{{"A100", 2}};
  std::vector<RunningJob> running{{60 * kMin, {{"A100", 6}}}};
};

TEST(Scheduler, FifoBlocksBehindTheHeadSjfStartsWhatFitsFedgateBackfillsOnlyWhatEndsInTime) {
  auto fill = [](Scheduler& s) {
    s.Enqueue(J("big", 8, 30, 0));
    s.Enqueue(J("short", 2, 20, 1));   // ends at 20 < 60: safe to backfill
    s.Enqueue(J("long", 1, 600, 2));   // ends after 60: would delay big
  };
  {
    Scheduler fifo(SchedPolicy::kFifo);
    fill(fifo);
    Scene sc;
    auto r = fifo.Pass(0, sc.free, sc.running, Starter(&sc.free));
    EXPECT_TRUE(r.started.empty()) << "head-of-line blocking";
  }
  {
    Scheduler sjf(SchedPolicy::kSjf);
    fill(sjf);
    Scene sc;
    auto r = sjf.Pass(0, sc.free, sc.running, Starter(&sc.free));
    // per-GPU: big 3.75, short 10, long 600 -> big cannot start, short takes both GPUs.
    EXPECT_EQ(r.started, (std::vector<std::string>{"short"}));
  }
  {
    Scheduler fg(SchedPolicy::kFedgate, /*aging_factor=*/0);
    fill(fg);
    Scene sc;
    sc.free["A100"] = 3;
    sc.running = {{60 * kMin, {{"A100", 5}}}};
    auto r = fg.Pass(0, sc.free, sc.running, Starter(&sc.free));
    ASSERT_TRUE(r.reserved_for.has_value());
    EXPECT_EQ(*r.reserved_for, "big");
    EXPECT_EQ(r.reserved_at_ms, 60 * kMin);
    EXPECT_EQ(r.started, (std::vector<std::string>{"short"})) << "ends before the reservation";
    EXPECT_EQ(r.held_back, (std::vector<std::string>{"long"}))
        << "1 free GPU fits it, but it would still hold it at minute 60";
    EXPECT_EQ(fg.size(), 2u);
  }
}

TEST(Scheduler, SpareGpusAtTheReservationMayBeBackfilledWithLongJobs) {
  Scheduler fg(SchedPolicy::kFedgate, 0);
  fg.Enqueue(J("big", 6, 30, 0));
  fg.Enqueue(J("long", 2, 600, 1));
  GpusByModel free{{"A100", 2}};
  // 8 GPUs: at minute 60, 2 free + 6 released = 8 for a 6-GPU head: 2 spare.
  auto r = fg.Pass(0, free, {{60 * kMin, {{"A100", 6}}}}, Starter(&free));
  EXPECT_EQ(r.started, (std::vector<std::string>{"long"}));
  EXPECT_EQ(r.reserved_at_ms, 60 * kMin);
}

TEST(Scheduler, GuaranteedBeforeSpotAgingAndFairShareTies) {
  Scheduler fg(SchedPolicy::kFedgate, 1.0);
  fg.Enqueue(J("spot-tiny", 1, 1, 0, /*spot=*/true));
  fg.Enqueue(J("g-long", 1, 100, 0));
  fg.Enqueue(J("g-short", 1, 10, 50));
  // Score at any time: per-GPU minutes + submit minute: g-long 100, g-short 60.
  EXPECT_EQ(fg.Order(0), (std::vector<std::string>{"g-short", "g-long", "spot-tiny"}));
  fg.Enqueue(J("g-older", 1, 100, -45));  // waited 45 minutes more: 55 < 60
  EXPECT_EQ(fg.Order(0)[0], "g-older") << "aging credit";

  Scheduler tie(SchedPolicy::kFedgate, 1.0);
  tie.Enqueue(J("a-job", 2, 10, 0, false, "heavy"));
  tie.Enqueue(J("b-job", 2, 10, 0, false, "light"));
  FairShare share(3600 * 1000);
  share.Add("heavy", 1000, 0);
  share.Add("light", 10, 0);
  EXPECT_EQ(tie.Order(0, &share), (std::vector<std::string>{"b-job", "a-job"}));
  share.SetWeight("heavy", 1000);  // a big weight: 1 per unit of weight
  EXPECT_EQ(tie.Order(0, &share), (std::vector<std::string>{"a-job", "b-job"}));
  EXPECT_NEAR(share.Usage("light", 3600 * 1000), 5, 1e-9) << "one half-life later";
}

TEST(Scheduler, FairShareAddsInAnyOrderAndWeighs) {
  // Reloaded after a restart, ended jobs come in any order: the result is
  // the same as adding them as they ended.
  FairShare in_order(1000), reversed(1000);
  in_order.Add("t", 8, 0 + 1);
  in_order.Add("t", 8, 1000 + 1);
  reversed.Add("t", 8, 1000 + 1);
  reversed.Add("t", 8, 0 + 1);
  EXPECT_NEAR(in_order.Usage("t", 2001), 8 * 0.25 + 8 * 0.5, 1e-9);
  EXPECT_NEAR(reversed.Usage("t", 2001), in_order.Usage("t", 2001), 1e-9);
  reversed.SetWeight("t", 2);
  EXPECT_NEAR(reversed.Usage("t", 2001), 3, 1e-9) << "usage per weight";
}

// Randomised: whatever the queue, EASY backfill never pushes the head job's
// earliest start past its reservation: at the reserved time, the GPUs free
// then (now free, plus whatever old or backfilled job ends by then) still
// hold the head job.
TEST(Scheduler, BackfillNeverDelaysTheHeadsReservation) {
  std::mt19937_64 rng(20261201);
  int reserved = 0, backfilled_past_shadow = 0;
  for (int round = 0; round < 3000; ++round) {
    const uint32_t capacity = 8 + rng() % 57;
    uint32_t busy = 0;
    std::vector<RunningJob> running;
    while (busy + 1 < capacity && rng() % 5 != 0) {
      const uint32_t g = std::min<uint32_t>(capacity - busy, 1 + rng() % 8);
      running.push_back({static_cast<int64_t>(1 + rng() % 600) * kMin, {{"A100", g}}});
      busy += g;
    }
    Scheduler fg(SchedPolicy::kFedgate, 0);
    std::map<std::string, SchedJob> queued;
    for (int i = 0; i < 12; ++i) {
      SchedJob j = J("j" + std::to_string(i), 1 + rng() % capacity, 1 + rng() % 900, i);
      queued[j.id] = j;
      fg.Enqueue(j);
    }
    GpusByModel free{{"A100", capacity - busy}};
    GpusByModel left = free;
    auto r = fg.Pass(0, free, running, Starter(&left));
    if (!r.reserved_for) continue;
    ++reserved;
    const SchedJob& head = queued.at(*r.reserved_for);
    const int64_t t = r.reserved_at_ms;
    uint32_t at_t = left["A100"];
    for (const auto& rj : running) at_t += rj.estimated_end_ms <= t ? rj.gpus.at("A100") : 0;
    bool started_head = false;
    for (const auto& id : r.started) {
      const SchedJob& sj = queued.at(id);
      started_head = started_head || id == head.id;
      if (sj.estimated_ms <= t) {
        at_t += sj.gpus;
      } else {
        ++backfilled_past_shadow;
      }
    }
    ASSERT_FALSE(started_head);
    ASSERT_GE(at_t, head.gpus) << "round " << round << ": head " << head.id << " (" << head.gpus
                               << " GPUs) reserved at " << t / kMin << " min finds only " << at_t;
  }
  EXPECT_GT(reserved, 300) << "the scenes must exercise reservations";
  EXPECT_GT(backfilled_past_shadow, 10) << "and backfill into spare GPUs past the reservation";
}

}  // namespace
}  // namespace fedgate::federation
