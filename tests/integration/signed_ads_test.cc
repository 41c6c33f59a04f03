// Ads are believed only when their origin signed them: site-b's gateway
// certificate, over a real mTLS channel to site-a, sends what a hostile or
// broken peer would. Each ad is refused and counted by reason, and site-a's
// view does not move; the genuine ads of site-c, relayed by site-b to site-a
// (which does not peer with c), are still accepted.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "fedgate/v1/federation.grpc.pb.h"
#include "gateway/security/ad_signing.h"
#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

class SignedAdsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto site = [](const std::string& name, std::vector<std::string> peers) {
      SiteOptions o;
      o.site = name;
      o.peers = std::move(peers);
      o.interval = "500ms";
      o.ttl = "3s";
      o.node_lines = {"{name: " + name + "-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 4}"};
      return o;
    };
    fed_.AddSite(site("site-a", {"site-b"}));
    fed_.AddSite(site("site-b", {"site-a", "site-c"}));
    fed_.AddSite(site("site-c", {"site-b"}));
    fed_.StartAll();
    ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c"}); }, 20000))
        << fed_.log("site-a");
  }

  v1::CapacityAd Ad(const std::string& origin, uint64_t seq) {
    v1::CapacityAd ad;
    ad.set_origin(origin);
    ad.set_seq(seq);
    ad.set_incarnation(NowMs());
    ad.set_issued_at_unix_ms(NowMs());
    ad.set_ttl_ms(60'000);
    ad.set_interval_ms(500);
    auto* n = ad.add_nodes();
    n->set_name(origin + "-evil");
    n->set_address("203.0.113.9");  // would become MASTER_ADDR
    n->set_gpu_model("A100-80GB");
    n->set_total_gpus(64);
    n->set_free_gpus(64);
    return ad;
  }
  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  v1::SignedAd Signed(const v1::CapacityAd& ad, const TlsFiles& as) {
    auto s = gateway::SignAd(ad, as.cert_pem, as.key_pem);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::SignedAd();
  }
  // One Advertise to site-a with site-b's gateway certificate.
  v1::AdvertiseResponse Send(const v1::AdvertiseRequest& req) {
    auto stub = v1::PeerService::NewStub(TlsChannel(fed_.endpoint("site-a"), ca_.Gateway("site-b")));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::AdvertiseResponse resp;
    auto st = stub->Advertise(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }
  double Refused(const std::string& reason) {
    return Metric(fed_.ops_port("site-a"),
                  "fedgate_ads_refused_total{reason=\"" + reason + "\"}");
  }
  // site-a's view: free and total GPUs and the state of every site.
  std::map<std::string, std::string> View() {
    std::map<std::string, std::string> out;
    auto cap = fed_.Capacity("site-a");
    if (!cap) return out;
    for (const auto& s : cap->sites()) {
      out[s.site()] = std::to_string(s.free_gpus()) + "/" + std::to_string(s.total_gpus()) + " " +
                      v1::SiteCapacity::State_Name(s.state());
    }
    return out;
  }

  TestCa ca_;
  TestFederation fed_{&ca_};
};

TEST_F(SignedAdsTest, HostileAdsAreRefusedAndCountedAndTheViewStaysPut) {
  const auto before = View();
  ASSERT_EQ(before.size(), 3u);
  const TlsFiles b = ca_.Gateway("site-b");
  const TlsFiles c = ca_.Gateway("site-c");
  struct Case {
    std::string reason;
    v1::AdvertiseRequest req;
  };
  std::vector<Case> cases;
  auto one = [&](const std::string& reason, v1::SignedAd s) {
    Case k{reason, {}};
    k.req.set_site("site-b");
    *k.req.add_signed_ads() = std::move(s);
    cases.push_back(std::move(k));
  };
  // An ad for another origin (c, and an invented site), signed by b.
  one("origin_mismatch", Signed(Ad("site-c", 1'000'000), b));
  one("origin_mismatch", Signed(Ad("site-fake", 1), b));
  // c's ad with one field altered after c signed it.
  {
    v1::SignedAd s = Signed(Ad("site-c", 1'000'001), c);
    v1::CapacityAd altered;
    ASSERT_TRUE(altered.ParseFromString(s.ad()));
    altered.mutable_nodes(0)->set_free_gpus(0);
    altered.SerializeToString(s.mutable_ad());
    one("bad_signature", s);
  }
  // A link from c to a inside b's own ad.
  {
    v1::CapacityAd ad = Ad("site-b", 1'000'002);
    auto* l = ad.add_links();
    l->set_from("site-c");
    l->set_to("site-a");
    l->set_gbps(0.001);
    l->set_measured_at_unix_ms(NowMs());
    one("foreign_link", Signed(ad, b));
  }
  // A seq that would silence b for good; an ad issued an hour ahead (a
  // withdrawal, which would make b vanish).
  one("seq_out_of_range", Signed(Ad("site-b", ~uint64_t{0}), b));
  {
    v1::CapacityAd ad = Ad("site-b", 1'000'003);
    ad.set_issued_at_unix_ms(NowMs() + 3'600'000);
    ad.set_withdrawn(true);
    one("future", Signed(ad, b));
  }
  // A certificate of another federation's CA, naming site-b.
  {
    TestCa other;
    one("untrusted_certificate", Signed(Ad("site-b", 1'000'004), other.Gateway("site-b")));
  }
  // An admin's certificate of site-b is not a gateway's.
  one("not_a_gateway", Signed(Ad("site-b", 1'000'005), ca_.Admin("site-b")));
  // An unsigned ad (a peer that does not sign, with require_signed on).
  {
    Case k{"unsigned", {}};
    k.req.set_site("site-b");
    *k.req.add_ads() = Ad("site-b", 1'000'006);
    cases.push_back(std::move(k));
  }
  std::map<std::string, double> want;
  for (const auto& k : cases) want[k.reason] += 1;
  for (const auto& k : cases) {
    auto resp = Send(k.req);
    EXPECT_EQ(resp.accepted(), 0u) << k.reason;
    EXPECT_EQ(resp.rejected(), 1u) << k.reason;
  }
  for (const auto& [reason, n] : want) EXPECT_EQ(Refused(reason), n) << reason;
  // The view is what it was, also a few advertise rounds later.
  EXPECT_EQ(View(), before);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(View(), before);
  // Genuine relayed ads are still believed: c's ad reaches a through b, and
  // a refusal count moves no further.
  const double received = Metric(fed_.ops_port("site-a"), "fedgate_ads_received_total{result=\"accepted\"}");
  EXPECT_TRUE(Eventually(
      [&] {
        return Metric(fed_.ops_port("site-a"), "fedgate_ads_received_total{result=\"accepted\"}") >=
               received + 4;
      },
      10000));
  EXPECT_TRUE(fed_.Converged({"site-a", "site-b", "site-c"}));
  for (const auto& [reason, n] : want) EXPECT_EQ(Refused(reason), n) << reason;
}

TEST_F(SignedAdsTest, AGenuineRelayedAdIsAcceptedWithItsOriginsSignature) {
  // b relays c's own signed ad unchanged: a accepts it although the sender
  // is b, because c signed it.
  v1::CapacityAd ad = Ad("site-c", 1);
  ad.set_incarnation(NowMs() + 10'000);  // a newer incarnation than c's own
  ad.mutable_nodes(0)->set_name("site-c-n1");
  ad.mutable_nodes(0)->set_address("127.0.0.1");
  ad.mutable_nodes(0)->set_free_gpus(3);
  ad.mutable_nodes(0)->set_total_gpus(4);
  v1::AdvertiseRequest req;
  req.set_site("site-b");
  *req.add_signed_ads() = Signed(ad, ca_.Gateway("site-c"));
  auto resp = Send(req);
  EXPECT_EQ(resp.accepted(), 1u);
  EXPECT_EQ(View()["site-c"].substr(0, 3), "3/4");
}

// During an upgrade: a peer that does not announce "ads.signed.v1" is
// refused at the handshake with a reason that says what to do.
TEST_F(SignedAdsTest, APeerThatDoesNotSignIsRefusedAtTheHandshake) {
  auto stub = v1::PeerService::NewStub(TlsChannel(fed_.endpoint("site-a"), ca_.Gateway("site-b")));
  auto handshake = [&](std::vector<std::string> caps) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::HandshakeRequest req;
    req.set_site("site-b");
    req.set_version("0.0.9");
    for (const auto& c : caps) req.add_capabilities(c);
    v1::HandshakeResponse resp;
    auto st = stub->Handshake(&ctx, req, &resp);
    return std::make_pair(st, resp);
  };
  auto [old_st, old_resp] = handshake({"ads.v1"});
  EXPECT_EQ(old_st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(old_st.error_message().find("requires signed ads"), std::string::npos)
      << old_st.error_message();
  EXPECT_NE(old_st.error_message().find("advertise.require_signed: false"), std::string::npos);
  auto [new_st, new_resp] = handshake({"ads.v1", "ads.signed.v1"});
  ASSERT_TRUE(new_st.ok()) << new_st.error_message();
  EXPECT_EQ(new_resp.site(), "site-a");
  EXPECT_NE(std::find(new_resp.capabilities().begin(), new_resp.capabilities().end(),
                      "ads.signed.v1"),
            new_resp.capabilities().end());
}

}  // namespace
}  // namespace fedgate::testing
