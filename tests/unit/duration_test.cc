#include "federation/duration.h"

#include <gtest/gtest.h>

namespace fedgate::federation {
namespace {

TEST(Duration, ParsesEveryUnit) {
  EXPECT_EQ(*ParseDurationMs("500ms"), 500);
  EXPECT_EQ(*ParseDurationMs("90s"), 90'000);
  EXPECT_EQ(*ParseDurationMs("5m"), 300'000);
  EXPECT_EQ(*ParseDurationMs("2h"), 7'200'000);
  EXPECT_EQ(*ParseDurationMs("1.5s"), 1'500);
  EXPECT_EQ(*ParseDurationMs("7d"), 604'800'000);  // DESIGN.md: retention: {logs: 7d}
}

TEST(Duration, RejectsWithAReason) {
  for (const char* bad : {"", "10", "ms", "-1s", "1.2.3s", "5w", "1 s", "s5"}) {
    auto r = ParseDurationMs(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(std::string(r.status().message()).find(bad), std::string::npos);
  }
}

TEST(Duration, FormatsInTheLargestExactUnit) {
  EXPECT_EQ(FormatDurationMs(1500), "1500ms");
  EXPECT_EQ(FormatDurationMs(2000), "2s");
  EXPECT_EQ(FormatDurationMs(300000), "5m");
  EXPECT_EQ(FormatDurationMs(7200000), "2h");
  EXPECT_EQ(FormatDurationMs(0), "0ms");
}

}  // namespace
}  // namespace fedgate::federation
