#include "gateway/security/authz.h"

#include <gtest/gtest.h>

namespace fedgate::gateway {
namespace {

Identity Id(const std::string& uri) { return *ParseSpiffeId(uri); }

absl::Status Check(const std::string& uri, RpcClass cls) {
  auto approved = [](std::string_view s) { return s == "cn-shanghai"; };
  return Decide(Id(uri), cls, "aidc", "cn-beijing", approved);
}

TEST(Authz, PeerRpcsOnlyFromApprovedPeerGateways) {
  EXPECT_TRUE(Check("spiffe://aidc/site/cn-shanghai/gateway", RpcClass::kPeer).ok());
  EXPECT_EQ(Check("spiffe://aidc/site/cn-shenzhen/gateway", RpcClass::kPeer).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Check("spiffe://aidc/site/cn-beijing/gateway", RpcClass::kPeer).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Check("spiffe://aidc/site/cn-shanghai/admin/ops", RpcClass::kPeer).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Check("spiffe://aidc/tenant/t/user/u", RpcClass::kPeer).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Check("spiffe://other/site/cn-shanghai/gateway", RpcClass::kPeer).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(Authz, AdminRpcsOnlyFromThisSitesAdmins) {
  EXPECT_TRUE(Check("spiffe://aidc/site/cn-beijing/admin/ops", RpcClass::kAdmin).ok());
  EXPECT_FALSE(Check("spiffe://aidc/site/cn-shanghai/admin/ops", RpcClass::kAdmin).ok());
  EXPECT_FALSE(Check("spiffe://aidc/site/cn-beijing/gateway", RpcClass::kAdmin).ok());
  EXPECT_FALSE(Check("spiffe://aidc/tenant/t/user/u", RpcClass::kAdmin).ok());
  EXPECT_FALSE(Check("spiffe://other/site/cn-beijing/admin/ops", RpcClass::kAdmin).ok());
}

TEST(Authz, StatusCodesMapOneToOne) {
  EXPECT_EQ(ToGrpc(absl::PermissionDeniedError("x")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ToGrpc(absl::NotFoundError("x")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpc(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(ToGrpc(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace fedgate::gateway
