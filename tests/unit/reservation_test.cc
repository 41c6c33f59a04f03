#include "federation/reservation.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <set>

namespace fedgate::federation {
namespace {

constexpr int64_t kTtl = 10'000;
const HoldOwner kOwner{"coord", "vision", ""};

class LedgerTest : public ::testing::Test {
 protected:
  ReservationLedger ledger_{{{"n1", 8}, {"n2", 4}}};
};

TEST_F(LedgerTest, PrepareCommitReleaseMovesGpus) {
  auto h = ledger_.Prepare("j1", 1, 1, kOwner, {{"n1", 6}}, 0, kTtl);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->gpus[0].indices, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ledger_.FreeGpus("n1"), 2u);
  ASSERT_TRUE(ledger_.Commit("j1", 1, 1, "coord", 5).ok());
  EXPECT_TRUE(ledger_.ExpireHolds(kTtl * 10).empty()) << "committed holds never expire";
  auto other = ledger_.Prepare("j2", 1, 1, kOwner, {{"n1", 3}}, 0, kTtl);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ledger_.FreeGpus("n1"), 2u) << "a refused prepare changes nothing";
  ledger_.Release("j1", 1);
  EXPECT_EQ(ledger_.TotalFree(), 12u);
}

TEST_F(LedgerTest, DuplicatesAreIdempotent) {
  auto a = ledger_.Prepare("j1", 1, 3, kOwner, {{"n1", 2}, {"n2", 1}}, 0, kTtl);
  auto b = ledger_.Prepare("j1", 1, 3, kOwner, {{"n1", 2}, {"n2", 1}}, 100, kTtl);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->gpus[0].indices, b->gpus[0].indices);
  EXPECT_EQ(ledger_.TotalFree(), 9u) << "held once, not twice";
  ASSERT_TRUE(ledger_.Commit("j1", 1, 3, "coord", 200).ok());
  ASSERT_TRUE(ledger_.Commit("j1", 1, 3, "coord", 300).ok()) << "a duplicate commit";
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 3, kOwner, {{"n1", 2}, {"n2", 1}}, 400, kTtl).ok())
      << "a late duplicate prepare of the committed epoch";
  EXPECT_EQ(ledger_.holds().at({"j1", 3}).state, HoldState::kCommitted);
}

TEST_F(LedgerTest, StaleEpochsAreRefused) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 5, kOwner, {{"n1", 2}}, 0, kTtl).ok());
  EXPECT_EQ(ledger_.Prepare("j1", 1, 4, kOwner, {{"n1", 2}}, 0, kTtl).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_.Commit("j1", 1, 4, "coord", 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_.Abort("j1", 1, 4, "coord").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_.FreeGpus("n1"), 6u) << "the epoch-5 hold stands";
  // A newer epoch replaces the uncommitted hold without double counting.
  auto h = ledger_.Prepare("j1", 2, 6, kOwner, {{"n1", 8}}, 0, kTtl);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(ledger_.FreeGpus("n1"), 0u);
}

TEST_F(LedgerTest, ReorderedMessages) {
  // Commit before its prepare: nothing to commit.
  EXPECT_EQ(ledger_.Commit("j1", 1, 1, "coord", 0).status().code(), absl::StatusCode::kNotFound);
  // Abort before its prepare: the late prepare of that epoch is refused.
  ASSERT_TRUE(ledger_.Abort("j2", 1, 7, "coord").ok());
  EXPECT_EQ(ledger_.Prepare("j2", 1, 7, kOwner, {{"n1", 1}}, 0, kTtl).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_.TotalFree(), 12u);
  // Abort twice is fine.
  ASSERT_TRUE(ledger_.Prepare("j3", 1, 1, kOwner, {{"n2", 4}}, 0, kTtl).ok());
  ASSERT_TRUE(ledger_.Abort("j3", 1, 1, "coord").ok());
  ASSERT_TRUE(ledger_.Abort("j3", 1, 1, "coord").ok());
  EXPECT_EQ(ledger_.FreeGpus("n2"), 4u);
  EXPECT_EQ(ledger_.Commit("j3", 1, 1, "coord", 0).status().code(), absl::StatusCode::kNotFound)
      << "commit after abort";
}

TEST_F(LedgerTest, UncommittedHoldsExpire) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 1, kOwner, {{"n1", 4}}, 0, kTtl).ok());
  EXPECT_TRUE(ledger_.ExpireHolds(kTtl).empty()) << "still valid at the TTL";
  EXPECT_EQ(ledger_.ExpireHolds(kTtl + 1), (std::vector<std::string>{"j1"}));
  EXPECT_EQ(ledger_.TotalFree(), 12u);
  EXPECT_EQ(ledger_.Commit("j1", 1, 1, "coord", kTtl + 2).status().code(), absl::StatusCode::kNotFound);
  // A commit that arrives after the TTL but before the sweep also fails.
  ASSERT_TRUE(ledger_.Prepare("j2", 1, 1, kOwner, {{"n1", 4}}, 0, kTtl).ok());
  EXPECT_FALSE(ledger_.Commit("j2", 1, 1, "coord", kTtl + 1).ok());
  EXPECT_EQ(ledger_.TotalFree(), 12u);
}

