// A member's side of a coordinator takeover, on a FakeClock with real keys:
// votes answered from the kept record (one grant per term, kept across a
// restart, never while the coordinator is heard, never to a non-member),
// grants signed and verifiable, and a new coordinator served only with a
// majority of valid grants, after which the old term is fenced off.
#include <gtest/gtest.h>

#include <fstream>

#include "gateway/jobs/participant.h"
#include "gateway/security/ad_signing.h"
#include "gateway/store/store.h"
#include "tests/support/fake_clock.h"
#include "tests/support/fake_rank_runner.h"
#include "tests/support/pki.h"
#include "tests/support/site_config.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using testing::FakeClock;
using testing::FakeRankRunner;

constexpr const char* kJob = "j-00000000000000b7";
constexpr int64_t kLeaseMs = 5000;

class TakeoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::OneNodeSite("site-a", tmp_.path(), 4);
    testing::WriteTlsDir(tmp_ / "tls", ca_.Gateway("site-a"));
    authority_ = std::make_unique<FileAdAuthority>(tmp_ / "tls/ca.pem", tmp_ / "tls/cert.pem",
                                                   tmp_ / "tls/key.pem", "aidc");
    auto store = Store::Open(tmp_ / "db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    p_ = Make();
    RunJobCoordinatedByBj();
  }
  std::unique_ptr<Participant> Make() {
    auto p = std::make_unique<Participant>(config_, &clock_, store_.get());
    auto runner = std::make_unique<FakeRankRunner>();
    runner->SetSupervised(true);  // ranks outlive a restart: the slice is re-attached
    runner_ = runner.get();
    p->SetRunner(std::move(runner));
    p->SetGrantAuthority(authority_.get());
    return p;
  }
  // The deadline in the slice's fence file (what its shims obey).
  int64_t FenceFile() const {
    std::ifstream in(config_.data_dir + "/jobs/" + kJob + "/attempt-1/fence-1");
    int64_t deadline = -1;
    in >> deadline;
    return deadline;
  }
  v1::ReservationKey Key(uint64_t term) const {
    v1::ReservationKey k;
    k.set_job_id(kJob);
    k.set_attempt(1);
    k.set_epoch(1);
    k.set_term(term);
    return k;
  }
  // Job kJob: coordinated by bj at term 1, ranks at site-a (here) and sh;
  // its members are bj, sh and site-a (a majority is two).
  void RunJobCoordinatedByBj() { CommitSlice("bj", Key(1), RecordOfBj(), 2); }
  // One GPU of n1 held for `key` by `coordinator`.
  void PrepareOne(const std::string& coordinator, const v1::ReservationKey& key) {
    v1::PrepareRequest r;
    *r.mutable_key() = key;
    r.set_tenant("vision");
    r.add_nodes()->set_node("n1");
    r.mutable_nodes(0)->set_gpus(1);
    r.set_hold_ttl_ms(30'000);
    ASSERT_TRUE(p_->Prepare(coordinator, r).ok());
  }
  // The commit of one rank on n1 carrying `record` at `version`.
  static v1::CommitRequest CommitOf(const v1::ReservationKey& key, const v1::Job& record,
                                    uint64_t version, uint32_t world_size) {
    v1::CommitRequest c;
    *c.mutable_key() = key;
    auto* rank = c.add_ranks();
    rank->set_node("n1");
    rank->set_local_world_size(1);
    c.set_world_size(world_size);
    c.set_master_addr("10.0.0.9");
    c.set_master_port(29501);
    c.add_command("train");
    c.set_lease_ms(kLeaseMs);
    c.mutable_copy()->set_job(record.SerializeAsString());
    c.mutable_copy()->set_version(version);
    return c;
  }
  // One rank on n1 here, prepared and committed by `coordinator` with
  // `record` as the job's record (version 1).
  void CommitSlice(const std::string& coordinator, const v1::ReservationKey& key,
                   const v1::Job& record, uint32_t world_size) {
    ASSERT_NO_FATAL_FAILURE(PrepareOne(coordinator, key));
    auto committed = p_->Commit(coordinator, CommitOf(key, record, 1, world_size));
    ASSERT_TRUE(committed.ok()) << committed.status();
  }
  // kJob's record as bj sends it: run on site-a and sh, takeovers allowed
  // after `takeover_after_ms` (0: never).
  static v1::Job RecordOfBj(int64_t takeover_after_ms = 0, int64_t stagger_ms = 0) {
    v1::Job j;
    j.set_id(kJob);
    j.set_tenant("vision");
    j.set_coordinator("bj");
    j.set_term(1);
    j.mutable_run()->add_sites()->set_site("site-a");
    j.mutable_run()->add_sites()->set_site("sh");
    j.mutable_run()->set_takeover_after_ms(takeover_after_ms);
    j.mutable_run()->set_takeover_stagger_ms(stagger_ms);
    return j;
  }
  // bj renews job `j.id()` at term 1 carrying `j` as the record's copy.
  absl::StatusOr<v1::SliceStatusResponse> RenewWithCopy(const v1::Job& j, uint64_t version,
                                                        uint32_t attempt = 0, uint64_t epoch = 0) {
    v1::SliceStatusRequest q;
    q.mutable_key()->set_job_id(j.id());
    q.mutable_key()->set_attempt(attempt);
    q.mutable_key()->set_epoch(epoch);
    q.mutable_key()->set_term(1);
    q.set_lease_ms(kLeaseMs);
    q.mutable_copy()->set_job(j.SerializeAsString());
    q.mutable_copy()->set_version(version);
    return p_->Status("bj", q);
  }
  // `record_version`: the candidate's copy of bj's record (term 1); by
  // default newer than any copy these tests send.
  absl::StatusOr<v1::VoteResponse> Ask(const std::string& candidate, uint64_t term,
                                       bool pre_vote = false, uint64_t record_version = 99) {
    v1::VoteRequest v;
    v.set_site(candidate);
    v.set_job_id(kJob);
    v.set_term(term);
    v.set_pre_vote(pre_vote);
    v.set_record_term(1);
    v.set_record_version(record_version);
    return p_->Vote(candidate, v);
  }
  // A grant signed by `signer`'s gateway key, naming `granter`.
  v1::SignedGrant GrantBy(const std::string& signer, const std::string& granter,
                          const std::string& candidate, uint64_t term,
                          const testing::TestCa* ca = nullptr) {
    const auto files = (ca != nullptr ? *ca : ca_).Gateway(signer);
    v1::Grant g;
    g.set_job_id(kJob);
    g.set_term(term);
    g.set_candidate(candidate);
    g.set_granter(granter);
    auto s = SignGrant(g, files.cert_pem, files.key_pem);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::SignedGrant();
  }
  // bj renews the slice with a record that allows takeovers (after 15 s,
  // stagger 5 s): site-a is its first successor.
  absl::StatusOr<v1::SliceStatusResponse> RenewAllowingTakeovers() {
    v1::SliceStatusRequest q;
    *q.mutable_key() = Key(1);
    q.set_lease_ms(kLeaseMs);
    q.mutable_copy()->set_job(RecordOfBj(15'000, 5'000).SerializeAsString());
    q.mutable_copy()->set_version(2);
    return p_->Status("bj", q);
  }
  absl::StatusOr<v1::SliceStatusResponse> Renew(const std::string& from, uint64_t term,
                                                const std::vector<v1::SignedGrant>& grants = {}) {
    v1::SliceStatusRequest q;
    q.set_site(from);
    *q.mutable_key() = Key(term);
    q.set_lease_ms(kLeaseMs);
    for (const auto& g : grants) *q.add_grants() = g;
    return p_->Status(from, q);
  }

  testing::TempDir tmp_;
  testing::TestCa ca_;
  Config config_;
  FakeClock clock_;
  std::unique_ptr<FileAdAuthority> authority_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Participant> p_;
  FakeRankRunner* runner_ = nullptr;  // p_'s
};

