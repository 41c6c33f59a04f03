#include "federation/link_matrix.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/support/make_link.h"

namespace fedgate::federation {
namespace {

v1::Link L(const std::string& from, const std::string& to, double gbps, int64_t at) {
  return testing::MakeLink(from, to, gbps, at);
}

TEST(LinkMatrix, NewestWinsAndOldLinksAreUnknown) {
  LinkMatrix m(60'000);
  m.Merge(L("a", "b", 1.0, 1000));
  m.Merge(L("a", "b", 0.5, 500));  // an older measurement relayed late
  EXPECT_DOUBLE_EQ(m.Get("a", "b", 2000)->gbps(), 1.0);
  m.Merge(L("a", "b", 0.2, 3000));
  EXPECT_DOUBLE_EQ(m.Get("a", "b", 4000)->gbps(), 0.2);
  EXPECT_TRUE(m.Get("a", "b", 63'000).has_value());
  EXPECT_FALSE(m.Get("a", "b", 63'001).has_value()) << "past max age: unknown";
  EXPECT_TRUE(m.All(63'001).empty());
}

TEST(LinkMatrix, PairTakesTheSlowerDirection) {
  LinkMatrix m(60'000);
  EXPECT_FALSE(m.PairGbps("a", "b", 0).has_value());
  m.Merge(L("a", "b", 1.0, 0));
  EXPECT_DOUBLE_EQ(*m.PairGbps("b", "a", 0), 1.0) << "one known direction is used";
  m.Merge(L("b", "a", 0.3, 0));
  EXPECT_DOUBLE_EQ(*m.PairGbps("a", "b", 0), 0.3);
  EXPECT_DOUBLE_EQ(*m.PairGbps("b", "a", 0), 0.3);
}

TEST(LinkMatrix, LookupsByIdAgreeWithLookupsByName) {
  std::mt19937 rng(7);
  LinkMatrix m(10'000);
  for (int i = 0; i < 400; ++i) {  // both directions, stale and fresh, re-measured
    m.Merge(L("s" + std::to_string(rng() % 30), "s" + std::to_string(rng() % 30),
              static_cast<double>(rng() % 100), static_cast<int64_t>(rng() % 20'000)));
  }
  EXPECT_FALSE(m.SiteId("nowhere").has_value());
  int known = 0;
  for (int a = 0; a < 30; ++a) {
    for (int b = 0; b < 30; ++b) {
      const std::string x = "s" + std::to_string(a), y = "s" + std::to_string(b);
      auto by_name = m.PairGbps(x, y, 15'000);
      auto ix = m.SiteId(x), iy = m.SiteId(y);
      if (!ix || !iy) {
        EXPECT_FALSE(by_name.has_value());
        continue;
      }
      EXPECT_EQ(m.PairGbps(*ix, *iy, 15'000), by_name) << x << "-" << y;
      // The rule itself, from the per-direction links.
      auto xy = m.Get(x, y, 15'000), yx = m.Get(y, x, 15'000);
      std::optional<double> want;
      if (xy && yx) want = std::min(xy->gbps(), yx->gbps());
      else if (xy) want = xy->gbps();
      else if (yx) want = yx->gbps();
      EXPECT_EQ(by_name, want) << x << "-" << y;
      known += want.has_value();
    }
  }
  EXPECT_GT(known, 100);
}

TEST(LinkMatrix, AStaleDirectionGivesWayToTheFreshOne) {
  LinkMatrix m(1000);
  m.Merge(L("a", "b", 5.0, 0));
  m.Merge(L("b", "a", 1.0, 2000));
  EXPECT_DOUBLE_EQ(*m.PairGbps("a", "b", 2500), 1.0) << "a->b is stale, b->a is used";
  EXPECT_FALSE(m.PairGbps("a", "b", 3001).has_value());
}

}  // namespace
}  // namespace fedgate::federation
