#include "federation/quota.h"

#include <gtest/gtest.h>

#include <random>

namespace fedgate::federation {
namespace {

constexpr int64_t kTtl = 10'000;
constexpr int64_t kLease = 5'000;

class QuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ledger_.SetQuota({"team-a", 4, {{"A100", 2}}, 2, 1}).ok());
  }
  QuotaLedger ledger_;
};

TEST_F(QuotaTest, GuaranteedUpToNominalThenBorrowedThenRefused) {
  auto a = ledger_.Prepare("j1", 1, 1, "bj", "team-a", {{"H100", 4}}, 0, kTtl);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->cls, QuotaClass::kGuaranteed);
  auto b = ledger_.Prepare("j2", 1, 1, "sh", "team-a", {{"H100", 2}}, 0, kTtl);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->cls, QuotaClass::kBorrowed) << "beyond nominal, within borrow";
  auto c = ledger_.Prepare("j3", 1, 1, "sh", "team-a", {{"H100", 1}}, 0, kTtl);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("waiting for quota: tenant team-a holds 6 of 4"),
            std::string::npos)
      << c.status();
  EXPECT_EQ(ledger_.Use("team-a").guaranteed, 4u);
  EXPECT_EQ(ledger_.Use("team-a").borrowed, 2u) << "a refusal changes nothing";
}

TEST_F(QuotaTest, PerModelLimitMakesTheExcessBorrowed) {
  auto a = ledger_.Prepare("j1", 1, 1, "bj", "team-a", {{"A100", 2}}, 0, kTtl);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->cls, QuotaClass::kGuaranteed);
  auto b = ledger_.Prepare("j2", 1, 1, "bj", "team-a", {{"A100", 1}}, 0, kTtl);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->cls, QuotaClass::kBorrowed) << "A100 nominal is 2";
  auto c = ledger_.Prepare("j3", 1, 1, "bj", "team-a", {{"H100", 1}}, 0, kTtl);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cls, QuotaClass::kGuaranteed) << "other models still fit the total";
}

TEST_F(QuotaTest, UngovernedTenantAndBadQuotasAreRefused) {
  EXPECT_EQ(ledger_.Prepare("j1", 1, 1, "bj", "team-x", {{"A100", 1}}, 0, kTtl).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(ledger_.SetQuota({"team-b", 2, {{"A100", 3}}, 0, 1}).ok()) << "model over total";
  EXPECT_FALSE(ledger_.SetQuota({"team-b", 2, {}, 0, 0}).ok()) << "weight 0";
  EXPECT_FALSE(ledger_.SetQuota({"", 2, {}, 0, 1}).ok());
  EXPECT_FALSE(ledger_.Governs("team-b"));
}

TEST_F(QuotaTest, EpochOwnershipDuplicatesAndLeases) {
  auto a = ledger_.Prepare("j1", 1, 10, "bj", "team-a", {{"H100", 4}}, 0, kTtl);
  ASSERT_TRUE(a.ok());
  auto dup = ledger_.Prepare("j1", 1, 10, "bj", "team-a", {{"H100", 4}}, 5, kTtl);
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(ledger_.Use("team-a").guaranteed, 4u) << "held once";
  EXPECT_EQ(ledger_.Prepare("j1", 1, 11, "sh", "team-a", {{"H100", 1}}, 0, kTtl).status().code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(ledger_.Commit("j1", 1, 10, "bj", 100, kLease).ok());
  // A newer epoch of the same job replaces the old hold, it does not add.
  auto b = ledger_.Prepare("j1", 2, 11, "bj", "team-a", {{"H100", 4}}, 200, kTtl);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->cls, QuotaClass::kGuaranteed);
  EXPECT_EQ(ledger_.holds().size(), 1u);
  EXPECT_EQ(ledger_.Prepare("j1", 1, 10, "bj", "team-a", {{"H100", 4}}, 0, kTtl).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "stale epoch";
  ASSERT_TRUE(ledger_.Commit("j1", 2, 11, "bj", 300, kLease).ok());
  EXPECT_NE(ledger_.Renew("j1", 11, 4000, kLease), nullptr);
  EXPECT_TRUE(ledger_.Expire(8000).empty()) << "renewed until 9000";
  EXPECT_EQ(ledger_.Expire(9001).size(), 1u) << "a lapsed lease frees the quota";
  EXPECT_EQ(ledger_.Use("team-a").guaranteed, 0u);
  EXPECT_EQ(ledger_.Commit("j1", 2, 11, "bj", 9002, kLease).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(QuotaTest, AbortFreesAndRefusesALatePrepare) {
  ASSERT_TRUE(ledger_.Prepare("j1", 1, 5, "bj", "team-a", {{"H100", 3}}, 0, kTtl).ok());
  ASSERT_TRUE(ledger_.Abort("j1", 5, "bj").ok());
  EXPECT_EQ(ledger_.Use("team-a").guaranteed, 0u);
  EXPECT_FALSE(ledger_.Prepare("j1", 1, 5, "bj", "team-a", {{"H100", 3}}, 0, kTtl).ok());
  EXPECT_EQ(ledger_.Abort("j1", 5, "sh").code(), absl::StatusCode::kPermissionDenied);
}

// Many coordinators prepare, commit, abort and expire in random order; at
// no point do a tenant's holds exceed nominal + borrow, nor its guaranteed
// holds the nominal quota.
TEST(QuotaRandomTest, InterleavedCoordinatorsNeverExceedTheQuota) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    QuotaLedger ledger;
    ASSERT_TRUE(ledger.SetQuota({"t", 6, {{"A100", 3}}, 2, 1}).ok());
    const std::vector<std::string> coords = {"a", "b", "c", "d"};
    std::map<std::string, uint64_t> epoch;
    int64_t now = 0;
    size_t granted = 0, refused = 0;
    for (int step = 0; step < 2000; ++step) {
      now += rng() % 300;
      const std::string job = "j" + std::to_string(rng() % 12);
      const std::string& coord = coords[std::hash<std::string>{}(job) % coords.size()];
      const std::string wrong = coords[rng() % coords.size()];
      switch (rng() % 5) {
        case 0:
        case 1: {
          const uint64_t e = epoch[job] += 1 + rng() % 2;
          std::map<std::string, uint32_t> ask;
          ask[rng() % 2 ? "A100" : "H100"] = 1 + rng() % 3;
          auto h = ledger.Prepare(job, 1, e, rng() % 8 ? coord : wrong, "t", ask, now, 1000);
          h.ok() ? ++granted : ++refused;
          break;
        }
        case 2:
          (void)ledger.Commit(job, 1, epoch[job], coord, now, 2000);
          break;
        case 3:
          (void)ledger.Abort(job, epoch[job], rng() % 8 ? coord : wrong);
          break;
        default:
          (void)ledger.Renew(job, epoch[job], now, 2000);
          (void)ledger.Expire(now);
      }
      QuotaUse u = ledger.Use("t");
      ASSERT_LE(u.guaranteed, 6u) << "seed " << seed << " step " << step;
      ASSERT_LE(u.guaranteed + u.borrowed, 8u) << "seed " << seed << " step " << step;
      ASSERT_LE(u.guaranteed_by_model["A100"], 3u) << "seed " << seed << " step " << step;
    }
    EXPECT_GT(granted, 0u);
    EXPECT_GT(refused, 0u) << "the quota was contended";
  }
}

}  // namespace
}  // namespace fedgate::federation