TEST_F(TakeoverTest, AMemberGrantsOneCandidatePerTermOnlyOnceTheCoordinatorIsSilent) {
  auto early = Ask("sh", 2);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_FALSE(early->granted()) << "bj was heard at the commit, within the lease";
  EXPECT_NE(early->reason().find("still hears bj"), std::string::npos) << early->reason();
  EXPECT_EQ(early->term(), 1u);
  EXPECT_EQ(early->coordinator(), "bj");

  clock_.Advance(kLeaseMs + 1);
  auto pre = Ask("sh", 2, /*pre_vote=*/true);
  ASSERT_TRUE(pre.ok()) << pre.status();
  EXPECT_TRUE(pre->granted());
  EXPECT_FALSE(pre->has_grant()) << "a pre-vote signs nothing";
  EXPECT_EQ(pre->term(), 1u) << "and changes nothing";

  auto vote = Ask("sh", 2);
  ASSERT_TRUE(vote.ok()) << vote.status();
  ASSERT_TRUE(vote->granted()) << vote->reason();
  AdRefusal why;
  auto grant = authority_->VerifyGrant(vote->grant(), &why);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->job_id(), kJob);
  EXPECT_EQ(grant->term(), 2u);
  EXPECT_EQ(grant->candidate(), "sh");
  EXPECT_EQ(grant->granter(), "site-a");

  auto rival = Ask("bj", 2);
  ASSERT_TRUE(rival.ok()) << rival.status();
  EXPECT_FALSE(rival->granted()) << "one grant per term";
  EXPECT_NE(rival->reason().find("granted to sh"), std::string::npos) << rival->reason();

  auto stranger = Ask("gz", 3);
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kPermissionDenied) << stranger.status();
  EXPECT_EQ(p_->TermRefusals()["hostile"], 1u);

  // The vote was stored before it was answered: a restart cannot grant twice.
  p_ = Make();
  p_->Start();
  auto after = Ask("bj", 2);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(after->granted());
  EXPECT_NE(after->reason().find("granted to sh"), std::string::npos) << after->reason();
  auto again = Ask("sh", 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->granted()) << "the same candidate may ask again: " << again->reason();
  p_->Stop();
}

// Raft's up-to-date check at a real member: sh kept an older copy of bj's
// record than this site (its slice there was replaced while it was cut
// off, say), so it gets neither a pre-vote nor a vote; a candidate as
// current does, and a silence check skips it.
TEST_F(TakeoverTest, ACandidateWithAnOlderRecordGetsNoVote) {
  ASSERT_TRUE(RenewAllowingTakeovers().ok());  // version 2 kept here
  clock_.Advance(kLeaseMs + 1000);  // bj silent past the lease
  for (bool pre : {true, false}) {
    auto a = Ask("sh", 2, pre, 1);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_FALSE(a->granted());
    EXPECT_NE(a->reason().find("older than this member's"), std::string::npos) << a->reason();
  }
  // Asked only whether bj is silent here too (the takeover fence), a site
  // behind still hears yes: its slice runs on for whoever takes over.
  v1::VoteRequest silence;
  silence.set_site("sh");
  silence.set_job_id(kJob);
  silence.set_term(2);
  silence.set_pre_vote(true);
  silence.set_silence_only(true);
  auto heard = p_->Vote("sh", silence);
  ASSERT_TRUE(heard.ok()) << heard.status();
  EXPECT_TRUE(heard->granted()) << heard->reason();
  silence.set_pre_vote(false);  // never a real vote
  auto real = p_->Vote("sh", silence);
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_FALSE(real->granted());
  auto same = Ask("sh", 2, false, 2);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->granted()) << same->reason();
}

