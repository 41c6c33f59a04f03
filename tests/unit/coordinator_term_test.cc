// The election rules of a job's coordination, one rule at a time: members
// and witnesses, the succession order, a grant per term, pre-vote and
// stickiness, fencing by term, single-member changes, the fence times.
#include "federation/coordinator_term.h"

#include <gtest/gtest.h>

#include <set>

namespace fedgate::federation {
namespace {

using Sites = std::vector<std::string>;

constexpr int64_t kLease = 3000;
const std::string kJob = "j-1";
const Sites kMembers = {"a", "b", "c"};

TermState Following(const std::string& coordinator, uint64_t term, int64_t heard_ms) {
  TermState s;
  s.term = term;
  s.coordinator = coordinator;
  s.heard_ms = heard_ms;
  return s;
}

Grant GrantOf(const std::string& granter, uint64_t term = 2, const std::string& candidate = "b") {
  return Grant{kJob, term, candidate, granter};
}

TEST(CoordinatorTerm, MembersAreTheCoordinatorTheSitesAndTheWitnessesOnce) {
  EXPECT_EQ(JobMembers("a", {"b", "a", "c"}, {"d"}), (Sites{"a", "b", "c", "d"}));
  EXPECT_EQ(Majority(1), 1u);
  EXPECT_EQ(Majority(3), 2u);
  EXPECT_EQ(Majority(4), 3u);
  EXPECT_EQ(Majority(5), 3u);
}

TEST(CoordinatorTerm, WitnessesFillUpToThreeStablyWhateverThePeerOrder) {
  const Sites peers = {"p1", "p2", "p3", "p4", "p5", "a"};
  const Sites w = ChooseWitnesses(kJob, {"a"}, peers);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(ChooseWitnesses(kJob, {"a"}, {"p5", "a", "p4", "p3", "p2", "p1", "p3"}), w);
  for (const auto& s : w) EXPECT_NE(s, "a") << "a member is no witness";
  EXPECT_EQ(ChooseWitnesses(kJob, {"a", "b"}, peers).size(), 1u);
  EXPECT_TRUE(ChooseWitnesses(kJob, {"a", "b", "c"}, peers).empty());
  EXPECT_EQ(ChooseWitnesses(kJob, {"a"}, {"a", "p1"}), Sites{"p1"}) << "fewer when peers are few";
  // Different jobs spread over different witnesses.
  std::set<std::string> used;
  for (int j = 0; j < 40; ++j) {
    for (const auto& s : ChooseWitnesses("job-" + std::to_string(j), {"a"}, peers)) used.insert(s);
  }
  EXPECT_EQ(used.size(), 5u);
}

TEST(CoordinatorTerm, SuccessionGoesByRankOrderThenWitnessesNeverTheCoordinator) {
  const Sites members = JobMembers("a", {"c", "a", "b"}, {"w"});
  EXPECT_EQ(SuccessionOrder({"c", "a", "b"}, members, "a"), (Sites{"c", "b", "w"}));
  EXPECT_EQ(SuccessionOrder({"c", "a", "b"}, members, "c"), (Sites{"a", "b", "w"}));
  EXPECT_EQ(TakeoverDelayMs(0, 9000, 1500), 9000);
  EXPECT_EQ(TakeoverDelayMs(2, 9000, 1500), 12000);
  EXPECT_EQ(TakeoverDelayMs(-1, 9000, 1500), -1);
}

TEST(CoordinatorTerm, AMemberGrantsOneCandidatePerTerm) {
  TermState s = Following("a", 1, 0);
  const auto first = AnswerVote(&s, kMembers, {kJob, 2, "b", false}, 10'000, kLease);
  EXPECT_TRUE(first.granted) << first.reason;
  EXPECT_EQ(s.term, 2u);
  EXPECT_EQ(s.voted_for, "b");
  EXPECT_EQ(s.coordinator, "") << "undecided until the winner presents its grants";
  EXPECT_TRUE(AnswerVote(&s, kMembers, {kJob, 2, "b", false}, 10'001, kLease).granted)
      << "a lost answer may be asked again";
  const auto other = AnswerVote(&s, kMembers, {kJob, 2, "c", false}, 10'002, kLease);
  EXPECT_FALSE(other.granted);
  EXPECT_NE(other.reason.find("granted to b"), std::string::npos) << other.reason;
  EXPECT_TRUE(AnswerVote(&s, kMembers, {kJob, 3, "c", false}, 10'003, kLease).granted)
      << "a later term is a new vote";
  const auto stale = AnswerVote(&s, kMembers, {kJob, 2, "b", false}, 10'004, kLease);
  EXPECT_FALSE(stale.granted);
  EXPECT_EQ(stale.term, 3u);
}

TEST(CoordinatorTerm, AMemberThatStillHearsTheCoordinatorNeverVotesItOut) {
  TermState s = Following("a", 1, 9'000);
  for (bool pre : {true, false}) {
    const auto a = AnswerVote(&s, kMembers, {kJob, 2, "b", pre}, 11'000, kLease);
    EXPECT_FALSE(a.granted);
    EXPECT_EQ(a.coordinator, "a");
    EXPECT_NE(a.reason.find("still hears a"), std::string::npos) << a.reason;
  }
  EXPECT_EQ(s.term, 1u) << "a refused ask moves no term";
  EXPECT_TRUE(AnswerVote(&s, kMembers, {kJob, 2, "b", true}, 12'000, kLease).granted)
      << "a lease without it";
}

TEST(CoordinatorTerm, APreVoteChangesNothing) {
  TermState s = Following("a", 1, 0);
  EXPECT_TRUE(AnswerVote(&s, kMembers, {kJob, 2, "b", true}, 10'000, kLease).granted);
  EXPECT_TRUE(AnswerVote(&s, kMembers, {kJob, 2, "c", true}, 10'000, kLease).granted);
  EXPECT_EQ(s.term, 1u);
  EXPECT_EQ(s.voted_for, "");
  EXPECT_EQ(s.coordinator, "a");
  EXPECT_FALSE(AnswerVote(&s, kMembers, {kJob, 1, "b", true}, 10'000, kLease).granted)
      << "a pre-vote must be for a term ahead";
}

TEST(CoordinatorTerm, ACandidateBehindTheMembersRecordGetsNoVote) {
  // c saw world 3 (record term 1, version 9); b kept world 2's (version 6):
  // its slice there was replaced while it was cut off.
  const RecordPosition mine{1, 9};
  for (bool pre : {true, false}) {
    TermState s = Following("a", 1, 0);
    const auto a = AnswerVote(&s, kMembers, {kJob, 2, "b", pre}, 10'000, kLease, {1, 6}, mine);
    EXPECT_FALSE(a.granted);
    EXPECT_FALSE(a.hostile) << "a member behind is no enemy";
    EXPECT_NE(a.reason.find("older than this member's"), std::string::npos) << a.reason;
    EXPECT_EQ(s.term, 1u) << "a refused vote moves no term";
    EXPECT_EQ(s.voted_for, "");
  }
  TermState s = Following("a", 1, 0);
  EXPECT_TRUE(AnswerVote(&s, kMembers, {kJob, 2, "b", false}, 10'000, kLease, mine, mine).granted)
      << "as current";
  // Written by a coordinator of term 2: newer whatever its version.
  TermState t = Following("a", 1, 0);
  EXPECT_TRUE(AnswerVote(&t, kMembers, {kJob, 3, "c", false}, 10'000, kLease, {2, 1}, mine).granted);
}

TEST(CoordinatorTerm, ANonMemberIsRefusedAsHostile) {
  TermState s = Following("a", 1, 0);
  const auto a = AnswerVote(&s, kMembers, {kJob, 5, "x", false}, 10'000, kLease);
  EXPECT_FALSE(a.granted);
  EXPECT_TRUE(a.hostile);
  EXPECT_EQ(s.term, 1u);
  const auto c = AcceptCoordinatorCall(&s, kMembers, kJob, 1, "x", {}, 10'000);
  EXPECT_FALSE(c.ok);
  EXPECT_TRUE(c.hostile);
}

TEST(CoordinatorTerm, AnOldCoordinatorLeftOutOfTheMembersStillLearnsWhereTheJobWent) {
  // The job moved to b at term 2 and b's new world left a out of the members.
  TermState s = Following("b", 2, 9'000);
  const std::vector<std::string> now_members = {"b", "c", "d"};
  const auto old = AcceptCoordinatorCall(&s, now_members, kJob, 1, "a", {}, 10'000);
  EXPECT_FALSE(old.ok);
  EXPECT_FALSE(old.hostile) << "late, not hostile: it must step down, not retry";
  EXPECT_EQ(old.coordinator, "b");
  EXPECT_EQ(s.heard_ms, 9'000) << "a stale call is no word of the coordinator";
  const auto same = AcceptCoordinatorCall(&s, now_members, kJob, 2, "a", {}, 10'000);
  EXPECT_TRUE(same.hostile) << "at the current term a non-member is still refused as hostile";
}

TEST(CoordinatorTerm, GrantsCountOncePerMemberForThatTermAndCandidate) {
  EXPECT_TRUE(GrantsMajority(kMembers, kJob, 2, "b", {GrantOf("b"), GrantOf("c")}));
  EXPECT_FALSE(GrantsMajority(kMembers, kJob, 2, "b", {GrantOf("b"), GrantOf("b")}));
  EXPECT_FALSE(GrantsMajority(kMembers, kJob, 2, "b", {GrantOf("b"), GrantOf("x")}));
  EXPECT_FALSE(GrantsMajority(kMembers, kJob, 2, "b", {GrantOf("b"), GrantOf("c", 1)}));
  EXPECT_FALSE(GrantsMajority(kMembers, kJob, 2, "b", {GrantOf("b"), GrantOf("c", 2, "c")}));
  EXPECT_FALSE(GrantsMajority(kMembers, "j-2", 2, "b", {GrantOf("b"), GrantOf("c")}));
}

TEST(CoordinatorTerm, ANewTermIsAcceptedWithAMajorityOfGrantsAndFencesTheOldOne) {
  TermState s = Following("a", 1, 0);
  const auto bare = AcceptCoordinatorCall(&s, kMembers, kJob, 2, "b", {GrantOf("b")}, 10'000);
  EXPECT_FALSE(bare.ok);
  EXPECT_TRUE(bare.hostile) << "a term it was not granted";
  EXPECT_EQ(s.term, 1u);
  const auto ok = AcceptCoordinatorCall(&s, kMembers, kJob, 2, "b", {GrantOf("b"), GrantOf("c")}, 10'000);
  EXPECT_TRUE(ok.ok) << ok.reason;
  EXPECT_EQ(s.coordinator, "b");
  EXPECT_EQ(s.heard_ms, 10'000);
  EXPECT_TRUE(AcceptCoordinatorCall(&s, kMembers, kJob, 2, "b", {}, 11'000).ok)
      << "later calls of the term need no grants";
  const auto old = AcceptCoordinatorCall(&s, kMembers, kJob, 1, "a", {}, 11'500);
  EXPECT_FALSE(old.ok);
  EXPECT_FALSE(old.hostile) << "an old coordinator is not hostile, only late";
  EXPECT_EQ(old.coordinator, "b");
  EXPECT_NE(old.reason.find("term 1 is over"), std::string::npos) << old.reason;
  const auto usurper = AcceptCoordinatorCall(&s, kMembers, kJob, 2, "c", {GrantOf("a", 2, "c"), GrantOf("c", 2, "c")}, 12'000);
  EXPECT_FALSE(usurper.ok);
  EXPECT_TRUE(usurper.hostile) << "the term is b's";
  EXPECT_EQ(s.coordinator, "b");
}

TEST(CoordinatorTerm, AGrantedMemberAcceptsTheWinnerOfItsTerm) {
  TermState s = Following("a", 1, 0);
  ASSERT_TRUE(AnswerVote(&s, kMembers, {kJob, 2, "b", false}, 10'000, kLease).granted);
  EXPECT_FALSE(AcceptCoordinatorCall(&s, kMembers, kJob, 2, "b", {}, 10'100).ok)
      << "its own grant is not a majority";
  EXPECT_TRUE(AcceptCoordinatorCall(&s, kMembers, kJob, 2, "b", {GrantOf("a"), GrantOf("c")}, 10'100).ok);
  EXPECT_FALSE(AnswerVote(&s, kMembers, {kJob, 2, "c", false}, 20'000, kLease).granted)
      << "a decided term takes no more votes";
}

TEST(CoordinatorTerm, MembersChangeOneAtATime) {
  EXPECT_TRUE(CheckMembershipChange({"a", "b", "c"}, {"a", "b", "c", "d"}).ok());
  EXPECT_TRUE(CheckMembershipChange({"a", "b", "c"}, {"a", "c"}).ok());
  EXPECT_TRUE(CheckMembershipChange({"a", "b", "c"}, {"c", "b", "a"}).ok());
  const auto swap = CheckMembershipChange({"a", "b", "c"}, {"a", "b", "d"});
  EXPECT_FALSE(swap.ok());
  EXPECT_NE(std::string(swap.message()).find("1 added and 1 removed"), std::string::npos) << swap;
  EXPECT_FALSE(CheckMembershipChange({"a"}, {}).ok());
  EXPECT_FALSE(CheckMembershipChange({"a", "b"}, {"a", "b", "b"}).ok());
}

TEST(CoordinatorTerm, AChangeOfMembersCountsTheMembersBeforeIt) {
  using V = std::vector<std::string>;
  EXPECT_EQ(MembersBeforeChange({"a", "b", "c", "d"}, "d", false), (V{"a", "b", "c"}));
  EXPECT_EQ(MembersBeforeChange({"a", "c", "d"}, "b", true), (V{"a", "b", "c", "d"}));
  // d joined {a, b, c} at version 7; b is lost. The coordinator a and c
  // holding version 7 are a majority of the three before: accepted.
  EXPECT_FALSE(ChangeAccepted({"a", "b", "c"}, "a", {{"c", 6}, {"d", 7}}, 7))
      << "the new member's copy counts for nothing: it was not a member before";
  EXPECT_TRUE(ChangeAccepted({"a", "b", "c"}, "a", {{"c", 7}}, 7));
  EXPECT_TRUE(ChangeAccepted({"a", "b", "c"}, "a", {{"c", 9}}, 7)) << "a later copy has it too";
  // b leaves {a, b, c, d} at version 8: three of the four before must hold it.
  EXPECT_FALSE(ChangeAccepted({"a", "b", "c", "d"}, "a", {{"c", 8}, {"d", 7}}, 8));
  EXPECT_TRUE(ChangeAccepted({"a", "b", "c", "d"}, "a", {{"c", 8}, {"d", 8}}, 8));
  EXPECT_FALSE(ChangeAccepted({"b", "c", "d"}, "a", {{"c", 8}}, 8))
      << "a coordinator that is no member before the change counts for nothing";
}

TEST(CoordinatorTerm, ASliceIsLostOnlyAfterItsSiteHasSurelyStoppedIt) {
  EXPECT_FALSE(SliceFenced(10'000, 7'001, 3'000));
  EXPECT_TRUE(SliceFenced(10'000, 7'000, 3'000));
  // The site last heard at 7 s fences at 10 s, stops within 5 s, clocks may
  // differ by 1 s: not before 16 s.
  EXPECT_EQ(SliceLostAfterMs(7'000, 3'000, 5'000, 1'000), 16'000);
}

TEST(CoordinatorTerm, ASliceOutlivesItsLeaseUntilTheLastSuccessorCouldHaveRenewedIt) {
  // Two successors: the second asks at 9 s + 1.5 s and renews within a lease.
  EXPECT_EQ(TakeoverFenceMs(2, 9000, 1500, 3000), 13'500);
  EXPECT_GT(TakeoverFenceMs(2, 9000, 1500, 3000),
            TakeoverDelayMs(1, 9000, 1500) + 3000 - 1);
  EXPECT_EQ(TakeoverFenceMs(1, 9000, 1500, 3000), 12'000);
  // Nobody to take over: the lease alone.
  EXPECT_EQ(TakeoverFenceMs(0, 9000, 1500, 3000), 3000);
}

}  // namespace
}  // namespace fedgate::federation
