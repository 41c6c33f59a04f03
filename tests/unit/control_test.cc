#include "transport/control.h"

#include <gtest/gtest.h>

namespace fedgate::transport {
namespace {

TEST(ControlFraming, LengthIsBigEndianAndRoundTrips) {
  const std::string frame = EncodeFrame("hello");
  ASSERT_EQ(frame.size(), 9u);
  EXPECT_EQ(frame.substr(0, 4), std::string("\0\0\0\5", 4));
  EXPECT_EQ(DecodeFrameLength(reinterpret_cast<const unsigned char*>(frame.data())), 5u);
  const std::string big(70000, 'x');
  const std::string f2 = EncodeFrame(big);
  EXPECT_EQ(DecodeFrameLength(reinterpret_cast<const unsigned char*>(f2.data())), 70000u);
  const unsigned char huge[4] = {0xff, 0, 0, 1};
  EXPECT_GT(DecodeFrameLength(huge), kMaxControlFrameBytes) << "callers must refuse it";
}

}  // namespace
}  // namespace fedgate::transport