TEST_F(TakeoverTest, ANewCoordinatorIsServedWithAMajorityOfValidGrantsAndTheOldTermIsFenced) {
  clock_.Advance(kLeaseMs + 1);
  auto mine = Ask("sh", 2);
  ASSERT_TRUE(mine.ok() && mine->granted()) << mine.status();
  const v1::SignedGrant own = GrantBy("sh", "sh", "sh", 2);

  // Forged or unrelated grants do not make a majority.
  const testing::TestCa other_ca;
  const std::vector<std::vector<v1::SignedGrant>> short_of_majority = {
      {own},
      {own, GrantBy("sh", "site-a", "sh", 2)},             // sh's key, site-a's name
      {own, GrantBy("site-a", "site-a", "sh", 2, &other_ca)},  // another trust domain
      {own, GrantBy("bj", "bj", "sh", 3)},                 // another term
      {own, GrantBy("gz", "gz", "sh", 2)},                 // no member of the job
  };
  for (size_t i = 0; i < short_of_majority.size(); ++i) {
    auto refused = Renew("sh", 2, short_of_majority[i]);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
        << "case " << i << ": " << refused.status();
  }
  EXPECT_EQ(p_->TermRefusals()["bad_grant"], 2u) << "the forged and the foreign one";
  EXPECT_EQ(p_->TermRefusals()["hostile"], short_of_majority.size());
  // A renewal of an older term is answered with the term and coordinator
  // here (undecided while nobody presented the grants), and renews nothing.
  auto voted = Renew("bj", 1);
  ASSERT_TRUE(voted.ok()) << voted.status();
  EXPECT_EQ(voted->moved_term(), 2u) << "a member that granted term 2 serves term 1 no more";
  EXPECT_EQ(voted->moved_to(), "");
  EXPECT_EQ(voted->state(), v1::SliceStatusResponse::STATE_UNSPECIFIED);
  EXPECT_EQ(p_->TermRefusals()["stale"], 1u);

  auto taken = Renew("sh", 2, {own, mine->grant()});
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->state(), v1::SliceStatusResponse::RUNNING) << "the ranks run on";
  EXPECT_TRUE(Renew("sh", 2).ok()) << "term 2 is decided: no grants needed again";
  auto old = Renew("bj", 1);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->moved_term(), 2u);
  EXPECT_EQ(old->moved_to(), "sh") << "names the new coordinator";
  EXPECT_NE(old->message().find("sh"), std::string::npos) << old->message();
  auto claim = Renew("bj", 2);
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kPermissionDenied) << claim.status();

  // After a restart the slice, its term and its new owner are as they were.
  p_ = Make();
  p_->Start();
  auto renewed = Renew("sh", 2);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(renewed->state(), v1::SliceStatusResponse::RUNNING);
  EXPECT_EQ(Renew("bj", 1)->moved_to(), "sh");
  p_->Stop();
}

// A job this gateway coordinates, its slice here long ended (the job was
// re-placed elsewhere): its participant hears its own gateway and grants no
// member a vote against it, however long ago its slice was renewed.
TEST_F(TakeoverTest, TheCoordinatorsOwnSiteNeverVotesItOut) {
  constexpr const char* kMine = "j-00000000000000c8";
  v1::ReservationKey key;
  key.set_job_id(kMine);
  key.set_attempt(1);
  key.set_epoch(7);
  key.set_term(1);
  v1::Job j = RecordOfBj(15'000, 5'000);
  j.set_id(kMine);
  j.set_coordinator("site-a");
  j.mutable_run()->clear_sites();
  j.mutable_run()->add_sites()->set_site("site-a");
  j.mutable_run()->add_witnesses("sh");
  j.mutable_run()->add_witnesses("gz");
  ASSERT_NO_FATAL_FAILURE(CommitSlice("site-a", key, j, 1));
  clock_.Advance(60'000);  // no renewal here for a minute
  p_->Sweep();
  for (bool pre : {true, false}) {
    v1::VoteRequest v;
    v.set_site("sh");
    v.set_job_id(kMine);
    v.set_term(2);
    v.set_pre_vote(pre);
    v.set_record_term(1);
    v.set_record_version(99);
    auto answer = p_->Vote("sh", v);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_FALSE(answer->granted()) << (pre ? "pre-vote" : "vote");
    EXPECT_NE(answer->reason().find("hears itself"), std::string::npos) << answer->reason();
    EXPECT_EQ(answer->coordinator(), "site-a");
  }
  // The same silence of bj, a coordinator elsewhere, is voted out.
  auto other = Ask("sh", 2, /*pre_vote=*/true);
  ASSERT_TRUE(other.ok()) << other.status();
}

// A witness of attempt 1 that never heard it ended: the coordinator, which
// placed attempt 2 elsewhere, sends it attempt 2's record; it keeps it only
// until the sweep (no slice, no witness there) and never takes over.
TEST_F(TakeoverTest, AWitnessOfAnEarlierWorldForgetsItWhenToldTheCurrentRecord) {
  constexpr const char* kW = "j-00000000000000d9";
  auto renew = [&](const v1::Job& j, uint64_t version) { return RenewWithCopy(j, version, 1, 7); };
  v1::Job first = RecordOfBj(15'000, 5'000);
  first.set_id(kW);
  first.set_state(v1::Job::RUNNING);
  first.set_attempt(1);
  first.mutable_run()->clear_sites();
  first.mutable_run()->add_sites()->set_site("sh");
  first.mutable_run()->add_witnesses("site-a");
  first.mutable_run()->add_witnesses("gz");
  auto kept = renew(first, 1);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->copy_version(), 1u);
  v1::Job second = first;
  second.set_attempt(2);
  second.mutable_run()->clear_witnesses();
  second.mutable_run()->clear_sites();
  for (const char* s : {"gz", "hz"}) second.mutable_run()->add_sites()->set_site(s);
  auto told = renew(second, 2);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(told->copy_version(), 2u);
  clock_.Advance(60'000);  // bj silent long past any takeover delay
  p_->Sweep();
  auto after = p_->JobFromCopy(kW);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value()) << "no member of the current world: the record goes";
  for (const auto& due : p_->TakeoversDue()) EXPECT_NE(due.job_id, kW);
}

