// /metrics stays bounded: a removed peer's series and an expired link's
// series leave the registry (real GatewayCore and store, FakeClock).
#include <gtest/gtest.h>

#include "tests/support/test_core.h"

namespace fedgate::testing {
namespace {

TEST(CoreMetricsTest, RemovedPeersAndExpiredLinksLeaveMetrics) {
  TestCore t;
  ASSERT_NO_FATAL_FAILURE(t.Start("10s"));
  auto& core = *t.core;
  auto& clock = t.clock;
  auto& metrics = t.metrics;
  for (const char* peer : {"site-b", "site-c"}) {
    ASSERT_TRUE(core.AddPeer(peer, "127.0.0.1:2").ok());
    core.RecordLink(MakeLink("site-a", peer, 9.5, clock.NowMs()));
  }
  core.RecordError("site-b", "connection refused");
  ASSERT_TRUE(core.Tick().ok());
  std::string text = metrics.Render();
  EXPECT_NE(text.find("fedgate_peer_up{peer=\"site-b\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("fedgate_peer_push_errors_total{peer=\"site-b\"}"), std::string::npos);
  EXPECT_NE(text.find("fedgate_link_gbps{from=\"site-a\",to=\"site-b\"}"), std::string::npos);

  // site-c's link is measured again; site-b's goes stale past link_max_age.
  clock.Advance(6000);
  core.RecordLink(MakeLink("site-a", "site-c", 8, clock.NowMs()));
  clock.Advance(5000);
  ASSERT_TRUE(core.Tick().ok());
  text = metrics.Render();
  EXPECT_EQ(text.find("fedgate_link_gbps{from=\"site-a\",to=\"site-b\"}"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("fedgate_link_age_seconds{from=\"site-a\",to=\"site-b\"}"),
            std::string::npos);
  EXPECT_NE(text.find("fedgate_link_gbps{from=\"site-a\",to=\"site-c\"} 8"), std::string::npos);

  ASSERT_TRUE(core.RemovePeer("site-b").ok());
  ASSERT_TRUE(core.Tick().ok());
  text = metrics.Render();
  EXPECT_EQ(text.find("\"site-b\""), std::string::npos) << "site-b still in /metrics:\n" << text;
  EXPECT_NE(text.find("fedgate_peer_up{peer=\"site-c\"}"), std::string::npos);
}

}  // namespace
}  // namespace fedgate::testing
