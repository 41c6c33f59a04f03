#include "gateway/security/identity.h"

#include <gtest/gtest.h>

#include "tests/support/pki.h"

namespace fedgate::gateway {
namespace {

TEST(Identity, ParsesTheThreeShapes) {
  auto g = ParseSpiffeId("spiffe://aidc/site/cn-beijing/gateway");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->role, Role::kGateway);
  EXPECT_EQ(g->site, "cn-beijing");
  EXPECT_EQ(g->federation, "aidc");

  auto a = ParseSpiffeId("spiffe://aidc/site/cn-beijing/admin/alice");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->role, Role::kAdmin);
  EXPECT_EQ(a->name, "alice");

  auto u = ParseSpiffeId("spiffe://aidc/tenant/vision/user/bob");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->role, Role::kUser);
  EXPECT_EQ(u->tenant, "vision");
  EXPECT_EQ(u->name, "bob");

  for (const auto& id : {*g, *a, *u}) EXPECT_EQ(ParseSpiffeId(id.ToUri())->ToUri(), id.ToUri());
}

TEST(Identity, RejectsMalformedIds) {
  for (const char* bad :
       {"https://aidc/site/a/gateway", "spiffe://aidc/site/a", "spiffe://aidc/site/a/gateway/x",
        "spiffe://aidc/site//gateway", "spiffe://aidc/site/A/gateway",
        "spiffe://aidc/tenant/t/admin/x", "spiffe://aidc/site/a/admin", "spiffe://",
        "spiffe://aidc/site/a/gateway/", "spiffe://aidc/site/a%2f/gateway"}) {
    EXPECT_FALSE(ParseSpiffeId(bad).ok()) << bad;
  }
}

TEST(Identity, FromCertificateNeedsExactlyOneUriSan) {
  testing::TestCa ca;
  auto one = IdentityFromCertPem(ca.Gateway("cn-beijing").cert_pem);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->site, "cn-beijing");

  auto two = IdentityFromCertPem(
      ca.Leaf({"spiffe://aidc/site/a/gateway", "spiffe://aidc/site/b/gateway"}).cert_pem);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(std::string(two.status().message()).find("exactly one URI SAN"), std::string::npos);

  EXPECT_FALSE(IdentityFromCertPem(ca.Leaf({}).cert_pem).ok());
  EXPECT_FALSE(IdentityFromCertPem("not a pem").ok());
}

}  // namespace

}  // namespace fedgate::gateway