// A job before its first world: bj named site-a and gz witnesses of its
// queued record at submit. site-a keeps it and, with bj silent, is due to
// take it over (after gz, the first in succession); the record of the
// job's first world, which leaves site-a out, ends it here at once.
TEST_F(TakeoverTest, AQueuedRecordIsKeptByTheWitnessesItNamesUntilAWorldLeavesThemOut) {
  constexpr const char* kQ = "j-00000000000000e1";
  auto renew = [&](const v1::Job& j, uint64_t version) { return RenewWithCopy(j, version); };
  v1::Job queued = RecordOfBj(15'000, 5'000);
  queued.set_id(kQ);
  queued.set_state(v1::Job::PENDING);
  queued.mutable_run()->clear_sites();
  queued.mutable_run()->add_witnesses("gz");
  queued.mutable_run()->add_witnesses("site-a");
  auto kept = renew(queued, 1);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->copy_version(), 1u) << "a named witness keeps the queued record";
  // A queued record that names other witnesses is not this site's.
  v1::Job other = queued;
  other.set_id("j-00000000000000e2");
  other.mutable_run()->clear_witnesses();
  for (const char* s : {"gz", "hz"}) other.mutable_run()->add_witnesses(s);
  auto not_kept = renew(other, 1);
  ASSERT_TRUE(not_kept.ok()) << not_kept.status();
  auto other_kept = p_->JobFromCopy(other.id());
  ASSERT_TRUE(other_kept.ok());
  EXPECT_FALSE(other_kept->has_value());
  // bj silent past site-a's turn (takeover_after + one stagger): due.
  clock_.Advance(20'001);
  bool due = false;
  for (const auto& d : p_->TakeoversDue()) {
    if (d.job_id != kQ) continue;
    due = true;
    EXPECT_EQ(d.members, (std::vector<std::string>{"bj", "gz", "site-a"}));
    EXPECT_EQ(d.position, 1) << "after gz";
  }
  EXPECT_TRUE(due) << "a queued job outlives its coordinator";
  // The decided first world: bj, gz and hz; site-a is no member now.
  v1::Job world = queued;
  world.set_state(v1::Job::RUNNING);
  world.set_attempt(1);
  world.mutable_run()->clear_witnesses();
  for (const char* s : {"gz", "hz"}) world.mutable_run()->add_sites()->set_site(s);
  auto told = renew(world, 2);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(told->copy_version(), 2u);
  auto after = p_->JobFromCopy(kQ);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value()) << "left out of the first world: the queued record goes";
  for (const auto& d : p_->TakeoversDue()) EXPECT_NE(d.job_id, kQ);
}

// gz joined the job's members (a replacement's first step) in a copy this
// site never got; gz then won term 2 with the grants of three of the four.
// The renewal that brings the newer copy is served (the step is one change
// from the members kept here); without it, gz is no member here; with a
// copy two changes away, the site cannot check it and refuses it, but does
// not count gz hostile.
TEST_F(TakeoverTest, ASuccessorFromAStepOfMembersNotKeptHereIsServedWithTheRecordItBrings) {
  auto renew_by_gz = [&](const std::vector<std::string>& members, bool bring) {
    v1::SliceStatusRequest q;
    q.set_site("gz");
    *q.mutable_key() = Key(2);
    q.set_lease_ms(kLeaseMs);
    for (const char* g : {"gz", "sh", "bj"}) *q.add_grants() = GrantBy(g, g, "gz", 2);
    if (bring) {
      v1::Job j = RecordOfBj();
      j.set_coordinator("gz");
      j.set_term(2);
      for (const auto& m : members) j.mutable_run()->add_members(m);
      q.mutable_copy()->set_job(j.SerializeAsString());
      q.mutable_copy()->set_version(5);
    }
    return p_->Status("gz", q);
  };
  auto alone = renew_by_gz({}, false);
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kPermissionDenied) << alone.status();
  EXPECT_EQ(p_->TermRefusals()["hostile"], 1u);
  // Answered as a call of another term: the member's own term and
  // coordinator, nothing renewed (gz counts the answer as silence).
  auto two_steps = renew_by_gz({"gz", "sh", "site-a"}, true);  // bj gone too
  ASSERT_TRUE(two_steps.ok()) << two_steps.status();
  EXPECT_EQ(two_steps->moved_term(), 1u);
  EXPECT_EQ(two_steps->moved_to(), "bj");
  EXPECT_EQ(two_steps->state(), v1::SliceStatusResponse::STATE_UNSPECIFIED);
  EXPECT_NE(two_steps->message().find("more than one change"), std::string::npos)
      << two_steps->message();
  EXPECT_EQ(p_->TermRefusals()["hostile"], 1u) << "a member behind is no proof of hostility";
  auto one_step = renew_by_gz({"bj", "gz", "sh", "site-a"}, true);
  ASSERT_TRUE(one_step.ok()) << one_step.status();
  EXPECT_EQ(one_step->state(), v1::SliceStatusResponse::RUNNING);
  EXPECT_EQ(one_step->copy_version(), 5u) << "the newer record is kept";
  EXPECT_TRUE(Renew("gz", 2).ok()) << "gz coordinates term 2 here from now on";
  EXPECT_EQ(Renew("bj", 1)->moved_to(), "gz");
}

}  // namespace
}  // namespace fedgate::gateway

