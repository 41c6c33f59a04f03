// fedctl and fedgate as operators run them: certificates without the openssl
// program, output formats, errors and exit codes, the ops endpoint.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <future>

#include <grpcpp/generic/generic_stub.h>

#include "gateway/security/identity.h"
#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

int Lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

TEST(FedctlCerts, WorkWithNoOpensslProgramOnThePath) {
  TempDir dir;
  const std::vector<std::string> env = {"PATH=" + (dir / "empty-bin")};
  auto r = RunCommand({FedctlBin(), "certs", "init-ca", "--dir", dir / "ca", "--federation",
                       "aidc"},
                      env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand({FedctlBin(), "certs", "issue", "--ca-dir", dir / "ca", "--out", dir / "gw",
                  "--site", "cn-beijing", "--role", "gateway"},
                 env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand({FedctlBin(), "certs", "issue", "--ca-dir", dir / "ca", "--out", dir / "adm",
                  "--site", "cn-beijing", "--role", "admin", "--name", "alice"},
                 env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand({FedctlBin(), "certs", "issue", "--ca-dir", dir / "ca", "--out", dir / "usr",
                  "--tenant", "vision", "--user", "bob"},
                 env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(gateway::IdentityFromCertPem(ReadText(dir / "gw/cert.pem"))->ToUri(),
            "spiffe://aidc/site/cn-beijing/gateway");
  EXPECT_EQ(gateway::IdentityFromCertPem(ReadText(dir / "adm/cert.pem"))->ToUri(),
            "spiffe://aidc/site/cn-beijing/admin/alice");
  EXPECT_EQ(gateway::IdentityFromCertPem(ReadText(dir / "usr/cert.pem"))->ToUri(),
            "spiffe://aidc/tenant/vision/user/bob");
  EXPECT_EQ(ReadText(dir / "gw/ca.pem"), ReadText(dir / "ca/ca.pem"));
}

TEST(FedctlCerts, BadRequestsAreOneLineErrors) {
  TempDir dir;
  ASSERT_EQ(RunCommand({FedctlBin(), "certs", "init-ca", "--dir", dir / "ca", "--federation",
                        "aidc"})
                .exit_code,
            0);
  auto r = RunCommand({FedctlBin(), "certs", "issue", "--ca-dir", dir / "ca", "--out", dir / "x",
                       "--site", "cn-beijing", "--role", "wizard"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown role \"wizard\""), std::string::npos) << r.err;
  r = RunCommand({FedctlBin(), "certs", "issue", "--ca-dir", dir / "nope", "--out", dir / "x",
                  "--site", "cn-beijing", "--role", "gateway"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  r = RunCommand({FedctlBin(), "certs", "init-ca", "--dir", dir / "ca", "--federation", "aidc"});
  EXPECT_NE(r.exit_code, 0) << "overwrote an existing CA";
  r = RunCommand({FedctlBin(), "certs", "issue", "--ca-dir", dir / "ca", "--out", dir / "x",
                  "--site", "Not Valid", "--role", "gateway"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

class FedctlLive : public ::testing::Test {
 protected:
  void SetUp() override {
    SiteOptions a;
    a.site = "cn-beijing";
    a.node_lines = {"{name: n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 8}"};
    fed_.AddSite(a);
    fed_.Start("cn-beijing");
    ASSERT_TRUE(fed_.WaitReady("cn-beijing")) << fed_.log("cn-beijing");
  }
  CommandResult Fedctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {FedctlBin()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  TestCa ca_;
  TestFederation fed_{&ca_};
};

TEST_F(FedctlLive, JsonCapacityIsOneDocumentWithSnakeCaseAndNumbers) {
  // Global flags after the noun, as DESIGN.md allows.
  auto r = Fedctl({"capacity", "-o", "json", "--gateway", fed_.endpoint("cn-beijing"),
                   "--tls-dir", fed_.admin_tls_dir("cn-beijing")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_EQ(Lines(r.out), 1);
  v1::GetCapacityResponse parsed;
  google::protobuf::util::JsonParseOptions strict;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &parsed, strict).ok()) << r.out;
  ASSERT_EQ(parsed.sites_size(), 1);
  EXPECT_EQ(parsed.sites(0).state(), v1::SiteCapacity::local);
  EXPECT_NE(r.out.find("\"free_gpus\":8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"age_seconds\":0"), std::string::npos) << "zero values printed";

  // The same with global flags first, and as YAML.
  r = Fedctl({"--gateway", fed_.endpoint("cn-beijing"), "--tls-dir",
              fed_.admin_tls_dir("cn-beijing"), "-o", "yaml", "capacity"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  YAML::Node y = YAML::Load(r.out);
  EXPECT_EQ(y["sites"][0]["total_gpus"].as<int>(), 8);

  r = Fedctl({"--gateway", fed_.endpoint("cn-beijing"), "--tls-dir",
              fed_.admin_tls_dir("cn-beijing"), "capacity"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("A100-80GB 8/8"), std::string::npos) << r.out;
}

TEST_F(FedctlLive, FailuresAreOneLineOnStderrWithNonZeroExit) {
  auto r = Fedctl({"-o", "json", "capacity", "--gateway", "127.0.0.1:" + std::to_string(FreePort()),
                   "--tls-dir", fed_.admin_tls_dir("cn-beijing")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty()) << "nothing on stdout on failure: " << r.out;
  EXPECT_EQ(Lines(r.err), 1) << r.err;

  r = Fedctl({"capacity", "--gateway", fed_.endpoint("cn-beijing"), "--tls-dir",
              fed_.dir("cn-beijing") + "/nowhere"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nowhere"), std::string::npos) << r.err;

  r = Fedctl({"-o", "xml", "capacity"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("xml"), std::string::npos);

  // A peer site's gateway certificate is not an admin of this site.
  TempDir other;
  WriteTlsDir(other.path(), ca_.Gateway("cn-shanghai"));
  r = Fedctl({"peers", "list", "--gateway", fed_.endpoint("cn-beijing"), "--tls-dir",
              other.path()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("PERMISSION_DENIED"), std::string::npos) << r.err;
}

// --site (or DIR/site, or $FEDCTL_SITE) pins the server to one site's
// gateway; without a pin any gateway of the federation is accepted.
TEST_F(FedctlLive, APinnedSiteRefusesAnotherSitesGateway) {
  const std::string tls = fed_.admin_tls_dir("cn-beijing");
  auto at = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"capacity", "--gateway", fed_.endpoint("cn-beijing"),
                                     "--tls-dir", tls};
    args.insert(args.end(), extra.begin(), extra.end());
    return Fedctl(args);
  };
  EXPECT_EQ(at({}).exit_code, 0);
  EXPECT_EQ(at({"--site", "cn-beijing"}).exit_code, 0) << at({"--site", "cn-beijing"}).err;
  auto wrong = at({"--site", "cn-shanghai"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("refused the TLS handshake"), std::string::npos) << wrong.err;
  EXPECT_EQ(at({"--site", "Not A Site"}).exit_code, 2);
  // The same pin, recorded beside the TLS files.
  TempDir pinned;
  for (const char* f : {"ca.pem", "cert.pem", "key.pem"}) {
    WriteText(pinned / f, ReadText(tls + "/" + f));
  }
  WriteText(pinned / "site", "cn-shanghai\n");
  auto r = Fedctl({"capacity", "--gateway", fed_.endpoint("cn-beijing"), "--tls-dir", pinned.path()});
  EXPECT_NE(r.exit_code, 0) << r.out;
  WriteText(pinned / "site", "cn-beijing\n");
  r = Fedctl({"capacity", "--gateway", fed_.endpoint("cn-beijing"), "--tls-dir", pinned.path()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(FedctlLive, OpsEndpointServesHealthReadinessAndMetrics) {
  int status = 0;
  EXPECT_EQ(HttpGet(fed_.ops_port("cn-beijing"), "/healthz", &status), "ok\n");
  EXPECT_EQ(status, 200);
  HttpGet(fed_.ops_port("cn-beijing"), "/readyz", &status);
  EXPECT_EQ(status, 200);
  HttpGet(fed_.ops_port("cn-beijing"), "/nope", &status);
  EXPECT_EQ(status, 404);
  const std::string m = HttpGet(fed_.ops_port("cn-beijing"), "/metrics", &status);
  EXPECT_EQ(status, 200);
  for (const char* name : {"fedgate_peers_up", "fedgate_ad_oldest_age_seconds",
                           "fedgate_authz_refusals_total", "fedgate_ads_received_total"}) {
    EXPECT_NE(m.find(std::string("# TYPE ") + name), std::string::npos) << name;
  }
}

TEST_F(FedctlLive, GrpcHealthServiceAnswersServing) {
  // grpc.health.v1.Health/Check with an empty request; the reply's field 1
  // (status) is SERVING = 1, i.e. the bytes 08 01.
  auto channel = TlsChannel(fed_.endpoint("cn-beijing"), fed_.admin_tls("cn-beijing"));
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::ByteBuffer request, response;
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status st) { done.set_value(st); });
  auto st = done.get_future().get();
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST(FedgateDaemon, BadConfigIsOneLineNamingTheKeyAndExit2) {
  TempDir dir;
  WriteText(dir / "f.yaml",
            "site: cn-beijing\nfederation: aidc\nlisten: {grpc: 127.0.0.1:1}\n"
            "tls: {ca: a, cert: b, key: c}\ninventory: {nodes: []}\nbogus: 1\n");
  auto r = RunCommand({FedgateBin(), "--config", dir / "f.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("f.yaml:6: unknown key \"bogus\""), std::string::npos) << r.err;

  r = RunCommand({FedgateBin(), "--config", dir / "missing.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.yaml"), std::string::npos) << r.err;

  TestCa ca;
  WriteTlsDir(dir / "tls", ca.Gateway("cn-beijing"));
  WriteText(dir / "g.yaml",
            "site: cn-beijing\nfederation: aidc\nlisten: {grpc: 127.0.0.1:1}\n"
            "tls: {ca: tls/ca.pem, cert: tls/cert.pem, key: tls/key.pem}\n"
            "inventory:\n  nodes:\n    - {name: n1, address: 1.2.3.4, gpu_model: H100, gpus: 0}\n");
  r = RunCommand({FedgateBin(), "--config", dir / "g.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("inventory.nodes[0].gpus"), std::string::npos) << r.err;
}

TEST(FedgateDaemon, PortInUseFailsLoudly) {
  TestCa ca;
  TestFederation fed(&ca);
  SiteOptions a;
  a.site = "cn-beijing";
  a.node_lines = {"{name: n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 8}"};
  fed.AddSite(a);
  fed.Start("cn-beijing");
  ASSERT_TRUE(fed.WaitReady("cn-beijing"));
  // A second gateway on the same gRPC port must not silently share it.
  TempDir dir;
  WriteTlsDir(dir / "tls", ca.Gateway("cn-beijing"));
  WriteText(dir / "c.yaml", "site: cn-beijing\nfederation: aidc\nlisten: {grpc: " +
                                fed.endpoint("cn-beijing") + ", ops: 127.0.0.1:" +
                                std::to_string(FreePort()) + ", http: 127.0.0.1:" +
                                std::to_string(FreePort()) +
                                "}\ntls: {ca: tls/ca.pem, cert: tls/cert.pem, key: tls/key.pem}\n"
                                "data_dir: data\ninventory:\n  nodes:\n"
                                "    - {name: n1, address: 1.2.3.4, gpu_model: H100, gpus: 1}\n");
  auto r = RunCommand({FedgateBin(), "--config", dir / "c.yaml"}, {}, 20000);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("listen.grpc"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fedgate::testing
