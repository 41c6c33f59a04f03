// Who may talk to a gateway: every wrong certificate or role is refused, the
// handler never runs, and a good client is served right after. Certificate
// rotation takes effect without a restart.
#include <gtest/gtest.h>

#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

const char* kHandled = "fedgate_peer_rpc_handled_total{method=\"Advertise\"}";

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SiteOptions a;
    a.site = "cn-beijing";
    a.node_lines = {"{name: n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 8}"};
    a.peers = {"cn-shanghai"};
    a.interval = "1s";
    a.ttl = "5s";
    a.tls_reload = "1s";
    fed_.AddSite(a);
    SiteOptions b = a;  // never started: only its endpoint and identity matter
    b.site = "cn-shanghai";
    b.peers = {};
    fed_.AddSite(b);
    fed_.Start("cn-beijing");
    ASSERT_TRUE(fed_.WaitReady("cn-beijing")) << fed_.log("cn-beijing");
  }

  // One Advertise call, as `site`, over a fresh connection with `files`.
  grpc::Status Advertise(const TlsFiles& files, const std::string& site) {
    auto stub = v1::PeerService::NewStub(TlsChannel(fed_.endpoint("cn-beijing"), files));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::AdvertiseRequest req;
    req.set_site(site);
    v1::AdvertiseResponse resp;
    return stub->Advertise(&ctx, req, &resp);
  }

  double Handled() { return Metric(fed_.ops_port("cn-beijing"), kHandled); }

  // The refused call must not reach the handler; a good peer is then served.
  void ExpectRefused(const TlsFiles& files, const std::string& claimed_site,
                     std::initializer_list<grpc::StatusCode> codes, const std::string& what) {
    SCOPED_TRACE(what);
    const double before = Handled();
    auto st = Advertise(files, claimed_site);
    EXPECT_FALSE(st.ok());
    EXPECT_TRUE(std::find(codes.begin(), codes.end(), st.error_code()) != codes.end())
        << "code " << st.error_code() << ": " << st.error_message();
    EXPECT_EQ(Handled(), before) << "the handler ran for a refused call";
    auto good = Advertise(ca_.Gateway("cn-shanghai"), "cn-shanghai");
    EXPECT_TRUE(good.ok()) << good.error_message();
    EXPECT_EQ(Handled(), before + 1);
  }

  TestCa ca_{"aidc"};
  TestFederation fed_{&ca_};
};

TEST_F(SecurityTest, GoodPeerIsServed) {
  auto st = Advertise(ca_.Gateway("cn-shanghai"), "cn-shanghai");
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(Handled(), 1);
}

TEST_F(SecurityTest, CertificateFromAnotherCaFailsTheHandshake) {
  TestCa other("aidc");
  auto files = other.Gateway("cn-shanghai");
  files.ca_pem = ca_.ca().cert_pem;  // the client itself trusts the real server
  ExpectRefused(files, "cn-shanghai", {grpc::StatusCode::UNAVAILABLE}, "other CA");
}

TEST_F(SecurityTest, ExpiredCertificateFailsTheHandshake) {
  auto files = ca_.Leaf({"spiffe://aidc/site/cn-shanghai/gateway"}, -2 * 86400, 86400);
  ExpectRefused(files, "cn-shanghai", {grpc::StatusCode::UNAVAILABLE}, "expired");
}

TEST_F(SecurityTest, SelfSignedCertificateFailsTheHandshake) {
  auto files = SelfSigned("spiffe://aidc/site/cn-shanghai/gateway", ca_.ca().cert_pem);
  ExpectRefused(files, "cn-shanghai", {grpc::StatusCode::UNAVAILABLE}, "self-signed");
}

TEST_F(SecurityTest, TwoUriSansAreRefused) {
  auto files = ca_.Leaf(
      {"spiffe://aidc/site/cn-shanghai/gateway", "spiffe://aidc/site/cn-beijing/admin/ops"});
  ExpectRefused(files, "cn-shanghai",
                {grpc::StatusCode::UNAUTHENTICATED, grpc::StatusCode::PERMISSION_DENIED},
                "two URI SANs");
  EXPECT_GE(Metric(fed_.ops_port("cn-beijing"),
                   "fedgate_authz_refusals_total{rpc_class=\"peer\",reason=\"bad_identity\"}"),
            1);
}