namespace fedgate::gateway {
namespace {

// Takeovers allowed, but no majority confirms the coordinator silent (it is
// merely cut off from this site): the slice stops one lease past its lease,
// and a word that comes after that changes nothing.
TEST_F(TakeoverTest, AnUnconfirmedSilenceStopsTheSliceOneLeasePastItsLease) {
  ASSERT_TRUE(RenewAllowingTakeovers().ok());
  const int64_t heard = clock_.NowMs();
  clock_.Advance(2 * kLeaseMs - 100);
  p_->Sweep();
  EXPECT_EQ(p_->SilencesToConfirm().size(), 1u) << "still within the short fence";
  ASSERT_FALSE(runner_->launched().empty());
  const pid_t rank = runner_->launched()[0].pid;
  EXPECT_TRUE(runner_->SignalsTo(rank).empty()) << "the rank runs within the short fence";
  clock_.Advance(200);
  p_->Sweep();
  const auto signals = runner_->SignalsTo(rank);
  ASSERT_FALSE(signals.empty()) << "stopped at the short fence";
  EXPECT_EQ(signals[0], SIGTERM);
  EXPECT_TRUE(p_->SilencesToConfirm().empty());
  EXPECT_FALSE(p_->ConfirmSilence(kJob, heard)) << "too late: the ranks were told to stop";
  EXPECT_EQ(FenceFile(), heard + 2 * kLeaseMs + 500) << "the fence did not move";
}

// The same job once its coordinator allows takeovers (15 s, stagger 5 s):
// site-a, first of the world in rank order, is its first successor.
TEST_F(TakeoverTest, TheFirstSuccessorIsDueAfterItsDelayAndAFencedSliceKeepsTheRecord) {
  const v1::Job j = RecordOfBj(15'000, 5'000);
  v1::SliceStatusRequest q;
  *q.mutable_key() = Key(1);
  q.set_lease_ms(kLeaseMs);
  q.mutable_copy()->set_job(j.SerializeAsString());
  q.mutable_copy()->set_version(2);
  auto renewed = p_->Status("bj", q);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(renewed->copy_version(), 2u);
  EXPECT_TRUE(p_->TakeoversDue().empty()) << "bj was just heard";

  // Its shims' fence: one lease past the lease while nobody confirmed the
  // coordinator silent.
  const int64_t heard = clock_.NowMs();
  EXPECT_EQ(FenceFile(), heard + 2 * kLeaseMs + 500);
  clock_.Advance(kLeaseMs - 100);
  EXPECT_TRUE(p_->SilencesToConfirm().empty()) << "within the lease";
  clock_.Advance(200);
  auto silent = p_->SilencesToConfirm();
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].job_id, kJob);
  EXPECT_EQ(silent[0].term, 1u);
  EXPECT_EQ(silent[0].heard_ms, heard);
  EXPECT_EQ(silent[0].members, (std::vector<std::string>{"bj", "sh", "site-a"}));
  // A majority would vote bj out: the slice runs on until a successor may
  // have renewed it (15 s + 5 s x (2 successors - 1) + the 5 s lease).
  ASSERT_TRUE(p_->ConfirmSilence(kJob, heard));
  EXPECT_EQ(FenceFile(), heard + 25'000 + 500);
  EXPECT_TRUE(p_->SilencesToConfirm().empty()) << "confirmed once";
  clock_.Advance(14'900 - kLeaseMs - 100);
  p_->Sweep();
  EXPECT_EQ(p_->FreeGpus()["n1"], 3u) << "the slice still holds its GPU";
  EXPECT_TRUE(p_->TakeoversDue().empty()) << "not before takeover_after";
  clock_.Advance(200);
  auto due = p_->TakeoversDue();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].job_id, kJob);
  EXPECT_EQ(due[0].position, 0);
  EXPECT_EQ(due[0].term, 1u);
  EXPECT_EQ(due[0].coordinator, "bj");
  EXPECT_EQ(due[0].members, (std::vector<std::string>{"bj", "sh", "site-a"}));

  // Nobody took over within the fence: the slice stops, and the record
  // stays, so that a majority heard later can still carry the job on.
  clock_.Advance(10'000);
  for (int i = 0; i < 3; ++i) p_->Sweep();
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u) << "fenced: the GPU is free";
  auto kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "a fenced slice keeps its job's record";
  ASSERT_EQ(p_->TakeoversDue().size(), 1u);