TEST(Ledger, RandomMessageStormsNeverOverbook) {
  const unsigned seed = std::random_device{}();
  std::printf("[ seed ] reservation storm seed %u\n", seed);
  std::mt19937 rng(seed);
  ReservationLedger ledger({{"a", 8}, {"b", 8}, {"c", 4}});
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const char* nodes[] = {"a", "b", "c"};
  int64_t now = 0;
  for (int step = 0; step < 20000; ++step) {
    now += pick(0, 500);
    const std::string job = "j" + std::to_string(pick(0, 9));
    const uint32_t attempt = static_cast<uint32_t>(pick(1, 2));
    const uint64_t epoch = static_cast<uint64_t>(pick(1, 6));
    switch (pick(0, 4)) {
      case 0:
      case 1:
        (void)ledger.Prepare(job, attempt, epoch, kOwner,
                             {{nodes[pick(0, 2)], static_cast<uint32_t>(pick(1, 5))}}, now, 2000);
        break;
      case 2:
        (void)ledger.Commit(job, attempt, epoch, "coord", now);
        break;
      case 3:
        (void)ledger.Abort(job, attempt, epoch, "coord");
        break;
      case 4:
        if (pick(0, 3) == 0) ledger.Release(job, epoch);
        ledger.ExpireHolds(now);
        break;
    }
    // The invariant at every step (it aborts the process when broken).
    ledger.CheckInvariants();
    uint32_t held = 0;
    for (const auto& [j, h] : ledger.holds()) {
      for (const auto& g : h.gpus) held += static_cast<uint32_t>(g.indices.size());
    }
    ASSERT_EQ(held + ledger.TotalFree(), 20u) << "step " << step;
  }
}

TEST_F(LedgerTest, AnAbortedCommittedHoldKeepsItsGpusUntilReleased) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 1, kOwner, {{"n1", 8}}, 0, kTtl).ok());
  ASSERT_TRUE(ledger_.Commit("j1", 1, 1, "coord", 1).ok());
  auto stopping = ledger_.Abort("j1", 1, 1, "coord");
  ASSERT_TRUE(stopping.ok());
  EXPECT_EQ(*stopping, (std::vector<ReservationLedger::HoldKey>{{"j1", 1}}));
  EXPECT_EQ(ledger_.holds().at({"j1", 1}).state, HoldState::kStopping);
  // Its ranks may still run: the GPUs are not free for anyone.
  EXPECT_EQ(ledger_.FreeGpus("n1"), 0u);
  EXPECT_EQ(ledger_.Prepare("j2", 1, 1, {"coord", "vision", ""}, {{"n1", 1}}, 2, kTtl)
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ledger_.Commit("j1", 1, 1, "coord", 3).status().code(), absl::StatusCode::kNotFound)
      << "a stopping hold cannot be committed again";
  ledger_.Release("j1", 1);  // every rank exited
  EXPECT_EQ(ledger_.FreeGpus("n1"), 8u);
}

TEST_F(LedgerTest, ANewerEpochStopsTheOlderCommittedSliceWithoutSharingItsGpus) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 1, kOwner, {{"n1", 4}}, 0, kTtl).ok());
  ASSERT_TRUE(ledger_.Commit("j1", 1, 1, "coord", 1).ok());
  std::vector<ReservationLedger::HoldKey> stopped;
  auto next = ledger_.Prepare("j1", 2, 2, kOwner, {{"n1", 4}}, 2, kTtl, &stopped);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(stopped, (std::vector<ReservationLedger::HoldKey>{{"j1", 1}}));
  EXPECT_EQ(next->gpus[0].indices, (std::vector<uint32_t>{4, 5, 6, 7}))
      << "the old ranks still hold 0-3";
  EXPECT_EQ(ledger_.FreeGpus("n1"), 0u);
  // A further 4 do not fit while the old slice is stopping.
  EXPECT_EQ(ledger_.Prepare("j1", 3, 3, kOwner, {{"n1", 8}}, 3, kTtl).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(LedgerTest, OnlyTheCoordinatorThatPreparedMayTouchTheJob) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 1, kOwner, {{"n1", 2}}, 0, kTtl).ok());
  const HoldOwner intruder{"cn-evil", "vision", ""};
  EXPECT_EQ(ledger_.Prepare("j1", 1, 2, intruder, {{"n1", 2}}, 0, kTtl).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ledger_.Commit("j1", 1, 1, "cn-evil", 1).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ledger_.Abort("j1", 1, 1, "cn-evil").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ledger_.holds().at({"j1", 1}).state, HoldState::kPrepared) << "nothing changed";
  ASSERT_TRUE(ledger_.Commit("j1", 1, 1, "coord", 1).ok());
}

