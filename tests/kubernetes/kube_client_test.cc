// kubeconfig reading and the REST client, against the fake API server in
// this process (real HTTPS, real sockets).
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <chrono>
#include <thread>

#include "gateway/kube/kube_client.h"
#include "gateway/kube/kubeconfig.h"
#include "tests/support/fake_kube/fake_kube_server.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway::kube {
namespace {

using testing::TempDir;
using testing::WriteText;
using testing::fakekube::FakeKubeServer;

std::string B64(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string Kubeconfig(const std::string& cluster, const std::string& user,
                       const std::string& current = "ctx") {
  return "apiVersion: v1\nkind: Config\ncurrent-context: " + current +
         "\ncontexts:\n- name: ctx\n  context: {cluster: c1, user: u1}\n"
         "clusters:\n- name: c1\n  cluster:\n" + cluster + "users:\n- name: u1\n  user:\n" + user;
}

TEST(Kubeconfig, ReadsTheCurrentContextsClusterAndUser) {
  TempDir dir;
  WriteText(dir / "ca.pem", "CA-PEM");
  WriteText(dir / "token", "tok-from-file\n");
  WriteText(dir / "kc", Kubeconfig("    server: https://10.1.2.3:6443/\n    certificate-authority: ca.pem\n",
                                   "    tokenFile: token\n"));
  auto a = LoadKubeconfig(dir / "kc");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->server, "https://10.1.2.3:6443");
  EXPECT_EQ(a->ca_pem, "CA-PEM");
  EXPECT_FALSE(a->insecure_skip_verify);
  EXPECT_EQ(CurrentToken(*a), "tok-from-file");
  // A rotated token is read again.
  WriteText(dir / "token", "rotated");
  EXPECT_EQ(CurrentToken(*a), "rotated");

  WriteText(dir / "kc2", Kubeconfig("    server: https://h:1\n    certificate-authority-data: " + B64("CA2") +
                                        "\n    insecure-skip-tls-verify: true\n",
                                    "    client-certificate-data: " + B64("CERT") +
                                        "\n    client-key-data: " + B64("KEY") + "\n    token: t\n"));
  auto b = LoadKubeconfig(dir / "kc2");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ca_pem, "CA2");
  EXPECT_TRUE(b->insecure_skip_verify);
  EXPECT_EQ(b->cert_pem, "CERT");
  EXPECT_EQ(b->key_pem, "KEY");
  EXPECT_EQ(CurrentToken(*b), "t");
}

TEST(Kubeconfig, ErrorsNameTheFileAndWhatIsWrong) {
  TempDir dir;
  const auto err = [&](const std::string& text) {
    WriteText(dir / "kc", text);
    auto a = LoadKubeconfig(dir / "kc");
    EXPECT_FALSE(a.ok());
    return std::string(a.status().message());
  };
  EXPECT_NE(err(Kubeconfig("    server: https://h:1\n", "    token: t\n", "nope")).find("current-context \"nope\""),
            std::string::npos);
  EXPECT_NE(err(Kubeconfig("    server: http://h:1\n", "    token: t\n")).find("not an https:// URL"),
            std::string::npos);
  EXPECT_NE(err(Kubeconfig("    server: https://h:1\n    certificate-authority: missing.pem\n", "    token: t\n"))
                .find("missing.pem"),
            std::string::npos);
  EXPECT_NE(err(Kubeconfig("    server: https://h:1\n", "    client-certificate-data: " + B64("C") + "\n"))
                .find("go together"),
            std::string::npos);
  EXPECT_NE(err("[unclosed").find(dir / "kc"), std::string::npos);
  auto missing = LoadKubeconfig(dir / "none");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find(dir / "none"), std::string::npos);
}

class KubeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = FakeKubeServer::Start({"127.0.0.1:0", "sekrit", dir_ / "logs"});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  std::unique_ptr<KubeClient> Client(const std::string& token, bool verify = true,
                                     KubeClientOptions opt = {}) {
    KubeAccess a;
    a.server = "https://127.0.0.1:" + std::to_string(server_->port());
    a.token = token;
    a.insecure_skip_verify = !verify;
    if (verify) a.ca_pem = server_->ca_pem();
    auto c = KubeClient::Make(a, opt);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  TempDir dir_;
  std::unique_ptr<FakeKubeServer> server_;
};