  // site-a wins term 2 (its grant and sh's): it leads in its own record at
  // once, is no longer due, and keeps term 3 from sh while it leads.
  auto own = Ask("site-a", 2);
  ASSERT_TRUE(own.ok() && own->granted()) << own.status();
  ASSERT_TRUE(p_->TakeLead(kJob, 2, {own->grant(), GrantBy("sh", "sh", "site-a", 2)}).ok());
  EXPECT_TRUE(p_->TakeoversDue().empty());
  auto third = Ask("sh", 3, /*pre_vote=*/true);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_FALSE(third->granted()) << "it hears itself as the coordinator";
  EXPECT_EQ(third->coordinator(), "site-a");
  // Without a majority of grants the lead is refused.
  EXPECT_EQ(p_->TakeLead(kJob, 4, {GrantBy("sh", "sh", "site-a", 4)}).code(),
            absl::StatusCode::kPermissionDenied);
}


// site-a takes the job over while its own slice runs on a confirmed
// silence: taking the term is hearing the coordinator (itself), so its
// slice is not stopped at the short fence before the first renewal.
TEST_F(TakeoverTest, TheWinnersOwnSliceRunsOnFromTheMomentItTakesTheTerm) {
  ASSERT_TRUE(RenewAllowingTakeovers().ok());
  const int64_t heard = clock_.NowMs();
  clock_.Advance(kLeaseMs + 100);
  ASSERT_TRUE(p_->ConfirmSilence(kJob, heard));
  clock_.Advance(15'000 - kLeaseMs);  // past the short fence (two leases), due to take over
  ASSERT_EQ(p_->TakeoversDue().size(), 1u);
  auto own = Ask("site-a", 2);
  ASSERT_TRUE(own.ok() && own->granted()) << own.status();
  ASSERT_TRUE(p_->TakeLead(kJob, 2, {own->grant(), GrantBy("sh", "sh", "site-a", 2)}).ok());
  const int64_t took = clock_.NowMs();
  p_->Sweep();
  ASSERT_FALSE(runner_->launched().empty());
  const pid_t rank = runner_->launched()[0].pid;
  EXPECT_TRUE(runner_->SignalsTo(rank).empty()) << "the slice it took the job over for runs on";
  EXPECT_EQ(p_->FreeGpus()["n1"], 3u);
  // From now on a lease of its own renewals, with the short fence (the
  // silence it confirmed was bj's): the shims learn so at once.
  EXPECT_EQ(FenceFile(), took + 2 * kLeaseMs + 500);
  clock_.Advance(2 * kLeaseMs + 100);
  p_->Sweep();
  EXPECT_FALSE(runner_->SignalsTo(rank).empty()) << "unrenewed by itself too, it stops";
}

// The ranks end by themselves while bj is silent: bj never saw the end, so
// the record stays and site-a may take the job over to finish it (else the
// job's outcome is known nowhere once bj is gone for good). Seen, a success
// keeps it still, until bj's end notice: bj may be lost for good right
// after it decided the end (chaos_bench: 0.35 s after), before telling
// anyone.
TEST_F(TakeoverTest, ASucceededSliceKeepsTheRecordUntilItsCoordinatorTellsTheEnd) {
  ASSERT_TRUE(RenewAllowingTakeovers().ok());
  clock_.Advance(kLeaseMs / 2);
  ASSERT_FALSE(runner_->launched().empty());
  runner_->Exit(runner_->launched()[0].pid, 0);
  p_->Sweep();
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u) << "the slice ended: its GPU is free";
  clock_.Advance(15'000);
  p_->Sweep();
  auto kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "bj has not seen the slice end";
  ASSERT_EQ(p_->TakeoversDue().size(), 1u);
  auto asked = Renew("bj", 1);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->state(), v1::SliceStatusResponse::SUCCEEDED);
  p_->Sweep();
  kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "seen by bj, but bj has not said the job ended";
  clock_.Advance(15'000);
  p_->Sweep();
  EXPECT_EQ(p_->TakeoversDue().size(), 1u) << "bj silent since: site-a may end the job";

  // A newer record while the job runs on elsewhere (a step of a change of
  // members) is kept, no hold here: the step counts this member's copy.
  v1::Job joined = RecordOfBj(15'000, 5'000);
  for (const char* m : {"bj", "gz", "sh", "site-a"}) joined.mutable_run()->add_members(m);
  v1::SliceStatusRequest step;
  *step.mutable_key() = Key(1);
  step.mutable_copy()->set_job(joined.SerializeAsString());
  step.mutable_copy()->set_version(3);
  auto acked = p_->Status("bj", step);
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_EQ(acked->copy_version(), 3u) << "the newer record is kept without a hold";
  auto stepped = p_->JobFromCopy(kJob);
  ASSERT_TRUE(stepped.ok() && stepped->has_value());
  EXPECT_EQ((*stepped)->run().members_size(), 4);

  v1::Job ended = RecordOfBj(15'000, 5'000);
  ended.set_state(v1::Job::SUCCEEDED);
  v1::SliceStatusRequest q;
  *q.mutable_key() = Key(1);
  q.mutable_copy()->set_job(ended.SerializeAsString());
  q.mutable_copy()->set_version(4);
  auto told = p_->Status("bj", q);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(told->copy_version(), 4u);
  p_->Sweep();
  kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->has_value()) << "told the end, the record goes";
  EXPECT_TRUE(p_->TakeoversDue().empty());
}

