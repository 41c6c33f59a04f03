// Tenant homes from the sites' ads (federation/tenant_homes), pure: who
// governs a tenant, a home that went silent, two sites claiming one tenant.
#include "federation/tenant_homes.h"

#include <gtest/gtest.h>

namespace fedgate::federation {
namespace {

StoredAd Ad(const std::string& origin, const std::vector<std::pair<std::string, uint32_t>>& tenants,
            int64_t received_at_ms = 1000) {
  StoredAd s;
  s.ad.set_origin(origin);
  s.ad.set_issued_at_unix_ms(received_at_ms);
  s.ad.set_interval_ms(1000);
  s.ad.set_ttl_ms(10'000);
  for (const auto& [t, gpus] : tenants) {
    auto* q = s.ad.add_tenants();
    q->set_tenant(t);
    q->set_gpus(gpus);
  }
  s.received_at_ms = received_at_ms;
  return s;
}

TEST(TenantHomes, TheAdvertisingSiteIsTheHomeAndIsRememberedWhenItsAdExpires) {
  const StoredAd bj = Ad("bj", {{"vision", 8}});
  KnownHomes known;
  EXPECT_TRUE(RefreshHomes({&bj}, &known));
  EXPECT_FALSE(RefreshHomes({&bj}, &known)) << "nothing new";
  auto home = HomeOf("vision", "sh", {&bj}, known, 1500);
  ASSERT_TRUE(home);
  EXPECT_EQ(home->site, "bj");
  EXPECT_TRUE(home->up);
  EXPECT_EQ(home->quota.gpus(), 8u);
  // bj's ad expired: its tenants wait for it instead of going ungoverned.
  auto down = HomeOf("vision", "sh", {}, known, 60'000);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->site, "bj");
  EXPECT_FALSE(down->up);
  EXPECT_FALSE(HomeOf("nlp", "sh", {&bj}, known, 1500)) << "ungoverned: no quota limit";
  const auto all = AllQuotas({}, known);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_NE(all[0].error().find("home site bj is down"), std::string::npos) << all[0].error();
}

TEST(TenantHomes, AHomeThatStopsGoverningReleasesTheTenant) {
  const StoredAd before = Ad("bj", {{"vision", 8}});
  KnownHomes known;
  RefreshHomes({&before}, &known);
  const StoredAd after = Ad("bj", {});
  EXPECT_TRUE(RefreshHomes({&after}, &known));
  EXPECT_TRUE(known.empty());
}

TEST(TenantHomes, TwoSitesClaimingATenantIsAnErrorAndTheFirstHomeStays) {
  const StoredAd bj = Ad("bj", {{"vision", 8}});
  const StoredAd sh = Ad("sh", {{"vision", 4}});
  KnownHomes known;
  RefreshHomes({&bj, &sh}, &known);
  EXPECT_EQ(known.at("vision").home(), "bj");
  auto home = HomeOf("vision", "gz", {&bj, &sh}, known, 1500);
  ASSERT_TRUE(home);
  EXPECT_NE(home->error.find("claimed by both bj and sh"), std::string::npos) << home->error;
  const auto all = AllQuotas({&bj, &sh}, known);
  ASSERT_EQ(all.size(), 2u);
  for (const auto& q : all) {
    EXPECT_NE(q.error().find("claimed by 2 sites (bj, sh)"), std::string::npos) << q.error();
  }
}

}  // namespace
}  // namespace fedgate::federation
