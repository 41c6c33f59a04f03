#include "federation/link_matrix.h"

#include <gtest/gtest.h>

namespace fedgate::federation {
namespace {

v1::Link L(const std::string& from, const std::string& to, double gbps, int64_t at) {
  v1::Link l;
  l.set_from(from);
  l.set_to(to);
  l.set_gbps(gbps);
  l.set_measured_at_unix_ms(at);
  return l;
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

}  // namespace
}  // namespace fedgate::federation
