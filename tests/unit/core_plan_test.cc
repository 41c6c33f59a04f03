// GatewayCore keeps its link matrix until links or ads change: a new
// measurement, a peer's new ad and an ad that expires must all reach the
// next plan or listing (real GatewayCore and store, FakeClock).
#include <gtest/gtest.h>

#include "federation/capacity_view.h"
#include "tests/support/test_core.h"

namespace fedgate::testing {
namespace {

constexpr int64_t kTtlMs = 10000;

class CorePlanTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(t_.Start("60s")); }

  // `site` advertises `gpus` free GPUs (and links) at seq `seq`.
  void Advertise(const std::string& site, uint64_t seq, const std::vector<v1::Link>& links = {},
                 uint32_t gpus = 4, int64_t ttl_ms = kTtlMs) {
    std::vector<federation::Node> nodes;
    if (gpus > 0) {
      nodes.emplace_back();
      nodes.back().name = site + "-n1";
      nodes.back().gpu_model = "A100-80GB";
      nodes.back().gpus = gpus;
    }
    auto ad = federation::MakeOwnAd(site, nodes, seq, clock_.NowMs(), ttl_ms, 1000);
    ad.set_incarnation(1);
    for (const auto& l : links) *ad.add_links() = l;
    v1::AdvertiseRequest req;
    req.set_site(site);
    *req.add_ads() = ad;
    const gateway::Identity peer{"aidc", gateway::Role::kGateway, site, "", ""};
    auto resp = core_->Advertise(peer, req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    ASSERT_EQ(resp->accepted(), 1u) << site << " seq " << seq << ": " << resp->ShortDebugString();
  }

  // The site a 6-GPU job takes besides site-a (2 GPUs here, 4 at a peer).
  std::string PeerChosen() {
    v1::JobSpec spec;
    spec.set_name("t");
    spec.set_gpus(6);
    spec.add_command("true");
    auto plan = core_->Plan(spec, {});
    if (!plan.ok()) return "error: " + std::string(plan.status().message());
    if (!plan->placeable()) return "unplaceable: " + plan->summary();
    std::string out;
    for (const auto& s : plan->sites()) {
      if (s != "site-a") out += (out.empty() ? "" : ",") + s;
    }
    return out;
  }

  TestCore t_;
  FakeClock& clock_ = t_.clock;
  std::unique_ptr<gateway::GatewayCore>& core_ = t_.core;
};

TEST_F(CorePlanTest, EveryChangeOfLinksOrAdsReachesTheNextPlanOrListing) {
  for (const char* peer : {"site-b", "site-c", "site-d"}) {
    ASSERT_TRUE(core_->AddPeer(peer, "127.0.0.1:2").ok());
  }
  Advertise("site-b", 1);
  Advertise("site-c", 1);
  core_->RecordLink(MakeLink("site-a", "site-b", 10, clock_.NowMs()));
  core_->RecordLink(MakeLink("site-a", "site-c", 1, clock_.NowMs()));
  EXPECT_EQ(PeerChosen(), "site-b") << "the faster link";
  EXPECT_EQ(PeerChosen(), "site-b") << "the same again, from the kept matrix";

  // A new own measurement.
  core_->RecordLink(MakeLink("site-a", "site-c", 40, clock_.NowMs()));
  EXPECT_EQ(PeerChosen(), "site-c");

  // A peer's new ad carrying a newer measurement of the same pair.
  clock_.Advance(1000);
  Advertise("site-c", 2, {MakeLink("site-c", "site-a", 0.5, clock_.NowMs())});
  EXPECT_EQ(PeerChosen(), "site-b") << "site-c's newer measurement of the pair wins";

  // An ad that expires while no other ad arrives (the store's version does
  // not move) takes its links with it. site-d offers no GPUs; its ad lives
  // 3 s, and the links' own age limit is 60 s.
  Advertise("site-d", 1, {MakeLink("site-d", "site-a", 7, clock_.NowMs())}, 0, 3000);
  auto listed = [&] {
    const auto resp = core_->ListLinks();
    for (const auto& l : resp.links()) {
      if (l.from() == "site-d") return true;
    }
    return false;
  };
  EXPECT_TRUE(listed());
  clock_.Advance(4000);
  EXPECT_FALSE(listed()) << "site-d's ad expired";
}

}  // namespace
}  // namespace fedgate::testing
