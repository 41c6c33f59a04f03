#include "federation/peer_registry.h"

#include <gtest/gtest.h>

#include "tests/support/fake_clock.h"

namespace fedgate::federation {
namespace {

TEST(PeerRegistry, StateFollowsHeartbeats) {
  testing::FakeClock clock;
  PeerRegistry reg("cn-beijing", &clock, 6000);
  ASSERT_TRUE(reg.Add("cn-shanghai", "10.0.0.2:7443", "config").ok());
  EXPECT_EQ(reg.StateOf("cn-shanghai"), PeerState::kConnecting);
  reg.Heard("cn-shanghai");
  EXPECT_EQ(reg.StateOf("cn-shanghai"), PeerState::kUp);
  clock.Advance(6000);
  EXPECT_EQ(reg.StateOf("cn-shanghai"), PeerState::kUp);
  clock.Advance(1);
  EXPECT_EQ(reg.StateOf("cn-shanghai"), PeerState::kDown);
  EXPECT_EQ(reg.CountUp(), 0);
  reg.RecordPush("cn-shanghai", 1.5);
  EXPECT_EQ(reg.StateOf("cn-shanghai"), PeerState::kUp);
  EXPECT_EQ(reg.CountUp(), 1);
}

TEST(PeerRegistry, HeartbeatsFromStrangersChangeNothing) {
  testing::FakeClock clock;
  PeerRegistry reg("cn-beijing", &clock, 6000);
  reg.Heard("cn-mars");
  EXPECT_FALSE(reg.IsApproved("cn-mars"));
  EXPECT_TRUE(reg.List().empty());
}

TEST(PeerRegistry, ValidatesSiteAndEndpoint) {
  testing::FakeClock clock;
  PeerRegistry reg("cn-beijing", &clock, 6000);
  EXPECT_FALSE(reg.Add("CN_Shanghai", "h:1", "admin").ok());
  EXPECT_FALSE(reg.Add("cn-beijing", "h:1", "admin").ok()) << "itself";
  EXPECT_FALSE(reg.Add("cn-shanghai", "nohost", "admin").ok());
  EXPECT_FALSE(reg.Add("cn-shanghai", "h:0", "admin").ok());
  EXPECT_FALSE(reg.Add("cn-shanghai", "h:70000", "admin").ok());
  EXPECT_FALSE(reg.Add("cn-shanghai", "bad host:1", "admin").ok());
  EXPECT_TRUE(reg.Add("cn-shanghai", "[::1]:7443", "admin").ok());
  EXPECT_TRUE(reg.List().size() == 1);
}

TEST(PeerRegistry, ConfigPeersCannotBeRemovedAtRuntime) {
  testing::FakeClock clock;
  PeerRegistry reg("cn-beijing", &clock, 6000);
  ASSERT_TRUE(reg.Add("cn-shanghai", "h:1", "config").ok());
  ASSERT_TRUE(reg.Add("cn-shenzhen", "h:2", "admin").ok());
  EXPECT_EQ(reg.Remove("cn-shanghai").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reg.Remove("cn-nowhere").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(reg.Remove("cn-shenzhen").ok());
  EXPECT_TRUE(reg.IsApproved("cn-shanghai"));
  EXPECT_FALSE(reg.IsApproved("cn-shenzhen"));
}

}  // namespace
}  // namespace fedgate::federation
