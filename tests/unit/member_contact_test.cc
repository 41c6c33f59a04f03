// Confirmed silence: the coordinator's record of unbroken contact with a
// job's members, and its claim that a silent site cannot have had its
// coordinator's silence confirmed, checked against the members' own
// pre-vote rule (AnswerVote) over randomized renewal schedules.
#include "federation/member_contact.h"

#include <gtest/gtest.h>

#include <random>

#include "federation/coordinator_term.h"

namespace fedgate::federation {
namespace {

constexpr int64_t kLease = 3000;
constexpr int64_t kWindow = kLease;  // UnconfirmedFenceMs(long, lease) - lease
const std::vector<std::string> kMembers = {"a", "b", "c"};

TEST(MemberContact, TheShortFenceIsOneMoreLeaseAndNeverPastTheTakeoverFence) {
  EXPECT_EQ(UnconfirmedFenceMs(15000, kLease), 2 * kLease);
  EXPECT_EQ(UnconfirmedFenceMs(4000, kLease), 4000);
}

TEST(MemberContact, AnswersWithinALeaseKeepTheRunAndAGapStartsANewOne) {
  MemberContact c;
  NoteContact(&c, 0, 50, kLease);
  EXPECT_EQ(c.since_ms, 50);
  NoteContact(&c, 600, 650, kLease);
  NoteContact(&c, 1200, 1250, kLease);
  EXPECT_EQ(c.since_ms, 50) << "unbroken";
  EXPECT_EQ(c.last_send_ms, 1200);
  EXPECT_EQ(c.last_answer_ms, 1250);
  // The next answer comes back a lease after the last send: the member may
  // have gone a lease without hearing the coordinator.
  NoteContact(&c, 3500, 1200 + kLease, kLease);
  EXPECT_EQ(c.since_ms, 1200 + kLease);
}

std::map<std::string, MemberContact> Heard(int64_t from, int64_t to, int64_t every) {
  std::map<std::string, MemberContact> contact;
  for (int64_t t = from; t <= to; t += every) {
    NoteContact(&contact["c"], t, t + 20, kLease);
    if (t <= 1000) NoteContact(&contact["b"], t, t + 20, kLease);  // b silent after 1 s
  }
  return contact;
}

TEST(MemberContact, AWitnessHeardThroughTheWindowMeansNoMajorityCouldConfirm) {
  // b's lease ends near 4 s and it asks until near 7 s: c heard the
  // coordinator every 600 ms from 0 to 8 s.
  EXPECT_TRUE(SilenceUnconfirmable(kMembers, "a", "b", Heard(0, 8000, 600), kLease, kWindow));
}

TEST(MemberContact, AWitnessNotHeardToTheWindowsEndCouldHaveConfirmed) {
  // c last heard at 3.6 s: from 6.6 s on it would pre-vote a out, before
  // b's window closes.
  EXPECT_FALSE(SilenceUnconfirmable(kMembers, "a", "b", Heard(0, 3600, 600), kLease, kWindow));
}

TEST(MemberContact, AWitnessWhoseContactBeganLateCouldHaveConfirmedEarly) {
  auto contact = Heard(0, 8000, 600);
  contact["c"] = MemberContact{};
  for (int64_t t = 4500; t <= 9000; t += 600) NoteContact(&contact["c"], t, t + 20, kLease);
  EXPECT_FALSE(SilenceUnconfirmable(kMembers, "a", "b", contact, kLease, kWindow));
}

TEST(MemberContact, ASiteNeverHeardOrAMajorityUnheardIsNotCalledUnconfirmable) {
  auto contact = Heard(0, 8000, 600);
  EXPECT_FALSE(SilenceUnconfirmable(kMembers, "a", "x", contact, kLease, kWindow));
  // Five members: c heard, d and e not: b, d and e are a majority.
  const std::vector<std::string> five = {"a", "b", "c", "d", "e"};
  EXPECT_FALSE(SilenceUnconfirmable(five, "a", "b", contact, kLease, kWindow));
  for (int64_t t = 0; t <= 8000; t += 600) NoteContact(&contact["d"], t, t + 20, kLease);
  EXPECT_TRUE(SilenceUnconfirmable(five, "a", "b", contact, kLease, kWindow));
}

TEST(MemberContact, ASiteCutBeforeItsFirstRenewalCountsFromItsCommit) {
  // Committed at epoch 0; the first pass, sent at 300, finds b cut.
  std::map<std::string, MemberContact> contact;
  for (int64_t t = 300; t <= 8000; t += 600) {
    NoteCommitContact(&contact["b"], 0, t);
    NoteContact(&contact["c"], t, t + 20, kLease);
  }
  EXPECT_EQ(contact["b"].last_send_ms, 0);
  EXPECT_EQ(contact["b"].last_answer_ms, 300) << "the first pass bounds the commit's answer";
  EXPECT_TRUE(SilenceUnconfirmable(kMembers, "a", "b", contact, kLease, kWindow));
  // A renewal on record is never overwritten by the commit's bounds.
  NoteContact(&contact["d"], 5000, 5020, kLease);
  NoteCommitContact(&contact["d"], 0, 5600);
  EXPECT_EQ(contact["d"].last_send_ms, 5000);
  EXPECT_EQ(contact["d"].since_ms, 5020);
}

// The safety claim, against the members' own rule: whenever the coordinator
// calls b's silence unconfirmable, c refuses every pre-vote b could ask for
// in b's window (from b's lease end to its short fence), whatever the
// delivery times and drops of the renewals. Seeded; the seed is printed.
TEST(MemberContact, UnconfirmableMeansTheWitnessRefusesEveryPreVoteInTheWindow) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  int claimed = 0;
  for (int round = 0; round < 2000; ++round) {
    std::map<std::string, MemberContact> contact;
    TermState c_state;
    c_state.term = 1;
    c_state.coordinator = "a";
    // The run's epoch is 0; b received its commit before the first pass,
    // and may be cut before it answers any renewal.
    const int64_t first = std::uniform_int_distribution<int64_t>(50, 600)(rng);
    int64_t b_heard = std::uniform_int_distribution<int64_t>(0, first)(rng);  // last receipt
    const int64_t b_cut = std::uniform_int_distribution<int64_t>(0, 6000)(rng);
    const int64_t period = std::uniform_int_distribution<int64_t>(300, 1500)(rng);
    const int drop_c = std::uniform_int_distribution<int>(0, 6)(rng);  // 1 in drop_c (0: none)
    std::vector<int64_t> c_receipts;
    for (int64_t sent = first; sent < 20000; sent += period) {
      std::uniform_int_distribution<int64_t> transit(0, 400);
      const int64_t answered = sent + transit(rng) + transit(rng);
      if (sent < b_cut) {
        b_heard = sent + transit(rng) % (answered - sent + 1);
        NoteContact(&contact["b"], sent, answered, kLease);
      } else {
        NoteCommitContact(&contact["b"], 0, sent);
      }
      if (drop_c > 0 && std::uniform_int_distribution<int>(0, drop_c)(rng) == 0) continue;
      c_receipts.push_back(sent + std::uniform_int_distribution<int64_t>(0, answered - sent)(rng));
      NoteContact(&contact["c"], sent, answered, kLease);
      // The coordinator judges after each pass; its claim must hold.
      if (!SilenceUnconfirmable(kMembers, "a", "b", contact, kLease, kWindow)) continue;
      ++claimed;
      for (int64_t t = b_heard + kLease; t <= b_heard + kLease + kWindow; t += 25) {
        TermState s = c_state;
        for (int64_t r : c_receipts) {
          if (r <= t) s.heard_ms = r;
        }
        const auto a = AnswerVote(&s, kMembers, {"j", 2, "b", true}, t, kLease);
        ASSERT_FALSE(a.granted) << "c would confirm b's silence at " << t << " (b cut at " << b_cut
                                << ", period " << period << ")";
      }
    }
  }
  EXPECT_GT(claimed, 0) << "the schedules never let the coordinator claim anything";
}

}  // namespace
}  // namespace fedgate::federation
