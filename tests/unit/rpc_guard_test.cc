// The door of every gRPC handler (gateway/api/rpc_guard.h), with real
// certificates from a test CA in a fake AuthContext: a refused caller never
// reaches the handler and is not counted as handled; an accepted one is,
// and its handler's status is the call's.
#include "gateway/api/rpc_guard.h"

#include <gtest/gtest.h>

#include <map>

#include "tests/support/pki.h"

namespace fedgate::gateway {
namespace {

// The properties gRPC's TLS layer sets, as the Authorizer reads them.
class FakeAuthContext final : public grpc::AuthContext {
 public:
  explicit FakeAuthContext(std::string pem) {
    if (!pem.empty()) props_["x509_pem_cert"].push_back(std::move(pem));
  }
  bool IsPeerAuthenticated() const override { return !props_.empty(); }
  std::vector<grpc::string_ref> GetPeerIdentity() const override { return {}; }
  std::string GetPeerIdentityPropertyName() const override { return ""; }
  std::vector<grpc::string_ref> FindPropertyValues(const std::string& name) const override {
    std::vector<grpc::string_ref> out;
    if (auto it = props_.find(name); it != props_.end()) {
      for (const auto& v : it->second) out.emplace_back(v);
    }
    return out;
  }
  grpc::AuthPropertyIterator begin() const override { return Empty(); }
  grpc::AuthPropertyIterator end() const override { return Empty(); }
  void AddProperty(const std::string& key, const grpc::string_ref& value) override {
    props_[key].emplace_back(value.data(), value.size());
  }
  bool SetPeerIdentityPropertyName(const std::string&) override { return false; }

 private:
  struct EmptyIterator : grpc::AuthPropertyIterator {};
  static grpc::AuthPropertyIterator Empty() { return EmptyIterator(); }
  std::map<std::string, std::vector<std::string>> props_;
};

class RpcGuardTest : public ::testing::Test {
 protected:
  absl::Status Call(const std::string& pem, RpcClass cls, absl::Status answer = absl::OkStatus()) {
    FakeAuthContext auth(pem);
    return RunGuarded(auth, &authz_, &metrics_, cls, "Advertise", [&](const Identity& id) {
      ran_as_.push_back(id.site);
      return answer;
    });
  }
  testing::TestCa ca_;
  Metrics metrics_;
  Authorizer authz_{"aidc", "cn-beijing", [](std::string_view s) { return s == "cn-shanghai"; },
                    &metrics_};
  std::vector<std::string> ran_as_;
};

TEST_F(RpcGuardTest, AnApprovedPeerReachesTheHandlerAndIsCounted) {
  const auto st = Call(ca_.Gateway("cn-shanghai").cert_pem, RpcClass::kPeer,
                       absl::NotFoundError("the handler's own answer"));
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(ran_as_, std::vector<std::string>{"cn-shanghai"});
  EXPECT_EQ(metrics_.Get("fedgate_peer_rpc_handled_total", {{"method", "Advertise"}}), 1);
}

TEST_F(RpcGuardTest, ARefusedCallerNeverReachesTheHandler) {
  const auto tenant = Call(ca_.User("vision", "alice").cert_pem, RpcClass::kPeer);
  EXPECT_EQ(tenant.code(), absl::StatusCode::kPermissionDenied) << tenant;
  const auto stranger = Call(ca_.Gateway("cn-shenzhen").cert_pem, RpcClass::kPeer);
  EXPECT_EQ(stranger.code(), absl::StatusCode::kPermissionDenied) << stranger;
  const auto peer_as_admin = Call(ca_.Gateway("cn-shanghai").cert_pem, RpcClass::kAdmin);
  EXPECT_EQ(peer_as_admin.code(), absl::StatusCode::kPermissionDenied) << peer_as_admin;
  const auto none = Call("", RpcClass::kJob);
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated) << none;
  EXPECT_TRUE(ran_as_.empty());
  EXPECT_EQ(metrics_.Get("fedgate_peer_rpc_handled_total", {{"method", "Advertise"}}), 0);
  EXPECT_EQ(metrics_.Get("fedgate_authz_refusals_total",
                         {{"rpc_class", "peer"}, {"reason", "role"}}),
            2);
}

TEST_F(RpcGuardTest, AGarbledCertificateIsUnauthenticated) {
  const auto st = Call("-----BEGIN CERTIFICATE-----\nnot a certificate\n", RpcClass::kJob);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_TRUE(ran_as_.empty());
}

}  // namespace
}  // namespace fedgate::gateway