// The same end, then a restart before bj asked: the finished slice's end
// is on disk (no GPUs held), so the restarted site answers SUCCEEDED with
// the rank's code instead of UNKNOWN (a coordinator told UNKNOWN counts the
// slice lost: chaos_bench saw a world restarted, and with its coordinator
// lost, never ended, for a job whose ranks had all exited 0), and keeps the
// record until bj's end notice, as without the restart. Pruned, the end
// leaves the disk too.
TEST_F(TakeoverTest, ARestartedSiteStillAnswersTheEndOfASliceThatFinishedBeforeIt) {
  ASSERT_TRUE(RenewAllowingTakeovers().ok());
  ASSERT_FALSE(runner_->launched().empty());
  runner_->Exit(runner_->launched()[0].pid, 0);
  p_->Sweep();
  ASSERT_EQ(p_->FreeGpus()["n1"], 4u);
  p_.reset();
  p_ = Make();
  p_->Start();
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u) << "an ended slice holds no GPU after the restart";
  clock_.Advance(15'000);
  p_->Sweep();
  auto kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "the end may have gone unseen";
  ASSERT_EQ(p_->TakeoversDue().size(), 1u);
  auto asked = Renew("bj", 1);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->state(), v1::SliceStatusResponse::SUCCEEDED);
  ASSERT_EQ(asked->exit_codes().size(), 1u);
  EXPECT_EQ(asked->exit_codes().begin()->second, 0);
  p_->Sweep();
  kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "seen by bj, but bj has not said the job ended";

  // Past the window of finished slices it is forgotten, on disk too.
  clock_.Advance(11 * 60 * 1000);
  p_->Sweep();
  p_.reset();
  p_ = Make();
  p_->Start();
  asked = Renew("bj", 1);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->state(), v1::SliceStatusResponse::UNKNOWN);
}

// A replacement's slice committed parked here, whose lease lapses before
// the next world (its coordinator went silent): like a fenced running
// slice, it keeps the job's record even after the coordinator saw it end.
// site-a is still one of the record's members; without its record a
// takeover lacks its vote. chaos_bench: a replace job's coordinator, lost
// for good, was never taken over, as its parked member had let the record
// go and the one left could reach no majority.
TEST_F(TakeoverTest, AParkedSliceWhoseLeaseLapsedKeepsTheRecordForATakeover) {
  v1::AbortRequest end;
  *end.mutable_key() = Key(1);
  end.set_reason("its world restarts elsewhere");
  ASSERT_TRUE(p_->Abort("bj", end).ok());
  p_->Sweep();
  v1::ReservationKey parked = Key(1);
  parked.set_epoch(2);
  ASSERT_NO_FATAL_FAILURE(PrepareOne("bj", parked));
  v1::Job record = RecordOfBj(15'000, 5'000);
  record.mutable_run()->mutable_sites(0)->set_epoch(2);  // site-a: the replacement
  v1::CommitRequest c = CommitOf(parked, record, 3, 2);
  c.set_keep_hold(true);
  c.set_park(true);
  const size_t launched = runner_->launched().size();
  ASSERT_TRUE(p_->Commit("bj", c).ok());
  EXPECT_EQ(runner_->launched().size(), launched) << "parked: no rank";
  EXPECT_EQ(p_->FreeGpus()["n1"], 3u);

  clock_.Advance(kLeaseMs + 1000);
  p_->Sweep();
  p_->Sweep();
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u) << "its lease lapsed: the GPU is free";
  v1::SliceStatusRequest q;
  *q.mutable_key() = parked;
  q.set_lease_ms(kLeaseMs);
  auto asked = p_->Status("bj", q);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->state(), v1::SliceStatusResponse::FAILED) << "bj sees the end";
  p_->Sweep();
  auto kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "a member keeps the record for a takeover";
  clock_.Advance(15'000);
  p_->Sweep();
  EXPECT_EQ(p_->TakeoversDue().size(), 1u) << "bj silent: site-a may take the job over";
}

// bj fails the job while site-a's slice is fenced: told the end, site-a
// forgets the record, takes nothing over and votes for nobody (an ended job
// taken over again ends again, a second story).
TEST_F(TakeoverTest, AMemberToldTheJobEndedForgetsItsRecordAndVotesForNobody) {
  ASSERT_TRUE(RenewAllowingTakeovers().ok());
  clock_.Advance(2 * kLeaseMs + 1000);
  for (int i = 0; i < 3; ++i) p_->Sweep();
  ASSERT_EQ(p_->FreeGpus()["n1"], 4u) << "fenced at the short fence";
  ASSERT_EQ(p_->TakeoversDue().size(), 0u) << "not due before takeover_after";

  v1::Job ended = RecordOfBj(15'000, 5'000);
  ended.set_state(v1::Job::FAILED);
  v1::SliceStatusRequest q;
  *q.mutable_key() = Key(1);
  // An end older than the kept record is no end (an earlier attempt's).
  q.mutable_copy()->set_job(ended.SerializeAsString());
  q.mutable_copy()->set_version(2);
  ASSERT_TRUE(p_->Status("bj", q).ok());
  p_->Sweep();
  auto kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "version 2 is the record kept, not its end";
  // Another coordinator than the record's cannot end it.
  q.mutable_copy()->set_version(3);
  ended.set_coordinator("sh");
  q.mutable_copy()->set_job(ended.SerializeAsString());
  (void)p_->Status("sh", q);
  kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "sh does not coordinate the job";

  ended.set_coordinator("bj");
  q.mutable_copy()->set_job(ended.SerializeAsString());
  auto told = p_->Status("bj", q);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(told->copy_version(), 3u) << "acknowledged, so bj stops telling";
  kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->has_value()) << "the end is known: nothing to take over";
  clock_.Advance(15'000);
  EXPECT_TRUE(p_->TakeoversDue().empty());
  auto vote = Ask("sh", 2);
  EXPECT_FALSE(vote.ok() && vote->granted()) << "no vote for a job that ended";
}

}  // namespace
}  // namespace fedgate::gateway

