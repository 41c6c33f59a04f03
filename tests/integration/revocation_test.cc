// tls.crl: a tenant, an admin and a gateway certificate revoked with
// `openssl ca -revoke` and `-gencrl` are refused at the handshake, on gRPC
// and on REST, once the gateway re-read the CRL, without a restart. The
// REST listener also re-reads its own certificate and closes connections
// that do not complete a request within api.read_timeout (slowloris).
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "fedgate/v1/federation.grpc.pb.h"
#include "gateway/security/ad_signing.h"
#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

const char* kHandled = "fedgate_peer_rpc_handled_total{method=\"Advertise\"}";

class RevocationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A CA directory `openssl ca` can work with, around the test CA.
    ca_dir_ = tmp_ / "ca";
    std::filesystem::create_directories(ca_dir_);
    WriteText(ca_dir_ + "/ca.pem", ca_.ca().cert_pem);
    WriteText(ca_dir_ + "/ca-key.pem", ca_.ca().key_pem);
    WriteText(ca_dir_ + "/index.txt", "");
    WriteText(ca_dir_ + "/crlnumber", "01\n");
    WriteText(ca_dir_ + "/openssl.cnf",
              "[ca]\ndefault_ca = fed\n[fed]\ndir = " + ca_dir_ +
                  "\ndatabase = $dir/index.txt\ncrlnumber = $dir/crlnumber\n"
                  "certificate = $dir/ca.pem\nprivate_key = $dir/ca-key.pem\n"
                  "default_md = sha256\ndefault_crl_days = 1\n");
    crl_ = tmp_ / "crl.pem";
    GenCrl();
    SiteOptions a;
    a.site = "cn-beijing";
    a.node_lines = {"{name: n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 8}"};
    a.peers = {"cn-shanghai", "cn-shenzhen"};
    a.interval = "1s";
    a.ttl = "5s";
    a.tls_reload = "1s";
    a.tls_crl = crl_;
    a.extra_yaml = "api: {read_timeout: 1s}\n";
    fed_.AddSite(a);
    for (const char* other : {"cn-shanghai", "cn-shenzhen"}) {
      SiteOptions b = a;  // never started: only its identity matters
      b.site = other;
      b.peers = {};
      b.tls_crl = "";
      fed_.AddSite(b);
    }
    fed_.Start("cn-beijing");
    ASSERT_TRUE(fed_.WaitReady("cn-beijing")) << fed_.log("cn-beijing");
    for (const auto& [who, files] : {std::pair{"alice", ca_.User("vision", "alice")},
                                     std::pair{"ops", ca_.Admin("cn-beijing", "ops")},
                                     std::pair{"peer", ca_.Gateway("cn-shanghai")},
                                     std::pair{"relay", ca_.Gateway("cn-shenzhen")}}) {
      WriteTlsDir(tmp_ / who, files);
    }
  }
  void GenCrl() {
    auto r = RunCommand({"/usr/bin/openssl", "ca", "-config", ca_dir_ + "/openssl.cnf", "-gencrl", "-out",
                         crl_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  void Revoke(const std::string& who) {
    auto r = RunCommand({"/usr/bin/openssl", "ca", "-config", ca_dir_ + "/openssl.cnf", "-revoke",
                         tmp_ / (who + "/cert.pem")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    GenCrl();
  }
  CommandResult Fedctl(const std::string& who, std::vector<std::string> args) {
    std::vector<std::string> argv = {FedctlBin(), "-o", "json", "--gateway",
                                     fed_.endpoint("cn-beijing"), "--tls-dir", tmp_ / who};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  int Curl(const std::string& who, const std::string& path) {
    auto r = RunCommand({"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                         "--cacert", tmp_ / (who + "/ca.pem"), "--cert", tmp_ / (who + "/cert.pem"),
                         "--key", tmp_ / (who + "/key.pem"),
                         "https://127.0.0.1:" + std::to_string(fed_.http_port("cn-beijing")) + path});
    try {
      return std::stoi(r.out);
    } catch (...) {
      return 0;
    }
  }
  TlsFiles Files(const std::string& who) {
    return {ReadText(tmp_ / (who + "/ca.pem")), ReadText(tmp_ / (who + "/cert.pem")),
            ReadText(tmp_ / (who + "/key.pem"))};
  }
  // As `who` (the gateway of `site`), with `ads` signed by their origins.
  grpc::Status Advertise(const std::string& who, const std::string& site = "cn-shanghai",
                         const std::vector<v1::SignedAd>& ads = {}) {
    auto stub = v1::PeerService::NewStub(TlsChannel(fed_.endpoint("cn-beijing"), Files(who)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::AdvertiseRequest req;
    req.set_site(site);
    for (const auto& a : ads) *req.add_signed_ads() = a;
    v1::AdvertiseResponse resp;
    return stub->Advertise(&ctx, req, &resp);
  }

  TestCa ca_;
  TestFederation fed_{&ca_};
  TempDir tmp_;
  std::string ca_dir_, crl_;
};

TEST_F(RevocationTest, RevokedCertificatesAreRefusedAfterTheCrlReloadWithoutARestart) {
  ASSERT_EQ(Fedctl("alice", {"jobs", "list"}).exit_code, 0) << Fedctl("alice", {"jobs", "list"}).err;
  ASSERT_EQ(Curl("alice", "/v1/jobs"), 200);
  ASSERT_EQ(Fedctl("ops", {"peers", "list"}).exit_code, 0);
  ASSERT_TRUE(Advertise("peer").ok());
  // A connection opened before the revocation, and kept.
  auto kept = v1::PeerService::NewStub(TlsChannel(fed_.endpoint("cn-beijing"), Files("peer")));
  auto call_kept = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::AdvertiseRequest req;
    req.set_site("cn-shanghai");
    v1::AdvertiseResponse resp;
    return kept->Advertise(&ctx, req, &resp);
  };
  ASSERT_TRUE(call_kept().ok());
  const double handled = Metric(fed_.ops_port("cn-beijing"), kHandled);

  Revoke("alice");
  Revoke("ops");
  Revoke("peer");
  EXPECT_TRUE(Eventually([&] { return Fedctl("alice", {"jobs", "list"}).exit_code != 0; }, 10000))
      << "tenant still served over gRPC";
  EXPECT_TRUE(Eventually([&] { return Curl("alice", "/v1/jobs") == 0; }, 10000))
      << "tenant still served over REST (curl fails the handshake: status 0)";
  EXPECT_NE(Fedctl("ops", {"peers", "list"}).exit_code, 0) << "admin still served";
  auto peer = Advertise("peer");
  EXPECT_FALSE(peer.ok());
  EXPECT_EQ(peer.error_code(), grpc::StatusCode::UNAVAILABLE) << peer.error_message();
  auto on_kept = call_kept();
  EXPECT_EQ(on_kept.error_code(), grpc::StatusCode::UNAUTHENTICATED) << on_kept.error_message();
  EXPECT_NE(on_kept.error_message().find("revoked"), std::string::npos) << on_kept.error_message();
  EXPECT_EQ(Metric(fed_.ops_port("cn-beijing"), kHandled), handled) << "the handler never ran";
  // An ad its revoked origin signed, relayed by a peer in good standing.
  v1::CapacityAd ad;
  ad.set_origin("cn-shanghai");
  ad.set_seq(1);
  ad.set_issued_at_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count());
  ad.set_ttl_ms(60000);
  auto signed_ad = gateway::SignAd(ad, Files("peer").cert_pem, Files("peer").key_pem);
  ASSERT_TRUE(signed_ad.ok());
  ASSERT_TRUE(Advertise("relay", "cn-shenzhen", {*signed_ad}).ok());
  EXPECT_EQ(Metric(fed_.ops_port("cn-beijing"), "fedgate_ads_refused_total{reason=\"revoked\"}"), 1);
  // The gateway logged why; a certificate that was not revoked still works.
  EXPECT_NE(fed_.log("cn-beijing").find("tls.crl: loaded"), std::string::npos);
  WriteTlsDir(tmp_ / "carol", ca_.User("vision", "carol"));
  EXPECT_EQ(Fedctl("carol", {"jobs", "list"}).exit_code, 0) << Fedctl("carol", {"jobs", "list"}).err;
  EXPECT_EQ(Curl("carol", "/v1/jobs"), 200);
}

TEST_F(RevocationTest, RestClosesSilentConnectionsAndReloadsItsCertificate) {
  // A client that connects and never completes its handshake is cut off
  // after api.read_timeout (1 s), and the listener keeps serving others.
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket silent(io);
  silent.connect({boost::asio::ip::make_address("127.0.0.1"),
                  static_cast<uint16_t>(fed_.http_port("cn-beijing"))});
  const auto t0 = std::chrono::steady_clock::now();
  char byte = 0;
  boost::system::error_code ec;
  silent.read_some(boost::asio::buffer(&byte, 1), ec);  // returns when the server closes
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(ec) << "the server sent something to a silent client";
  EXPECT_GE(waited, std::chrono::milliseconds(800));
  EXPECT_LT(waited, std::chrono::milliseconds(5000));
  EXPECT_EQ(Curl("alice", "/v1/jobs"), 200);

  // A renewed gateway certificate is served without a restart.
  auto serial = [&] {
    auto r = RunCommand({"/bin/sh", "-c",
                         "openssl s_client -connect 127.0.0.1:" +
                             std::to_string(fed_.http_port("cn-beijing")) + " -cert " +
                             std::string(tmp_ / "alice/cert.pem") + " -key " +
                             std::string(tmp_ / "alice/key.pem") +
                             " </dev/null 2>/dev/null | openssl x509 -noout -serial"});
    return r.out;
  };
  const std::string before = serial();
  ASSERT_NE(before.find("serial="), std::string::npos) << before;
  WriteTlsDir(fed_.dir("cn-beijing") + "/tls", ca_.Gateway("cn-beijing"));
  EXPECT_TRUE(Eventually([&] { return serial() != before; }, 10000)) << before;
  EXPECT_EQ(Curl("alice", "/v1/jobs"), 200);
}

}  // namespace
}  // namespace fedgate::testing