TEST_F(LedgerTest, HostileAsksAreRefused) {
  EXPECT_EQ(ledger_.Prepare("j1", 1, 1, kOwner, {{"n1", 0}}, 0, kTtl).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger_.Prepare("j1", 1, 1, kOwner, {{"n1", 4000000000u}}, 0, kTtl).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger_.Prepare("j1", 1, 1, kOwner, {}, 0, kTtl).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A TTL that would overflow `now + ttl` saturates instead of expiring at once.
  auto h = ledger_.Prepare("j2", 1, 1, kOwner, {{"n1", 1}},
                           std::numeric_limits<int64_t>::max() - 5, 1000);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->expires_at_ms, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ledger_.TotalFree(), 11u);
}

TEST_F(LedgerTest, PruneForgetsFinishedJobsOnly) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 1, kOwner, {{"n1", 2}}, 0, kTtl).ok());
  ASSERT_TRUE(ledger_.Prepare("j2", 1, 1, kOwner, {{"n1", 2}}, 0, kTtl).ok());
  ASSERT_TRUE(ledger_.Commit("j2", 1, 1, "coord", 1).ok());
  ASSERT_TRUE(ledger_.Abort("j1", 1, 1, "coord").ok());
  ledger_.Prune(100);
  EXPECT_EQ(ledger_.known_jobs(), 1u) << "j2 still holds GPUs";
}

TEST_F(LedgerTest, PruneKeepsAtMostMaxJobsWithoutHolds) {
  // Five finished jobs seen at times 1..5, one holding GPUs.
  for (int i = 1; i <= 5; ++i) {
    const std::string j = "j" + std::to_string(i);
    ASSERT_TRUE(ledger_.Prepare(j, 1, 1, kOwner, {{"n1", 1}}, i, kTtl).ok());
    ASSERT_TRUE(ledger_.Abort(j, 1, 1, "coord").ok());
  }
  ASSERT_TRUE(ledger_.Prepare("held", 1, 1, kOwner, {{"n1", 1}}, 0, kTtl).ok());
  ledger_.Prune(/*before_ms=*/0, /*max_jobs=*/3);
  EXPECT_EQ(ledger_.known_jobs(), 3u);
  // The held job and the two most recently seen stay.
  EXPECT_TRUE(absl::IsPermissionDenied(ledger_.CheckOwner("held", "other")));
  EXPECT_TRUE(absl::IsPermissionDenied(ledger_.CheckOwner("j5", "other")));
  EXPECT_TRUE(absl::IsPermissionDenied(ledger_.CheckOwner("j4", "other")));
  EXPECT_TRUE(ledger_.CheckOwner("j1", "other").ok()) << "the oldest was kept";
}

TEST_F(LedgerTest, UnhealthyGpusAreNeverGivenOutAndStopWhatRunsOnThem) {
  auto run = ledger_.Prepare("j1", 1, 1, kOwner, {{"n2", 2}}, 0, kTtl);  // GPUs 0, 1
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(ledger_.Commit("j1", 1, 1, "coord", 1).ok());
  auto pending = ledger_.Prepare("j2", 1, 1, kOwner, {{"n2", 1}}, 0, kTtl);  // GPU 2
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->gpus[0].indices, (std::vector<uint32_t>{2}));

  auto hit = ledger_.SetUnhealthy("n2", {1, 2, 99});  // 99 does not exist: ignored
  EXPECT_EQ(hit, (std::vector<ReservationLedger::HoldKey>{{"j1", 1}}))
      << "only the committed hold on a failed GPU is returned to be stopped";
  EXPECT_EQ(ledger_.Find("j2", 1), nullptr) << "the prepared hold on GPU 2 was dropped";
  EXPECT_EQ(ledger_.Commit("j2", 1, 1, "coord", 2).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ledger_.FreeGpus("n2"), 1u) << "GPU 3 only: 0 and 1 held, 1 and 2 unhealthy";

  auto next = ledger_.Prepare("j3", 1, 1, kOwner, {{"n2", 1}}, 0, kTtl);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->gpus[0].indices, (std::vector<uint32_t>{3}));
  EXPECT_EQ(ledger_.Prepare("j4", 1, 1, kOwner, {{"n2", 1}}, 0, kTtl).status().code(),
            absl::StatusCode::kResourceExhausted);

  ledger_.MarkStopping("j1", 1);
  ledger_.Release("j1", 1);
  EXPECT_EQ(ledger_.FreeGpus("n2"), 1u) << "GPU 0 came back, 1 and 2 are still unhealthy";
  ledger_.SetUnhealthy("n2", {});
  EXPECT_EQ(ledger_.FreeGpus("n2"), 3u) << "healed: 0, 1, 2 free, 3 held by j3";
  EXPECT_TRUE(ledger_.unhealthy().empty());
  ledger_.CheckInvariants();
}