namespace fedgate::gateway {
namespace {

// A job that nobody may take over (takeover_after 0 in bj's record): its
// record serves no takeover, so it goes with the slice's GPUs even before
// bj saw the end.
TEST_F(TakeoverTest, AJobNobodyMayTakeOverKeepsNoRecordOnceItsSliceEnds) {
  ASSERT_FALSE(runner_->launched().empty());
  runner_->Exit(runner_->launched()[0].pid, 0);
  p_->Sweep();
  EXPECT_EQ(p_->FreeGpus()["n1"], 4u);
  auto kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->has_value()) << "no successor needs it";
}

// Attempt 1's slice was fenced (an end bj never saw), bj put the job back
// in the queue and placed attempt 2 here: once attempt 2's slice ended and
// bj saw it, the record goes; the fenced slice of attempt 1 keeps nothing.
TEST_F(TakeoverTest, AFencedSliceOfAnEarlierAttemptKeepsNoRecordOfTheNext) {
  ASSERT_TRUE(RenewAllowingTakeovers().ok());
  clock_.Advance(2 * kLeaseMs + 1000);
  for (int i = 0; i < 3; ++i) p_->Sweep();
  ASSERT_EQ(p_->FreeGpus()["n1"], 4u) << "fenced at the short fence";
  v1::Job pending = RecordOfBj(15'000, 5'000);
  pending.set_state(v1::Job::PENDING);
  v1::SliceStatusRequest told;
  *told.mutable_key() = Key(1);
  told.mutable_copy()->set_job(pending.SerializeAsString());
  told.mutable_copy()->set_version(3);
  ASSERT_TRUE(p_->Status("bj", told).ok());

  v1::ReservationKey second = Key(1);
  second.set_attempt(2);
  second.set_epoch(2);
  ASSERT_NO_FATAL_FAILURE(PrepareOne("bj", second));
  v1::Job record = RecordOfBj(15'000, 5'000);
  record.set_attempt(2);
  auto committed = p_->Commit("bj", CommitOf(second, record, 4, 2));
  ASSERT_TRUE(committed.ok()) << committed.status();
  auto kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "attempt 2's record is kept";

  // A failure bj saw is bj's to act on (a success would wait for bj's end
  // notice).
  runner_->Exit(runner_->launched().back().pid, 1);
  p_->Sweep();
  v1::SliceStatusRequest q;
  *q.mutable_key() = second;
  q.set_lease_ms(kLeaseMs);
  auto asked = p_->Status("bj", q);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->state(), v1::SliceStatusResponse::FAILED);
  p_->Sweep();
  kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->has_value()) << "both ends were seen by bj: nothing to take over";
  clock_.Advance(20'000);
  EXPECT_TRUE(p_->TakeoversDue().empty());
}

// A slice the coordinator replaced (world restart: a new slice here under a
// newer epoch) has had its end seen: fenced or not, it keeps no record once
// the slice that replaced it ended and was reported. Seen in chaos_bench: a
// member kept the record through its replaced, fenced slice and granted a
// removed member a takeover of a job its coordinator still ran.
TEST_F(TakeoverTest, AFencedSliceTheCoordinatorReplacedKeepsNoRecord) {
  v1::Job first = RecordOfBj(15'000, 5'000);
  first.mutable_run()->set_epoch(1);
  v1::SliceStatusRequest renew;
  *renew.mutable_key() = Key(1);
  renew.set_lease_ms(kLeaseMs);
  renew.mutable_copy()->set_job(first.SerializeAsString());
  renew.mutable_copy()->set_version(2);
  ASSERT_TRUE(p_->Status("bj", renew).ok());
  clock_.Advance(2 * kLeaseMs + 1000);
  for (int i = 0; i < 3; ++i) p_->Sweep();
  ASSERT_EQ(p_->FreeGpus()["n1"], 4u) << "fenced at the short fence";
  auto kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "a fenced slice of the run keeps the record";

  v1::ReservationKey second = Key(1);
  second.set_epoch(2);
  ASSERT_NO_FATAL_FAILURE(PrepareOne("bj", second));
  v1::Job replaced = first;
  replaced.mutable_run()->mutable_sites(0)->set_epoch(2);  // site-a: the new slice
  auto committed = p_->Commit("bj", CommitOf(second, replaced, 3, 2));
  ASSERT_TRUE(committed.ok()) << committed.status();

  runner_->Exit(runner_->launched().back().pid, 1);
  p_->Sweep();
  v1::SliceStatusRequest q;
  *q.mutable_key() = second;
  q.set_lease_ms(kLeaseMs);
  auto asked = p_->Status("bj", q);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->state(), v1::SliceStatusResponse::FAILED);
  p_->Sweep();
  kept = p_->JobFromCopy(kJob);
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->has_value()) << "bj replaced the fenced slice and saw the new one fail";
  clock_.Advance(20'000);
  EXPECT_TRUE(p_->TakeoversDue().empty());
}

}  // namespace
}  // namespace fedgate::gateway
