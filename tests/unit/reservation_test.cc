#include "federation/reservation.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace fedgate::federation {
namespace {

constexpr int64_t kTtl = 10'000;

class LedgerTest : public ::testing::Test {
 protected:
  ReservationLedger ledger_{{{"n1", 8}, {"n2", 4}}};
};

TEST_F(LedgerTest, PrepareCommitReleaseMovesGpus) {
  auto h = ledger_.Prepare("j1", 1, 1, {{"n1", 6}}, 0, kTtl);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->gpus[0].indices, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ledger_.FreeGpus("n1"), 2u);
  ASSERT_TRUE(ledger_.Commit("j1", 1, 1, 5).ok());
  EXPECT_TRUE(ledger_.ExpireHolds(kTtl * 10).empty()) << "committed holds never expire";
  auto other = ledger_.Prepare("j2", 1, 1, {{"n1", 3}}, 0, kTtl);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ledger_.FreeGpus("n1"), 2u) << "a refused prepare changes nothing";
  ledger_.Release("j1");
  EXPECT_EQ(ledger_.TotalFree(), 12u);
}

TEST_F(LedgerTest, DuplicatesAreIdempotent) {
  auto a = ledger_.Prepare("j1", 1, 3, {{"n1", 2}, {"n2", 1}}, 0, kTtl);
  auto b = ledger_.Prepare("j1", 1, 3, {{"n1", 2}, {"n2", 1}}, 100, kTtl);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->gpus[0].indices, b->gpus[0].indices);
  EXPECT_EQ(ledger_.TotalFree(), 9u) << "held once, not twice";
  ASSERT_TRUE(ledger_.Commit("j1", 1, 3, 200).ok());
  ASSERT_TRUE(ledger_.Commit("j1", 1, 3, 300).ok()) << "a duplicate commit";
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 3, {{"n1", 2}, {"n2", 1}}, 400, kTtl).ok())
      << "a late duplicate prepare of the committed epoch";
  EXPECT_EQ(ledger_.holds().at("j1").state, HoldState::kCommitted);
}

TEST_F(LedgerTest, StaleEpochsAreRefused) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 5, {{"n1", 2}}, 0, kTtl).ok());
  EXPECT_EQ(ledger_.Prepare("j1", 1, 4, {{"n1", 2}}, 0, kTtl).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_.Commit("j1", 1, 4, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_.Abort("j1", 1, 4).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_.FreeGpus("n1"), 6u) << "the epoch-5 hold stands";
  // A newer epoch replaces the uncommitted hold without double counting.
  auto h = ledger_.Prepare("j1", 2, 6, {{"n1", 8}}, 0, kTtl);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(ledger_.FreeGpus("n1"), 0u);
}

TEST_F(LedgerTest, ReorderedMessages) {
  // Commit before its prepare: nothing to commit.
  EXPECT_EQ(ledger_.Commit("j1", 1, 1, 0).status().code(), absl::StatusCode::kNotFound);
  // Abort before its prepare: the late prepare of that epoch is refused.
  ASSERT_TRUE(ledger_.Abort("j2", 1, 7).ok());
  EXPECT_EQ(ledger_.Prepare("j2", 1, 7, {{"n1", 1}}, 0, kTtl).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_.TotalFree(), 12u);
  // Abort twice is fine.
  ASSERT_TRUE(ledger_.Prepare("j3", 1, 1, {{"n2", 4}}, 0, kTtl).ok());
  ASSERT_TRUE(ledger_.Abort("j3", 1, 1).ok());
  ASSERT_TRUE(ledger_.Abort("j3", 1, 1).ok());
  EXPECT_EQ(ledger_.FreeGpus("n2"), 4u);
  EXPECT_EQ(ledger_.Commit("j3", 1, 1, 0).status().code(), absl::StatusCode::kNotFound)
      << "commit after abort";
}

TEST_F(LedgerTest, UncommittedHoldsExpire) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 1, {{"n1", 4}}, 0, kTtl).ok());
  EXPECT_TRUE(ledger_.ExpireHolds(kTtl).empty()) << "still valid at the TTL";
  EXPECT_EQ(ledger_.ExpireHolds(kTtl + 1), (std::vector<std::string>{"j1"}));
  EXPECT_EQ(ledger_.TotalFree(), 12u);
  EXPECT_EQ(ledger_.Commit("j1", 1, 1, kTtl + 2).status().code(), absl::StatusCode::kNotFound);
  // A commit that arrives after the TTL but before the sweep also fails.
  ASSERT_TRUE(ledger_.Prepare("j2", 1, 1, {{"n1", 4}}, 0, kTtl).ok());
  EXPECT_FALSE(ledger_.Commit("j2", 1, 1, kTtl + 1).ok());
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
        (void)ledger.Prepare(job, attempt, epoch,
                             {{nodes[pick(0, 2)], static_cast<uint32_t>(pick(1, 5))}}, now, 2000);
        break;
      case 2:
        (void)ledger.Commit(job, attempt, epoch, now);
        break;
      case 3:
        (void)ledger.Abort(job, attempt, epoch);
        break;
      case 4:
        if (pick(0, 3) == 0) ledger.Release(job);
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

}  // namespace
}  // namespace fedgate::federation