TEST_F(LedgerTest, ACordonedNodeTakesNoNewHoldsButKeepsWhatRuns) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 1, kOwner, {{"n1", 2}}, 0, kTtl).ok());
  ASSERT_TRUE(ledger_.Commit("j1", 1, 1, "coord", 1).ok());
  ledger_.SetCordoned("n1", true);
  EXPECT_EQ(ledger_.FreeGpus("n1"), 0u);
  EXPECT_EQ(ledger_.Prepare("j2", 1, 1, kOwner, {{"n1", 1}}, 0, kTtl).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_NE(ledger_.Find("j1", 1), nullptr) << "the running hold is untouched";
  ledger_.SetCordoned("n1", false);
  EXPECT_EQ(ledger_.FreeGpus("n1"), 6u);
}

}  // namespace
}  // namespace fedgate::federation

namespace fedgate::federation {
namespace {

TEST(LedgerPorts, MasterPortsAreHeldLikeGpus) {
  ReservationLedger ledger({{"n1", 8}});
  ledger.SetPortRange(40000, 40002);
  const HoldOwner o{"coord", "t", ""};
  auto a = ledger.Prepare("j1", 1, 1, o, {{"n1", 1}}, 0, 1000, nullptr, true);
  auto b = ledger.Prepare("j2", 1, 1, o, {{"n1", 1}}, 0, 1000, nullptr, true);
  auto c = ledger.Prepare("j3", 1, 1, o, {{"n1", 1}}, 0, 1000, nullptr, true);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(std::set<uint32_t>({a->master_port, b->master_port, c->master_port}),
            std::set<uint32_t>({40000, 40001, 40002}));
  auto dup = ledger.Prepare("j1", 1, 1, o, {{"n1", 1}}, 10, 1000, nullptr, true);
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->master_port, a->master_port) << "a duplicate prepare keeps its port";
  auto full = ledger.Prepare("j4", 1, 1, o, {{"n1", 1}}, 0, 1000, nullptr, true);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("no free MASTER_PORT in 40000-40002"), std::string::npos);
  auto no_port = ledger.Prepare("j5", 1, 1, o, {{"n1", 1}}, 0, 1000);
  ASSERT_TRUE(no_port.ok()) << "a site that is not rank 0's needs no port";
  EXPECT_EQ(no_port->master_port, 0u);
  // A newer epoch of the same job may take its own port again; a released
  // hold gives its port back.
  auto again = ledger.Prepare("j2", 1, 2, o, {{"n1", 1}}, 20, 1000, nullptr, true);
  ASSERT_TRUE(again.ok()) << again.status();
  ledger.Release("j3", 1);
  auto d = ledger.Prepare("j6", 1, 1, o, {{"n1", 1}}, 0, 1000, nullptr, true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->master_port, c->master_port);
}

TEST(LedgerPorts, APortInUseOnTheNodeIsSkipped) {
  ReservationLedger ledger({{"n1", 8}, {"n2", 8}});
  ledger.SetPortRange(40000, 40002);
  std::vector<std::pair<std::string, uint32_t>> asked;
  ledger.SetPortInUse([&](const std::vector<NodeRequest>& nodes, uint32_t port) {
    for (const auto& n : nodes) asked.emplace_back(n.node, port);
    return port == 40000;  // another program listens there
  });
  const HoldOwner o{"coord", "t", ""};
  auto a = ledger.Prepare("j1", 1, 1, o, {{"n1", 1}, {"n2", 1}}, 0, 1000, nullptr, true);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->master_port, 40001u);
  ASSERT_GE(asked.size(), 2u);
  EXPECT_EQ(asked[0], std::make_pair(std::string("n1"), 40000u)) << "the nodes asked for are checked";
  EXPECT_EQ(asked[1], std::make_pair(std::string("n2"), 40000u));
  auto b = ledger.Prepare("j2", 1, 1, o, {{"n1", 1}}, 0, 1000, nullptr, true);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->master_port, 40002u);
  auto c = ledger.Prepare("j3", 1, 1, o, {{"n1", 1}}, 0, 1000, nullptr, true);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted) << "40000 stays taken";
  EXPECT_NE(c.status().message().find("in use on the node"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace fedgate::federation
