// /metrics stays bounded: a removed peer's series and an expired link's
// series leave the registry (real GatewayCore and store, FakeClock).
#include <gtest/gtest.h>

#include <fstream>

#include "federation/inventory.h"
#include "gateway/app/config.h"
#include "gateway/peering/core.h"
#include "gateway/ops/metrics.h"
#include "gateway/store/store.h"
#include "tests/support/fake_clock.h"
#include "tests/support/temp_dir.h"

namespace fedgate::testing {
namespace {

TEST(CoreMetricsTest, RemovedPeersAndExpiredLinksLeaveMetrics) {
  TempDir dir;
  for (const char* f : {"ca.pem", "cert.pem", "key.pem"}) std::ofstream(dir / f) << "x";
  auto cfg = gateway::ParseConfig(
      "site: site-a\nfederation: aidc\nlisten: {grpc: 127.0.0.1:1}\n"
      "tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\ndata_dir: data\n"
      "inventory:\n  nodes:\n    - {name: a-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2}\n"
      "bench: {link_max_age: 10s}\n",
      dir.path(), "fedgate.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto store = gateway::Store::Open(cfg->data_dir);
  ASSERT_TRUE(store.ok());
  FakeClock clock;
  gateway::Metrics metrics;
  gateway::GatewayCore core(*cfg, &clock, store->get(),
                            std::make_unique<federation::StaticInventory>(cfg->nodes), &metrics);
  ASSERT_TRUE(core.Init().ok());
  for (const char* peer : {"site-b", "site-c"}) {
    ASSERT_TRUE(core.AddPeer(peer, "127.0.0.1:2").ok());
    v1::Link link;
    link.set_from("site-a");
    link.set_to(peer);
    link.set_gbps(9.5);
    link.set_measured_at_unix_ms(clock.NowMs());
    core.RecordLink(link);
  }
  core.RecordError("site-b", "connection refused");
  ASSERT_TRUE(core.Tick().ok());
  std::string text = metrics.Render();
  EXPECT_NE(text.find("fedgate_peer_up{peer=\"site-b\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("fedgate_peer_push_errors_total{peer=\"site-b\"}"), std::string::npos);
  EXPECT_NE(text.find("fedgate_link_gbps{from=\"site-a\",to=\"site-b\"}"), std::string::npos);

  // site-c's link is measured again; site-b's goes stale past link_max_age.
  clock.Advance(6000);
  v1::Link again;
  again.set_from("site-a");
  again.set_to("site-c");
  again.set_gbps(8);
  again.set_measured_at_unix_ms(clock.NowMs());
  core.RecordLink(again);
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
