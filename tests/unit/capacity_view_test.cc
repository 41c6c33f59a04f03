#include "federation/capacity_view.h"

#include <gtest/gtest.h>

#include "tests/support/fake_clock.h"

namespace fedgate::federation {
namespace {

std::vector<Node> Nodes() {
  Node a;
  a.name = "sh-1";
  a.gpu_model = "A100-80GB";
  a.gpus = 4;
  Node b;
  b.name = "sh-2";
  b.gpu_model = "H100";
  b.gpus = 4;
  return {a, b};
}

TEST(CapacityView, LocalSiteFirstClassAndModelsSummed) {
  auto view = BuildCapacityView("cn-shanghai", Nodes(), std::vector<StoredAd>{}, 1000);
  ASSERT_EQ(view.sites_size(), 1);
  const auto& s = view.sites(0);
  EXPECT_EQ(s.state(), v1::SiteCapacity::local);
  EXPECT_EQ(s.free_gpus(), 8u);
  EXPECT_EQ(s.total_gpus(), 8u);
  ASSERT_EQ(s.models_size(), 2);
  EXPECT_EQ(s.models(0).model(), "A100-80GB");
  EXPECT_EQ(s.models(1).model(), "H100");
}

TEST(CapacityView, SilentOriginIsDownWithNoFreeGpusAndWithdrawnIsGone) {
  testing::FakeClock clock;
  AdStore store("cn-beijing", &clock);
  const int64_t t0 = clock.NowMs();
  store.Offer(MakeOwnAd("cn-shanghai", Nodes(), 1, t0, 10000, 1000), "cn-shanghai");
  auto gone = MakeOwnAd("cn-shenzhen", Nodes(), 1, t0, 10000, 1000);
  gone.set_withdrawn(true);
  store.Offer(gone, "cn-shanghai");

  auto view = BuildCapacityView("cn-beijing", {}, store.Fresh(), clock.NowMs());
  ASSERT_EQ(view.sites_size(), 2) << "withdrawn cn-shenzhen is left out";
  EXPECT_EQ(view.sites(1).site(), "cn-shanghai");
  EXPECT_EQ(view.sites(1).state(), v1::SiteCapacity::up);
  EXPECT_EQ(view.sites(1).free_gpus(), 8u);

  clock.Advance(kMissedIntervalsForDown * 1000 + 1);
  view = BuildCapacityView("cn-beijing", {}, store.Fresh(), clock.NowMs());
  EXPECT_EQ(view.sites(1).state(), v1::SiteCapacity::down);
  EXPECT_EQ(view.sites(1).free_gpus(), 0u);
  EXPECT_EQ(view.sites(1).total_gpus(), 8u);
  EXPECT_NEAR(view.sites(1).age_seconds(), 3.001, 1e-9);
}

// Unhealthy GPUs and cordoned nodes travel in the ad as counts, and the
// view sums them for the local site and for every origin alike.
TEST(CapacityView, UnhealthyGpusAndCordonedNodesAreCounted) {
  NodeExtras extras;
  extras["sh-1"].unhealthy = 2;
  extras["sh-2"].cordoned = true;
  const auto ad = MakeOwnAd("cn-shanghai", Nodes(), 1, 1000, 10000, 1000, {}, extras);
  ASSERT_EQ(ad.nodes_size(), 2);
  EXPECT_EQ(ad.nodes(0).unhealthy_gpus(), 2u);
  EXPECT_FALSE(ad.nodes(0).cordoned());
  EXPECT_TRUE(ad.nodes(1).cordoned());

  testing::FakeClock clock;
  AdStore store("cn-beijing", &clock);
  auto remote = MakeOwnAd("cn-shanghai", Nodes(), 1, clock.NowMs(), 10000, 1000, {}, extras);
  store.Offer(remote, "cn-shanghai");
  NodeExtras local;
  local["sh-2"].unhealthy = 1;
  auto view = BuildCapacityView("cn-beijing", Nodes(), store.Fresh(), clock.NowMs(), {}, local);
  ASSERT_EQ(view.sites_size(), 2);
  EXPECT_EQ(view.sites(0).site(), "cn-beijing");
  EXPECT_EQ(view.sites(0).unhealthy_gpus(), 1u);
  EXPECT_EQ(view.sites(0).cordoned_nodes(), 0u);
  EXPECT_EQ(view.sites(1).unhealthy_gpus(), 2u);
  EXPECT_EQ(view.sites(1).cordoned_nodes(), 1u);
}

}  // namespace
}  // namespace fedgate::federation
