#include "transport/bandwidth.h"

#include <gtest/gtest.h>

namespace fedgate::transport {
namespace {

TEST(Bandwidth, GbitPerSecondIsPayloadBitsOverTime) {
  EXPECT_DOUBLE_EQ(GbitPerSecond(125'000'000, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(GbitPerSecond(125'000'000, 2.0), 0.5);
  EXPECT_DOUBLE_EQ(GbitPerSecond(1'000, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(GbitPerSecond(-5, 1.0), 0.0);
}

TEST(Bandwidth, SizesParseWithBinaryUnits) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("4K"), 4096u);
  EXPECT_EQ(*ParseSize("64M"), 64u << 20);
  EXPECT_EQ(*ParseSize("1G"), 1u << 30);
  for (const char* bad : {"", "K", "0", "4X", "-1", "3G", "1.5M"}) {
    EXPECT_FALSE(ParseSize(bad).ok()) << bad;
  }
}

TEST(Bandwidth, SweepDoublesFromMinToMax) {
  auto s = ParseSizeSweep("4K:64M");
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 15u);
  EXPECT_EQ(s->front(), 4096u);
  EXPECT_EQ(s->back(), 64u << 20);
  for (size_t i = 1; i < s->size(); ++i) EXPECT_EQ((*s)[i], 2 * (*s)[i - 1]);
  EXPECT_EQ(*ParseSizeSweep("1M"), std::vector<uint64_t>{1u << 20});
  EXPECT_EQ(*ParseSizeSweep("3K:8K"), (std::vector<uint64_t>{3072, 6144, 8192}))
      << "a MAX off the doubling ladder is still measured";
  EXPECT_FALSE(ParseSizeSweep("64M:4K").ok());
  EXPECT_FALSE(ParseSizeSweep("4K:").ok());
}

TEST(Bandwidth, FormatSizeRoundTrips) {
  for (uint64_t v : {1536ull, 4096ull, 1ull << 20, 64ull << 20, 1ull << 30}) {
    EXPECT_EQ(*ParseSize(FormatSize(v)), v);
  }
  EXPECT_EQ(FormatSize(1536), "1536");
  EXPECT_EQ(FormatSize(4096), "4K");
}

TEST(Bandwidth, PercentilesAndHalfRoundTrip) {
  std::vector<double> rtt;
  for (int i = 1; i <= 100; ++i) rtt.push_back(i * 2.0);  // 2..200 us
  EXPECT_DOUBLE_EQ(Percentile(rtt, 50), 100);
  EXPECT_DOUBLE_EQ(Percentile(rtt, 99), 198);
  EXPECT_DOUBLE_EQ(Percentile(rtt, 100), 200);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  auto l = OneWayLatency(rtt);
  EXPECT_DOUBLE_EQ(l.min_us, 1);
  EXPECT_DOUBLE_EQ(l.p50_us, 50);
  EXPECT_DOUBLE_EQ(l.p99_us, 99);
}

TEST(Bandwidth, TcpPayloadFractionOfAnEthernetFrame) {
  EXPECT_DOUBLE_EQ(TcpPayloadFraction(1500), 1448.0 / 1514.0);
  EXPECT_DOUBLE_EQ(TcpPayloadFraction(9000), 8948.0 / 9014.0);
}

}  // namespace
}  // namespace fedgate::transport
