#include "federation/ad_store.h"

#include <gtest/gtest.h>

#include "tests/support/fake_clock.h"

namespace fedgate::federation {
namespace {

using testing::FakeClock;

v1::CapacityAd Ad(const std::string& origin, uint64_t seq, int64_t issued_ms, int64_t ttl_ms = 10000,
                  uint32_t free_gpus = 8) {
  v1::CapacityAd ad;
  ad.set_origin(origin);
  ad.set_seq(seq);
  ad.set_issued_at_unix_ms(issued_ms);
  ad.set_ttl_ms(ttl_ms);
  ad.set_interval_ms(2000);
  auto* n = ad.add_nodes();
  n->set_name("n1");
  n->set_gpu_model("A100-80GB");
  n->set_free_gpus(free_gpus);
  n->set_total_gpus(8);
  return ad;
}

class AdStoreTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  AdStore store_{"cn-beijing", &clock_};
};

TEST_F(AdStoreTest, KeepsTheNewestSeqPerOrigin) {
  const int64_t t = clock_.NowMs();
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", 5, t, 10000, 3), "cn-shanghai"), AdVerdict::kAccepted);
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", 7, t, 10000, 1), "cn-shanghai"), AdVerdict::kAccepted);
  // Older and equal seqs arrive late (reordered or relayed twice): dropped.
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", 6, t, 10000, 6), "cn-shenzhen"), AdVerdict::kStale);
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", 7, t, 10000, 6), "cn-shenzhen"), AdVerdict::kStale);
  auto got = store_.Get("cn-shanghai");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->ad.seq(), 7u);
  EXPECT_EQ(got->ad.nodes(0).free_gpus(), 1u);
  EXPECT_EQ(got->via, "cn-shanghai");
}

TEST_F(AdStoreTest, ExpiresAtIssuedPlusTtl) {
  store_.Offer(Ad("cn-shanghai", 1, clock_.NowMs(), 10000), "cn-shanghai");
  clock_.Advance(10000);
  EXPECT_TRUE(store_.Get("cn-shanghai").has_value()) << "exactly at the TTL it is still valid";
  clock_.Advance(1);
  EXPECT_FALSE(store_.Get("cn-shanghai").has_value());
  EXPECT_TRUE(store_.Fresh().empty());
  EXPECT_EQ(store_.ExpireNow(), 1);
  EXPECT_EQ(store_.ExpireNow(), 0);
}

TEST_F(AdStoreTest, RejectsAnAdExpiredOnArrival) {
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", 1, clock_.NowMs() - 20000, 10000), "cn-shanghai"),
            AdVerdict::kExpired);
  EXPECT_FALSE(store_.Get("cn-shanghai").has_value());
}

TEST_F(AdStoreTest, AnExpiredSeqCannotComeBackButANewerOneCan) {
  store_.Offer(Ad("cn-shanghai", 4, clock_.NowMs(), 1000), "cn-shanghai");
  clock_.Advance(5000);
  store_.ExpireNow();
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", 4, clock_.NowMs(), 1000), "cn-shenzhen"),
            AdVerdict::kStale);
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", 5, clock_.NowMs(), 1000), "cn-shenzhen"),
            AdVerdict::kAccepted);
}

TEST_F(AdStoreTest, RefusesOwnAndInvalidAds) {
  EXPECT_EQ(store_.Offer(Ad("cn-beijing", 99, clock_.NowMs()), "cn-shanghai"),
            AdVerdict::kOwnOrigin);
  EXPECT_EQ(store_.Offer(Ad("", 1, clock_.NowMs()), "cn-shanghai"), AdVerdict::kInvalid);
  EXPECT_EQ(store_.Offer(Ad("cn-x", 0, clock_.NowMs()), "cn-shanghai"), AdVerdict::kInvalid);
  EXPECT_EQ(store_.Offer(Ad("cn-x", 1, clock_.NowMs(), 0), "cn-shanghai"), AdVerdict::kInvalid);
}

TEST_F(AdStoreTest, PendingRelaysOnlyWhatThePeerLacksAndNeverBackToItsSource) {
  const int64_t t = clock_.NowMs();
  store_.Publish(Ad("cn-beijing", 10, t));
  store_.Offer(Ad("cn-shanghai", 3, t), "cn-shanghai");
  store_.Offer(Ad("cn-shenzhen", 8, t), "cn-shanghai");  // relayed by shanghai

  std::map<std::string, AdVersion> sent;
  auto to_shanghai = store_.Pending("cn-shanghai", sent);
  ASSERT_EQ(to_shanghai.size(), 1u) << "only our own: the others came from shanghai";
  EXPECT_EQ(to_shanghai[0].ad.origin(), "cn-beijing");

  auto to_wuhan = store_.Pending("cn-wuhan", sent);
  EXPECT_EQ(to_wuhan.size(), 3u);
  for (const auto& stored : to_wuhan) sent[stored.ad.origin()] = VersionOf(stored.ad);
  EXPECT_TRUE(store_.Pending("cn-wuhan", sent).empty()) << "nothing new: nothing to send";

  store_.Offer(Ad("cn-shenzhen", 9, t), "cn-shanghai");
  auto again = store_.Pending("cn-wuhan", sent);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].ad.seq(), 9u);
  // Never to the origin itself.
  for (const auto& stored : store_.Pending("cn-shenzhen", {})) {
    EXPECT_NE(stored.ad.origin(), "cn-shenzhen");
  }
}

