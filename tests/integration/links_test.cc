// Link measurement between real gateways on loopback: probes on peer-up and on
// demand, links travelling inside ads, fedctl links output.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

SiteOptions Site(const std::string& name, std::vector<std::string> peers, bool probe_on_up) {
  SiteOptions o;
  o.site = name;
  o.peers = std::move(peers);
  o.node_lines = {"{name: n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 8}"};
  o.probe_on_peer_up = probe_on_up;
  return o;
}

std::optional<v1::ListLinksResponse> Links(TestFederation& fed, const std::string& site) {
  auto r = RunCommand({FedctlBin(), "links", "-o", "json", "--gateway", fed.endpoint(site),
                       "--tls-dir", fed.admin_tls_dir(site)});
  if (r.exit_code != 0) return std::nullopt;
  v1::ListLinksResponse resp;
  if (!google::protobuf::util::JsonStringToMessage(r.out, &resp).ok()) return std::nullopt;
  return resp;
}

bool Has(const v1::ListLinksResponse& l, const std::string& from, const std::string& to) {
  for (const auto& x : l.links()) {
    if (x.from() == from && x.to() == to && x.gbps() > 0) return true;
  }
  return false;
}

TEST(Links, ProbedOnPeerUpAndSeenByEverySiteThroughAds) {
  TestCa ca;
  TestFederation fed(&ca);
  fed.AddSite(Site("site-a", {"site-b"}, true));
  fed.AddSite(Site("site-b", {"site-a", "site-c"}, true));
  fed.AddSite(Site("site-c", {"site-b"}, false));
  fed.StartAll();
  // a<->b probe each other on peer-up; b probes c. site-c never probes, yet
  // sees every link because links ride in the ads, relayed by b.
  ASSERT_TRUE(Eventually(
      [&] {
        auto l = Links(fed, "site-c");
        return l && Has(*l, "site-a", "site-b") && Has(*l, "site-b", "site-a") &&
               Has(*l, "site-b", "site-c");
      },
      30000, 200))
      << fed.log("site-b");
  auto l = Links(fed, "site-a");
  ASSERT_TRUE(l.has_value());
  for (const auto& x : l->links()) {
    EXPECT_EQ(x.method(), "tcp");
    EXPECT_EQ(x.streams(), 1u);
    EXPECT_GE(x.age_seconds(), 0);
    EXPECT_LT(x.age_seconds(), 60);
    EXPECT_GT(x.latency_ms(), 0);
  }
  EXPECT_GT(Metric(fed.ops_port("site-b"), "fedgate_link_gbps{from=\"site-a\",to=\"site-b\"}"), 0);
}

TEST(Links, ProbeOnDemandReturnsTheFreshLinkAndRefusesStrangers) {
  TestCa ca;
  TestFederation fed(&ca);
  fed.AddSite(Site("site-a", {"site-b"}, false));
  fed.AddSite(Site("site-b", {"site-a"}, false));
  fed.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed.Converged({"site-a", "site-b"}); }, 15000));
  auto before = Links(fed, "site-a");
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->links_size(), 0) << "nothing probed yet";

  auto r = RunCommand({FedctlBin(), "links", "probe", "site-b", "-o", "json", "--gateway",
                       fed.endpoint("site-a"), "--tls-dir", fed.admin_tls_dir("site-a")});
  ASSERT_EQ(r.exit_code, 0) << r.err << fed.log("site-a");
  EXPECT_NE(r.out.find("\"from\":\"site-a\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"to\":\"site-b\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"method\":\"tcp\""), std::string::npos) << r.out;
  ASSERT_TRUE(Eventually(
      [&] {
        auto l = Links(fed, "site-b");
        return l && Has(*l, "site-a", "site-b");
      },
      10000));

  r = RunCommand({FedctlBin(), "links", "probe", "site-z", "--gateway", fed.endpoint("site-a"),
                  "--tls-dir", fed.admin_tls_dir("site-a")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not an approved peer"), std::string::npos) << r.err;
}

TEST(Links, OpenBenchIsAPeerRpc) {
  TestCa ca;
  TestFederation fed(&ca);
  fed.AddSite(Site("site-a", {"site-b"}, false));
  fed.AddSite(Site("site-b", {}, false));
  fed.Start("site-a");
  ASSERT_TRUE(fed.WaitReady("site-a"));
  auto open = [&](const TlsFiles& files, const std::string& site) {
    auto stub = v1::PeerService::NewStub(TlsChannel(fed.endpoint("site-a"), files));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::OpenBenchRequest req;
    req.set_site(site);
    req.set_transport("tcp");
    req.set_streams(1);
    v1::OpenBenchResponse resp;
    auto st = stub->OpenBench(&ctx, req, &resp);
    return std::make_pair(st, resp);
  };
  auto [ok, resp] = open(ca.Gateway("site-b"), "site-b");
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_GT(resp.port(), 0u);
  EXPECT_EQ(resp.token().size(), 32u);
  auto [again, resp2] = open(ca.Gateway("site-b"), "site-b");
  EXPECT_NE(resp2.token(), resp.token()) << "tokens are one-time";
  EXPECT_EQ(open(ca.User("t", "u"), "site-b").first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(open(ca.Gateway("site-x"), "site-x").first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

}  // namespace
}  // namespace fedgate::testing
