// The one number parser (base/number.h): the whole text, in range, or none.
#include "base/number.h"

#include <gtest/gtest.h>

namespace fedgate {
namespace {

TEST(ParseNumber, TakesOnlyAWholeNumberThatFits) {
  EXPECT_EQ(ParseNumber<uint32_t>("4096"), 4096u);
  EXPECT_EQ(ParseNumber<uint64_t>("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseNumber<int32_t>("-7"), -7);
  EXPECT_FALSE(ParseNumber<uint64_t>("18446744073709551616")) << "overflow";
  EXPECT_FALSE(ParseNumber<uint16_t>("65536")) << "overflow";
  EXPECT_FALSE(ParseNumber<uint32_t>("-1")) << "a sign where none fits";
  EXPECT_FALSE(ParseNumber<uint32_t>("")) << "empty";
  EXPECT_FALSE(ParseNumber<uint32_t>("12a"));
  EXPECT_FALSE(ParseNumber<uint32_t>(" 12")) << "no spaces";
  EXPECT_FALSE(ParseNumber<uint32_t>("+12"));
}

TEST(ParseDouble, TakesFiniteDecimalsOnly) {
  EXPECT_EQ(ParseDouble("9.6"), 9.6);
  EXPECT_EQ(ParseDouble("1e3"), 1000.0);
  EXPECT_FALSE(ParseDouble("inf"));
  EXPECT_FALSE(ParseDouble("nan"));
  EXPECT_FALSE(ParseDouble("1.2.3"));
  EXPECT_FALSE(ParseDouble(""));
  EXPECT_FALSE(ParseDouble("1e999")) << "out of range";
}

}  // namespace
}  // namespace fedgate