// What no honest origin sends: a link that starts elsewhere, a time ahead of
// the clock skew, a seq that would silence the origin for good.
TEST_F(AdStoreTest, RefusesForeignLinksFutureTimesAndUnboundedSeqs) {
  const int64_t t = clock_.NowMs();
  auto foreign = Ad("cn-shanghai", 1, t);
  auto* l = foreign.add_links();
  l->set_from("cn-shenzhen");
  l->set_to("cn-beijing");
  EXPECT_EQ(store_.Offer(foreign, "cn-shanghai"), AdVerdict::kForeignLink);
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", 1, t + 3'600'000), "cn-shanghai"), AdVerdict::kFuture);
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", 1, t + 29'000), "cn-shanghai"), AdVerdict::kAccepted)
      << "within the 30 s skew";
  auto late_link = Ad("cn-shanghai", 2, t);
  auto* m = late_link.add_links();
  m->set_from("cn-shanghai");
  m->set_to("cn-beijing");
  m->set_measured_at_unix_ms(t + 3'600'000);
  EXPECT_EQ(store_.Offer(late_link, "cn-shanghai"), AdVerdict::kFuture);
  EXPECT_EQ(store_.Offer(Ad("cn-shanghai", ~uint64_t{0}, t), "cn-shanghai"),
            AdVerdict::kSeqOutOfRange);
  for (auto v : {AdVerdict::kForeignLink, AdVerdict::kFuture, AdVerdict::kSeqOutOfRange}) {
    EXPECT_TRUE(IsRefusal(v));
  }
  EXPECT_FALSE(IsRefusal(AdVerdict::kStale));
  ASSERT_TRUE(store_.Get("cn-shanghai").has_value());
  EXPECT_EQ(store_.Get("cn-shanghai")->ad.seq(), 1u) << "no refused ad changed the view";
}

// A restarted origin's new incarnation supersedes whatever seq the last one
// reached; an incarnation ahead of the clock is refused.
TEST_F(AdStoreTest, ANewIncarnationWinsOverAnyEarlierSeq) {
  const int64_t t = clock_.NowMs();
  auto old = Ad("cn-shanghai", 900, t);
  old.set_incarnation(static_cast<uint64_t>(t - 60'000));
  ASSERT_EQ(store_.Offer(old, "cn-shanghai"), AdVerdict::kAccepted);
  auto fresh = Ad("cn-shanghai", 1, t, 10000, 2);
  fresh.set_incarnation(static_cast<uint64_t>(t));
  EXPECT_EQ(store_.Offer(fresh, "cn-shanghai"), AdVerdict::kAccepted);
  EXPECT_EQ(store_.Offer(old, "cn-shenzhen"), AdVerdict::kStale) << "the old incarnation is over";
  EXPECT_FALSE(store_.IsNewer("cn-shanghai", VersionOf(old)));
  EXPECT_FALSE(store_.IsNewer("cn-shanghai", VersionOf(fresh)));
  EXPECT_TRUE(store_.IsNewer("cn-shanghai", {fresh.incarnation(), 2}));
  EXPECT_TRUE(store_.IsNewer("cn-wuhan", {0, 1})) << "an origin never seen";
  auto ahead = Ad("cn-shanghai", 2, t);
  ahead.set_incarnation(static_cast<uint64_t>(t + 3'600'000));
  EXPECT_EQ(store_.Offer(ahead, "cn-shanghai"), AdVerdict::kFuture);
  EXPECT_EQ(store_.Get("cn-shanghai")->ad.nodes(0).free_gpus(), 2u);
}

TEST_F(AdStoreTest, VersionMovesOnlyOnAcceptance) {
  const uint64_t v0 = store_.version();
  store_.Offer(Ad("cn-shanghai", 2, clock_.NowMs()), "cn-shanghai");
  const uint64_t v1 = store_.version();
  EXPECT_GT(v1, v0);
  store_.Offer(Ad("cn-shanghai", 2, clock_.NowMs()), "cn-shanghai");
  EXPECT_EQ(store_.version(), v1);
}

TEST_F(AdStoreTest, OldestAgeIgnoresOwnAd) {
  const int64_t t = clock_.NowMs();
  store_.Publish(Ad("cn-beijing", 1, t - 9000));
  store_.Offer(Ad("cn-shanghai", 1, t - 3000), "cn-shanghai");
  store_.Offer(Ad("cn-shenzhen", 1, t - 1000), "cn-shanghai");
  EXPECT_DOUBLE_EQ(store_.OldestAgeSeconds(), 3.0);
}

}  // namespace
}  // namespace fedgate::federation
