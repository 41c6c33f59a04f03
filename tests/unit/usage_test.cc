#include "federation/usage.h"

#include <gtest/gtest.h>

namespace fedgate::federation {
namespace {

UsageRecord R(const std::string& tenant, const std::string& site, const std::string& model,
              uint32_t gpus, int64_t start_s, int64_t end_s, const std::string& prio = "guaranteed") {
  UsageRecord r;
  r.tenant = tenant;
  r.site = site;
  r.gpu_model = model;
  r.gpus = gpus;
  r.start_ms = start_s * 1000;
  r.end_ms = end_s * 1000;
  r.priority = prio;
  return r;
}

TEST(Usage, GpuSecondsClipToTheWindowAndOpenRecordsCountToNow) {
  EXPECT_DOUBLE_EQ(GpuSeconds(R("a", "s", "m", 4, 10, 16), 0, 100000, 0), 24);
  EXPECT_DOUBLE_EQ(GpuSeconds(R("a", "s", "m", 4, 10, 16), 12000, 100000, 0), 16);
  EXPECT_DOUBLE_EQ(GpuSeconds(R("a", "s", "m", 4, 10, 16), 0, 11000, 0), 4);
  EXPECT_DOUBLE_EQ(GpuSeconds(R("a", "s", "m", 4, 10, 16), 20000, 30000, 0), 0);
  EXPECT_DOUBLE_EQ(GpuSeconds(R("a", "s", "m", 2, 10, 0), 0, 100000, 15500), 11) << "open: to now";
  EXPECT_DOUBLE_EQ(GpuSeconds(R("a", "s", "m", 2, 10, 0), 0, 12000, 15500), 4) << "open: to until";
}

TEST(Usage, AggregatesByTenantSiteOrModelWithCost) {
  const std::vector<UsageRecord> recs = {
      R("team-a", "bj", "A100", 4, 0, 3600),             // 4 GPU-hours guaranteed
      R("team-a", "sh", "A100", 2, 0, 1800, "spot"),     // 1 GPU-hour spot
      R("team-b", "sh", "H100", 1, 0, 7200),             // 2 GPU-hours, no price
  };
  const Pricing price = {{"A100", {2.5, 0.9}}};
  auto t = AggregateUsage(recs, 0, 10'000'000, 0, "tenant", price);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].key, "team-a");
  EXPECT_DOUBLE_EQ((*t)[0].gpu_seconds, 4 * 3600 + 3600);
  EXPECT_DOUBLE_EQ((*t)[0].cost, 4 * 2.5 + 0.9);
  EXPECT_DOUBLE_EQ((*t)[1].cost, 0);
  auto s = AggregateUsage(recs, 0, 10'000'000, 0, "site", price);
  EXPECT_EQ((*s)[1].key, "sh");
  EXPECT_DOUBLE_EQ((*s)[1].gpu_seconds, 3600 + 7200);
  auto m = AggregateUsage(recs, 0, 10'000'000, 0, "model", price);
  EXPECT_EQ((*m)[1].key, "H100");
  EXPECT_FALSE(AggregateUsage(recs, 0, 1, 0, "colour", price).ok());
  EXPECT_FALSE(AggregateUsage(recs, 5, 5, 0, "tenant", price).ok());
}

}  // namespace
}  // namespace fedgate::federation