TEST_F(KubeClientTest, VerifiesTheServerAndSendsTheToken) {
  auto good = Client("sekrit");
  auto r = good->Call("GET", "/api/v1/namespaces");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  auto list = JsonOf(r, "listing namespaces");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(Find(*list, {"items"})->list_value().values_size(), 2);  // default, kube-system

  auto refused = JsonOf(Client("wrong")->Call("GET", "/api/v1/nodes"), "listing nodes");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(std::string(refused.status().message()).find("listing nodes: HTTP 401"), std::string::npos);

  // Trusting another CA: the handshake fails, and says where.
  KubeAccess other;
  other.server = "https://127.0.0.1:" + std::to_string(server_->port());
  other.token = "sekrit";
  auto other_server = FakeKubeServer::Start({"127.0.0.1:0", "x", dir_ / "l2"});
  ASSERT_TRUE(other_server.ok());
  other.ca_pem = (*other_server)->ca_pem();
  auto untrusted = (*KubeClient::Make(other))->Call("GET", "/api/v1/nodes");
  ASSERT_FALSE(untrusted.ok());
  EXPECT_EQ(untrusted.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(untrusted.status().message()).find("TLS handshake"), std::string::npos);
}

TEST_F(KubeClientTest, RetryAfterAndServerErrorsComeBackAsStatuses) {
  auto c = Client("sekrit");
  ASSERT_TRUE(c->Call("POST", "/fake/faults", R"({"path":"/api/v1/nodes","status":429,"retryAfter":7})").ok());
  auto r = c->Call("GET", "/api/v1/nodes");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->retry_after, "7");
  const auto st = ApiError(*r, "listing nodes");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(st.message()).find("retry after 7s"), std::string::npos);
  // The fault was for one call.
  EXPECT_EQ(c->Call("GET", "/api/v1/nodes")->status, 200);
  ASSERT_TRUE(c->Call("POST", "/fake/faults", R"({"path":"/api/v1/nodes","status":503})").ok());
  EXPECT_EQ(JsonOf(c->Call("GET", "/api/v1/nodes"), "x").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(KubeClientTest, AHungServerMeetsTheDeadline) {
  KubeClientOptions opt;
  opt.request_timeout = std::chrono::milliseconds(400);
  auto c = Client("sekrit", true, opt);
  ASSERT_TRUE(c->Call("POST", "/fake/faults", R"({"path":"/api/v1/pods","hangMs":5000})").ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c->Call("GET", "/api/v1/pods");
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(took, std::chrono::seconds(3));
}

TEST_F(KubeClientTest, WatchStreamsChangesAfterAVersionAndSays410WhenCompacted) {
  auto c = Client("sekrit");
  auto list = JsonOf(c->Call("GET", "/api/v1/namespaces/default/configmaps"), "list");
  ASSERT_TRUE(list.ok());
  const std::string rv = FindString(*list, {"metadata", "resourceVersion"});
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    (void)c->Call("POST", "/api/v1/namespaces/default/configmaps",
                  R"({"metadata":{"name":"one"},"data":{"k":"v"}})");
    (void)c->Call("PATCH", "/api/v1/namespaces/default/configmaps/one", R"({"data":{"k":"w"}})",
                  "application/merge-patch+json");
  });
  std::vector<std::string> seen;
  auto w = c->Watch("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=" + rv,
                    std::chrono::seconds(5), [&](const Json& ev) {
                      seen.push_back(FindString(ev, {"type"}) + " " +
                                     FindString(ev, {"object", "data", "k"}));
                      return seen.size() < 2;
                    });
  writer.join();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED v", "MODIFIED w"}));

  // After a compaction the old version is gone: an ERROR event with 410.
  ASSERT_TRUE(c->Call("POST", "/fake/compact").ok());
  std::string code, reason;
  (void)c->Watch("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=" + rv,
                 std::chrono::seconds(5), [&](const Json& ev) {
                   if (FindString(ev, {"type"}) == "ERROR") {
                     code = std::to_string(static_cast<int>(FindNumber(ev, {"object", "code"}).value_or(0)));
                     reason = FindString(ev, {"object", "reason"});
                   }
                   return false;
                 });
  EXPECT_EQ(code, "410");
  EXPECT_EQ(reason, "Expired");
}

}  // namespace
}  // namespace fedgate::gateway::kube