TEST_F(SecurityTest, ValidCertificateOfAnUnapprovedSiteIsRefused) {
  ExpectRefused(ca_.Gateway("cn-shenzhen"), "cn-shenzhen", {grpc::StatusCode::PERMISSION_DENIED},
                "unapproved site");
  EXPECT_GE(Metric(fed_.ops_port("cn-beijing"),
                   "fedgate_authz_refusals_total{rpc_class=\"peer\",reason=\"role\"}"),
            1);
}

TEST_F(SecurityTest, TenantsAndAdminsCannotCallPeerRpcs) {
  ExpectRefused(ca_.User("vision", "bob"), "cn-shanghai", {grpc::StatusCode::PERMISSION_DENIED},
                "tenant user");
  ExpectRefused(ca_.Admin("cn-beijing"), "cn-beijing", {grpc::StatusCode::PERMISSION_DENIED},
                "this site's admin");
  ExpectRefused(ca_.Admin("cn-shanghai"), "cn-shanghai", {grpc::StatusCode::PERMISSION_DENIED},
                "peer site's admin");
}

TEST_F(SecurityTest, PeerCannotSpeakForAnotherSite) {
  const double before = Handled();
  auto st = Advertise(ca_.Gateway("cn-shanghai"), "cn-shenzhen");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Handled(), before + 1) << "authorized, then refused by the core";
}

TEST_F(SecurityTest, AdminRpcsOnlyForThisSitesAdmins) {
  auto call = [&](const TlsFiles& files) {
    auto stub = v1::AdminService::NewStub(TlsChannel(fed_.endpoint("cn-beijing"), files));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListNodesResponse resp;
    return stub->ListNodes(&ctx, {}, &resp);
  };
  EXPECT_TRUE(call(ca_.Admin("cn-beijing")).ok());
  EXPECT_EQ(call(ca_.Admin("cn-shanghai")).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(call(ca_.Gateway("cn-shanghai")).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(call(ca_.User("vision", "bob")).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Metric(fed_.ops_port("cn-beijing"),
                   "fedgate_admin_rpc_handled_total{method=\"ListNodes\"}"),
            1);
}

// As `sinfo` shows every user the partitions: a tenant's user reads capacity
// and links (counts, no node names); another site's admin and peer gateways
// still do not.
TEST_F(SecurityTest, TenantsReadCapacityAndLinks) {
  auto stub_for = [&](const TlsFiles& files) {
    return v1::AdminService::NewStub(TlsChannel(fed_.endpoint("cn-beijing"), files));
  };
  auto capacity = [&](const TlsFiles& files, v1::GetCapacityResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return stub_for(files)->GetCapacity(&ctx, {}, resp);
  };
  v1::GetCapacityResponse cap;
  ASSERT_TRUE(capacity(ca_.User("vision", "bob"), &cap).ok());
  ASSERT_GE(cap.sites_size(), 1);
  EXPECT_EQ(cap.DebugString().find("n1"), std::string::npos) << "no node names for tenants";
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListLinksResponse links;
  EXPECT_TRUE(stub_for(ca_.User("vision", "bob"))->ListLinks(&ctx, {}, &links).ok());
  EXPECT_EQ(capacity(ca_.Admin("cn-shanghai"), &cap).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(capacity(ca_.Gateway("cn-shanghai"), &cap).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SecurityTest, RotatedCaCertAndKeyTakeEffectWithoutARestart) {
  const pid_t pid = fed_.pid("cn-beijing");
  ASSERT_TRUE(Advertise(ca_.Gateway("cn-shanghai"), "cn-shanghai").ok());

  TestCa next("aidc");
  // Written and renamed into place, file by file, while the gateway runs.
  WriteTlsDir(fed_.dir("cn-beijing") + "/tls", next.Gateway("cn-beijing"));

  bool served = Eventually(
      [&] { return Advertise(next.Gateway("cn-shanghai"), "cn-shanghai").ok(); }, 15000, 200);
  ASSERT_TRUE(served) << fed_.log("cn-beijing");
  auto old = Advertise(ca_.Gateway("cn-shanghai"), "cn-shanghai");
  EXPECT_FALSE(old.ok()) << "a client of the old CA is still served";
  EXPECT_EQ(fed_.pid("cn-beijing"), pid);
  int status = 0;
  HttpGet(fed_.ops_port("cn-beijing"), "/healthz", &status);
  EXPECT_EQ(status, 200);
}

}  // namespace
}  // namespace fedgate::testing
