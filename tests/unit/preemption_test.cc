#include "federation/preemption.h"

#include <gtest/gtest.h>

#include <random>

#include "federation/reservation.h"

namespace fedgate::federation {
namespace {

TEST(VictimsTest, LeastLostGpuSecondsNotFewestSlices) {
  // Freeing 4 GPUs of n1: one old 4-GPU slice loses 4 x 1000; two young
  // 2-GPU slices lose 2 x 100 + 2 x 50.
  std::vector<VictimCandidate> c = {{"old", {{"n1", 4}}, 4000},
                                    {"young1", {{"n1", 2}}, 200},
                                    {"young2", {{"n1", 2}}, 100},
                                    {"elsewhere", {{"n2", 8}}, 1}};
  auto v = ChooseVictims(c, {{"n1", 4}});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, (std::vector<std::string>{"young1", "young2"}));
  v = ChooseVictims(c, {{"n1", 2}});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, (std::vector<std::string>{"young2"}));
  EXPECT_FALSE(ChooseVictims(c, {{"n1", 9}}).has_value()) << "8 GPUs of n1 at most";
  EXPECT_TRUE(ChooseVictims(c, {})->empty());
}

TEST(VictimsTest, SlicesSpanningNodesCoverBoth) {
  std::vector<VictimCandidate> c = {{"both", {{"n1", 2}, {"n2", 2}}, 300},
                                    {"a", {{"n1", 2}}, 200},
                                    {"b", {{"n2", 2}}, 200}};
  auto v = ChooseVictims(c, {{"n1", 2}, {"n2", 2}});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, (std::vector<std::string>{"both"}));
}

// The greedy path (more than 16 candidates) still covers the deficit and
// never does worse than taking candidates in arbitrary order.
TEST(VictimsTest, ManyCandidatesGreedyCoversWithoutRedundantVictims) {
  std::mt19937 rng(7);
  std::vector<VictimCandidate> c;
  for (int i = 0; i < 40; ++i) {
    c.push_back({"s" + std::to_string(i), {{"n" + std::to_string(i % 3), 1 + rng() % 4}},
                 static_cast<double>(rng() % 10000)});
  }
  const std::map<std::string, uint32_t> deficit = {{"n0", 7}, {"n1", 5}};
  auto v = ChooseVictims(c, deficit);
  ASSERT_TRUE(v.has_value());
  std::map<std::string, uint32_t> freed;
  for (const auto& id : *v) {
    for (const auto& k : c) {
      if (k.id == id) {
        for (const auto& [n, g] : k.gpus_by_node) freed[n] += g;
        EXPECT_NE(k.gpus_by_node.begin()->first, "n2") << "a victim on a node not needed";
      }
    }
  }
  EXPECT_GE(freed["n0"], 7u);
  EXPECT_GE(freed["n1"], 5u);
}

TEST(EarmarkTest, FreedGpusGoToThePreemptorOnly) {
  ReservationLedger ledger({{"n1", 4}});
  const HoldOwner spot{"sh", "t1", "spot"};
  ASSERT_TRUE(ledger.Prepare("j1", 1, 1, spot, {{"n1", 4}}, 0, 1000).ok());
  ASSERT_TRUE(ledger.Commit("j1", 1, 1, "sh", 0).ok());
  ledger.MarkStopping("j1", 1);
  ledger.Earmark("jg", "n1", 4, 30000);
  ledger.Release("j1", 1);
  EXPECT_EQ(ledger.FreeGpus("n1"), 0u) << "kept for the preemptor";
  EXPECT_EQ(ledger.FreeGpusFor("n1", "jg"), 4u);
  const HoldOwner other{"bj", "t2", "guaranteed"};
  EXPECT_EQ(ledger.Prepare("jx", 1, 1, other, {{"n1", 1}}, 10, 1000).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(ledger.Prepare("jg", 1, 1, other, {{"n1", 4}}, 10, 1000).ok());
  EXPECT_TRUE(ledger.earmarks().empty()) << "the preemptor's prepare drops its mark";
  // An unused earmark expires.
  ledger.Earmark("jz", "n1", 2, 50);
  ledger.ExpireHolds(51);
  EXPECT_TRUE(ledger.earmarks().empty());
}

}  // namespace
}  // namespace fedgate::federation
