// Coordinator takeover with real gateways: a job's own sites take its
// coordination over when its coordinator is lost for good, and a coordinator
// that was only frozen learns at its return that the job moved.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "fedgate/v1/jobs.pb.h"
#include "tests/support/event_time.h"
#include "tests/support/jobs_fixture.h"

namespace fedgate::testing {
namespace {

// Short, so a test sees the whole story in seconds: the first successor
// asks 4 s after it last heard the coordinator.
constexpr char kJobsYaml[] = "jobs: {lease: 2s, takeover_after: 4s, takeover_stagger: 1s}\n";
constexpr int64_t kTakeoverAfterMs = 4000;

class CoordinatorTakeover : public JobsTest {
 protected:
  // site-a coordinates (its H100s do not fit the job), the job runs on the
  // A100s of site-b and site-c; site-d is a fourth peer.
  // `a_env`: site-a's extra environment (a crash point).
  void StartFour(const std::vector<std::string>& a_env = {}) {
    AddSite("site-a", {"site-b", "site-c", "site-d"}, 2, "H100", kJobsYaml);
    AddSite("site-b", {"site-a", "site-c", "site-d"}, 4, "A100-80GB", kJobsYaml);
    AddSite("site-c", {"site-a", "site-b", "site-d"}, 4, "A100-80GB", kJobsYaml);
    AddSite("site-d", {"site-a", "site-b", "site-c"}, 4, "H100", kJobsYaml);
    fed_.Start("site-a", a_env);
    for (const char* s : {"site-b", "site-c", "site-d"}) fed_.Start(s);
    ASSERT_TRUE(Eventually(
        [&] { return fed_.Converged({"site-a", "site-b", "site-c", "site-d"}); }, 20000));
  }
  // Submitted at site-a; returns once both sites keep its record.
  std::string SubmitStitched(int seconds) {
    const std::string id =
        Submit("site-a", "name: long\ngpus: 8\ngpu_models: [A100-80GB]\ncommand: [sleep, '" +
                             std::to_string(seconds) + "']\n");
    EXPECT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
    const v1::Job job = Get("site-a", id);
    EXPECT_EQ(job.run().sites_size(), 2);
    EXPECT_EQ(job.run().witnesses_size(), 0) << "three members without witnesses";
    EXPECT_EQ(job.run().takeover_after_ms(), kTakeoverAfterMs);
    for (const char* s : {"site-b", "site-c"}) {
      EXPECT_TRUE(Eventually([&] { return Get(s, id).coordinator() == "site-a"; }, 10000)) << s;
    }
    return id;
  }
  // The site that took the job over ("" while nobody has).
  std::string NewCoordinator(const std::string& id) {
    for (const char* s : {"site-b", "site-c"}) {
      const v1::Job j = Get(s, id);
      if (j.term() >= 2 && !j.coordinator().empty() && j.coordinator() != "site-a") {
        return j.coordinator();
      }
    }
    return "";
  }
  int CountEvents(const std::string& site, const std::string& id, const std::string& type) {
    auto r = Alice(site, {"jobs", "events", id});
    v1::JobEventsResponse resp;
    google::protobuf::util::JsonParseOptions lax;
    lax.ignore_unknown_fields = true;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &resp, lax).ok()) << r.err;
    int n = 0;
    for (const auto& e : resp.events()) n += e.type() == type ? 1 : 0;
    return n;
  }
};

TEST_F(CoordinatorTakeover, ACoordinatorLostForGoodIsTakenOverAndTheJobFinishesUnrestarted) {
  StartFour();
  const std::string id = SubmitStitched(16);
  fed_.Kill("site-a", SIGKILL);  // never restarted
  const int64_t lost_ms = WallUnixMs();
  std::string to;
  ASSERT_TRUE(Eventually([&] { return !(to = NewCoordinator(id)).empty(); }, 20000))
      << fed_.log("site-b") << fed_.log("site-c");
  // By the new coordinator's clock: when its story says it took the job.
  const int64_t took =
      EventUnixMs(Alice(to, {"jobs", "events", id}).out, "coordinator_moved") - lost_ms;
  std::printf("[ measure ] %s took the job over %lld ms after site-a was killed\n", to.c_str(),
              static_cast<long long>(took));
  // The first successor in rank order asks first.
  EXPECT_EQ(to, "site-b");
  EXPECT_GT(took, 0);
  EXPECT_LE(took, kTakeoverAfterMs + 2000) << "from the loss to the takeover";
  // Both members answer for it at term 2 and name the new coordinator.
  EXPECT_TRUE(Eventually(
      [&] {
        const v1::Job at_c = Get("site-c", id);
        return at_c.term() == 2u && at_c.coordinator() == to;
      },
      5000))
      << "site-c follows the new coordinator from its first renewal";
  // `fedctl jobs get` at site-c goes on to the coordinator; site-a, dead,
  // is never pointed at.
  auto at_c = Alice("site-c", {"jobs", "get", id});
  EXPECT_EQ(at_c.exit_code, 0) << at_c.err;
  EXPECT_NE(at_c.err.find("is coordinated by " + to), std::string::npos) << at_c.err;
  EXPECT_EQ(at_c.out.find("copy of the job's record"), std::string::npos)
      << "answered by the coordinator, not from site-c's copy: " << at_c.out;
  // It runs on to its end: the same attempt, the same world, started once.
  ASSERT_TRUE(WaitState(to, id, v1::Job::SUCCEEDED, 30000))
      << Get(to, id).reason() << fed_.log(to);
  const v1::Job done = Get(to, id);
  EXPECT_EQ(done.attempt(), 1u);
  EXPECT_EQ(done.run().restart(), 0u);
  EXPECT_EQ(done.coordinator(), to);
  EXPECT_EQ(CountEvents(to, id, "coordinator_moved"), 1);
  // Both slices outlived their short fence (two leases) because each site
  // heard from the other that site-a was silent there too.
  for (const char* s : {"site-b", "site-c"}) {
    EXPECT_NE(fed_.log(s).find("has not heard its coordinator either"), std::string::npos) << s;
  }
  // Its story here begins with the takeover; no rank was started again.
  EXPECT_EQ(CountEvents(to, id, "started"), 0) << "the ranks never started again";
  EXPECT_TRUE(Eventually([&] { return Free("site-b", "site-b") == 4 && Free("site-b", "site-c") == 4; },
                         10000));
}

TEST_F(CoordinatorTakeover, AFrozenCoordinatorLearnsAtItsReturnThatTheJobMovedAndStepsDown) {
  StartFour();
  const std::string id = SubmitStitched(30);
  // Frozen past the takeover and past the time after which it would call
  // the silent sites lost (fence 7 s + stop grace 3 s + skew 1 s): at its
  // return it hears nobody at first, and must change nothing until it does.
  fed_.Kill("site-a", SIGSTOP);
  const auto frozen = std::chrono::steady_clock::now();
  std::string to;
  const bool taken = Eventually([&] { return !(to = NewCoordinator(id)).empty(); }, 20000);
  std::this_thread::sleep_until(frozen + std::chrono::seconds(13));
  fed_.Kill("site-a", SIGCONT);
  ASSERT_TRUE(taken) << fed_.log("site-b");
  // site-a's next renewal is refused as of an older term: it names the new
  // coordinator from then on and never places the job again.
  ASSERT_TRUE(Eventually([&] { return Get("site-a", id).coordinator() == to; }, 10000))
      << fed_.log("site-a") << fed_.log(to);
  const v1::Job at_a = Get("site-a", id);
  EXPECT_EQ(at_a.term(), 2u);
  // The old coordinator keeps its vote, and from now on the record too, as
  // a witness of the new coordinator (so a second takeover has a majority).
  const v1::Job at_new = Get(to, id);
  const auto& w = at_new.run().witnesses();
  EXPECT_NE(std::find(w.begin(), w.end(), "site-a"), w.end()) << "site-a renewed as a witness";
  EXPECT_NE(at_a.reason().find("coordinated by " + to), std::string::npos) << at_a.reason();
  auto cancel = Alice("site-a", {"--no-follow", "jobs", "cancel", id});
  EXPECT_NE(cancel.exit_code, 0) << "site-a cancels nothing it does not coordinate";
  EXPECT_NE(cancel.err.find(to), std::string::npos) << cancel.err;
  // fedctl asked at site-a goes on to the coordinator: its answer, not site-a's.
  auto followed = Alice("site-a", {"jobs", "get", id});
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  EXPECT_NE(followed.err.find("is coordinated by " + to), std::string::npos) << followed.err;
  EXPECT_EQ(followed.out.find("could not renew it"), std::string::npos)
      << "the new coordinator's view, not site-a's row: " << followed.out;
  ASSERT_TRUE(WaitState(to, id, v1::Job::SUCCEEDED, 40000)) << Get(to, id).reason();
  EXPECT_EQ(Get(to, id).attempt(), 1u);
  EXPECT_EQ(Get(to, id).run().restart(), 0u);
  EXPECT_EQ(CountEvents(to, id, "started"), 0);
  EXPECT_EQ(CountEvents("site-a", id, "coordinator_moved"), 1) << "in the old story too";
  const v1::Job after = Get("site-a", id);
  EXPECT_EQ(after.attempt(), 1u) << "the old coordinator never ran it again";
  EXPECT_EQ(after.coordinator(), to);
}

// The coordinator also ran a slice (recovery: replace): lost for good, its
// job is taken over by its first successor, which then replaces the lost slice on the
// spare site-d and changes the members one at a time (site-d joins, then
// site-a leaves); the new world runs to its end in the same attempt (world
// 0's ranks run long enough to be halted, world 1's for 3 s).
TEST_F(CoordinatorTakeover, ACoordinatorsOwnSliceIsReplacedByItsSuccessorAndTheMembersChangeStepByStep) {
  for (const char* s : {"site-a", "site-b", "site-c", "site-d"}) {
    std::vector<std::string> peers;
    for (const char* p : {"site-a", "site-b", "site-c", "site-d"}) {
      if (std::string(p) != s) peers.push_back(p);
    }
    AddSite(s, peers, 2, "A100-80GB", kJobsYaml);
  }
  // site-d comes up once the job runs on the other three.
  for (const char* s : {"site-a", "site-b", "site-c"}) fed_.Start(s);
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c"}); }, 20000));
  const std::string id = Submit(
      "site-a",
      "name: spread\ngpus: 6\nmax_sites: 3\nmin_gpus_per_site: 2\nrecovery: replace\n"
      "command: [sh, -c, 'if [ \"$FEDGATE_RESTART\" = 0 ]; then sleep 30; else sleep 3; fi']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  const v1::Job before = Get("site-a", id);
  ASSERT_EQ(before.run().sites_size(), 3);
  std::string first;  // the first successor: the first site in rank order but site-a
  for (const auto& r : before.run().sites()) {
    if (first.empty() && r.site() != "site-a") first = r.site();
  }
  fed_.Start("site-d");
  ASSERT_TRUE(Eventually(
      [&] { return fed_.Converged({"site-a", "site-b", "site-c", "site-d"}); }, 20000));
  for (const char* s : {"site-b", "site-c"}) {
    ASSERT_TRUE(Eventually([&] { return Get(s, id).coordinator() == "site-a"; }, 10000)) << s;
  }
  fed_.Kill("site-a", SIGKILL);  // never restarted
  for (pid_t p : JobRankPids(id, "site-a")) ::kill(p, SIGKILL);
  std::string to;
  ASSERT_TRUE(Eventually([&] { return !(to = NewCoordinator(id)).empty(); }, 20000))
      << fed_.log("site-b") << fed_.log("site-c");
  EXPECT_EQ(to, first) << "the first site in rank order but the coordinator";
  ASSERT_TRUE(WaitState(to, id, v1::Job::SUCCEEDED, 90000)) << Get(to, id).reason() << fed_.log(to);
  const v1::Job done = Get(to, id);
  EXPECT_EQ(done.attempt(), 1u) << "replaced in place, not retried";
  EXPECT_EQ(done.run().restart(), 1u);
  std::set<std::string> sites;
  for (const auto& r : done.run().sites()) sites.insert(r.site());
  EXPECT_EQ(sites, (std::set<std::string>{"site-b", "site-c", "site-d"}));
  EXPECT_EQ(CountEvents(to, id, "coordinator_moved"), 1);
  EXPECT_EQ(std::set<std::string>(done.run().members().begin(), done.run().members().end()),
            (std::set<std::string>{"site-b", "site-c", "site-d"}))
      << "site-a left the members once site-d had joined";
  EXPECT_FALSE(done.run().has_member_change()) << done.run().member_change().DebugString();
  const std::string story = Alice(to, {"jobs", "events", id}).out;
  const auto joined = story.find("site-d joined the job's members");
  const auto left = story.find("site-a left the job's members");
  ASSERT_NE(joined, std::string::npos) << story;
  ASSERT_NE(left, std::string::npos) << story;
  EXPECT_LT(joined, left) << story;
  // site-d's slice was reserved by the new coordinator (its record may be
  // gone already: told the end, a member forgets it).
  EXPECT_NE(fed_.log("site-d").find("holding GPUs for " + to), std::string::npos)
      << fed_.log("site-d");
}

// A job on one site has two members; the coordinator names a witness (a
// peer) so that a majority survives the loss of any one: site-a lost, the
// job's site and the witness take it over and it runs on.
TEST_F(CoordinatorTakeover, AWitnessGivesAOneSiteJobAMajorityThatOutlivesItsCoordinator) {
  StartFour();
  const std::string id =
      Submit("site-a", "name: one-site\ngpus: 4\ngpu_models: [A100-80GB]\ncommand: [sleep, '16']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  const v1::Job job = Get("site-a", id);
  ASSERT_EQ(job.run().sites_size(), 1);
  ASSERT_EQ(job.run().witnesses_size(), 1) << "coordinator + one site + one witness";
  const std::string site = job.run().sites(0).site(), witness = job.run().witnesses(0);
  EXPECT_NE(witness, "site-a");
  EXPECT_NE(witness, site);
  ASSERT_TRUE(Eventually([&] { return Get(witness, id).coordinator() == "site-a"; }, 10000))
      << "the witness keeps the record" << fed_.log(witness);
  fed_.Kill("site-a", SIGKILL);
  ASSERT_TRUE(Eventually([&] { return Get(site, id).term() >= 2; }, 20000))
      << fed_.log(site) << fed_.log(witness);
  EXPECT_EQ(Get(site, id).coordinator(), site) << "the job's own site is first in succession";
  ASSERT_TRUE(WaitState(site, id, v1::Job::SUCCEEDED, 30000)) << Get(site, id).reason();
  EXPECT_EQ(Get(site, id).attempt(), 1u);
  EXPECT_EQ(Get(site, id).run().restart(), 0u);
  EXPECT_EQ(CountEvents(site, id, "started"), 0) << "the ranks never started again";
}

// Two takeovers of one job: site-a is frozen and site-b takes the job over;
// site-a comes back and keeps the record as site-b's witness; then site-b
// is frozen too, and site-c takes the job over at term 3 with site-a's
// grant (two of the three members a, b, c). The job ends under site-c, and
// both earlier coordinators, back, name it. Attempt 1's ranks run long
// (site-b's are fenced while it is frozen), a later attempt's end at once.
TEST_F(CoordinatorTakeover, ASecondCoordinatorLostIsTakenOverAgainWithTheFirstOnesGrant) {
  StartFour();
  const std::string id = Submit(
      "site-a",
      "name: twice\ngpus: 8\ngpu_models: [A100-80GB]\n"
      "command: [sh, -c, 'if [ \"$FEDGATE_ATTEMPT\" = 1 ]; then sleep 40; fi']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  for (const char* s : {"site-b", "site-c"}) {
    ASSERT_TRUE(Eventually([&] { return Get(s, id).coordinator() == "site-a"; }, 10000)) << s;
  }
  fed_.Kill("site-a", SIGSTOP);
  std::string to;
  const bool taken = Eventually([&] { return !(to = NewCoordinator(id)).empty(); }, 20000);
  fed_.Kill("site-a", SIGCONT);
  ASSERT_TRUE(taken) << fed_.log("site-b");
  ASSERT_EQ(to, "site-b");
  ASSERT_TRUE(Eventually([&] { return Get("site-a", id).coordinator() == "site-b"; }, 10000))
      << fed_.log("site-a");
  // A few of site-b's renewals: site-a keeps the record as its witness.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  fed_.Kill("site-b", SIGSTOP);
  const bool again = Eventually(
      [&] {
        const v1::Job at_c = Get("site-c", id);
        return at_c.term() >= 3 && at_c.coordinator() == "site-c";
      },
      20000);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  fed_.Kill("site-b", SIGCONT);
  ASSERT_TRUE(again) << fed_.log("site-c") << fed_.log("site-a");
  ASSERT_TRUE(WaitState("site-c", id, v1::Job::SUCCEEDED, 60000))
      << Get("site-c", id).reason() << fed_.log("site-c") << fed_.log("site-b");
  const v1::Job done = Get("site-c", id);
  std::printf("[ measure ] second takeover: SUCCEEDED at term %llu, attempt %u, world restarts %u\n",
              static_cast<unsigned long long>(done.term()), done.attempt(), done.run().restart());
  EXPECT_EQ(done.term(), 3u);
  EXPECT_EQ(CountEvents("site-c", id, "coordinator_moved"), 1) << "site-c's own takeover";
  // site-b stepped down naming site-c; site-a, which handed the job to
  // site-b, still names site-b (its own row), and following it ends at site-c.
  EXPECT_TRUE(Eventually([&] { return Get("site-b", id).coordinator() == "site-c"; }, 10000))
      << fed_.log("site-b");
  EXPECT_EQ(Get("site-a", id).coordinator(), "site-b");
  auto followed = Alice("site-a", {"jobs", "get", id});
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  v1::GetJobResponse got;
  google::protobuf::util::JsonParseOptions lax;
  lax.ignore_unknown_fields = true;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(followed.out, &got, lax).ok()) << followed.out;
  EXPECT_EQ(got.job().coordinator(), "site-c") << followed.out;
}

// chaos_bench found a rank alive twice: a coordinator killed while it ran
// a job on its own site came back after a successor took the job over, saw
// its own slice failed and placed attempt 2 beside the successor's. Back,
// it must first hear from the job's members, learn that the job moved, and
// step down: it fails no attempt and places none. The successor retries
// the job (only site-a may run it) and it succeeds once, at attempt 2.
TEST_F(CoordinatorTakeover, ACoordinatorBackAfterItsOwnSliceFailedStepsDownInsteadOfRetrying) {
  StartFour();
  const std::string id = Submit(
      "site-a",
      "name: own\ngpus: 2\ngpu_models: [H100]\nallowed_sites: [site-a]\nmax_attempts: 3\n"
      "command: [sh, -c, 'if [ \"$FEDGATE_ATTEMPT\" = 1 ]; then sleep 2; exit 3; fi']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  const v1::Job job = Get("site-a", id);
  ASSERT_EQ(job.run().sites_size(), 1);
  ASSERT_EQ(job.run().sites(0).site(), "site-a");
  ASSERT_EQ(job.run().witnesses_size(), 2) << "coordinator + two witnesses";
  for (const auto& w : job.run().witnesses()) {
    ASSERT_TRUE(Eventually([&] { return Get(w, id).coordinator() == "site-a"; }, 10000)) << w;
  }
  fed_.Kill("site-a", SIGKILL);
  ASSERT_TRUE(fed_.WaitExit("site-a", 10000).has_value());
  // Attempt 1's ranks fail while site-a is down; a witness takes the job over.
  std::string to;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const auto& w : job.run().witnesses()) {
          const v1::Job j = Get(w, id);
          if (j.term() >= 2 && j.coordinator() == w) to = w;
        }
        return !to.empty();
      },
      20000))
      << fed_.log(job.run().witnesses(0)) << fed_.log(job.run().witnesses(1));
  const size_t before = fed_.log("site-a").size();
  fed_.Start("site-a");
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  ASSERT_TRUE(WaitState(to, id, v1::Job::SUCCEEDED, 40000)) << Get(to, id).reason() << fed_.log(to);
  const v1::Job done = Get(to, id);
  EXPECT_EQ(done.attempt(), 2u);
  EXPECT_EQ(CountEvents(to, id, "started"), 1) << "attempt 2 started once, by " << to;
  EXPECT_TRUE(Eventually([&] { return Get("site-a", id).coordinator() == to; }, 10000));
  const std::string back = fed_.log("site-a").substr(before);
  EXPECT_NE(back.find("job " + id + ": stepped down"), std::string::npos) << back;
  EXPECT_EQ(back.find("job " + id + ": attempt 1 failed"), std::string::npos)
      << "site-a judged the job without a majority: " << back;
  EXPECT_EQ(back.find("holding GPUs for site-a"), std::string::npos)
      << "site-a placed an attempt of a job it no longer coordinates: " << back;
}

// A job acknowledged but never placed by its coordinator: site-a dies for
// good the moment it stores the job RESERVING, before any site hears of
// it. The two witnesses of its queued record, named at submit, take it
// over and place it; it runs once and succeeds (chaos_bench lost such a
// job before witnesses were named at submit: nobody else knew it).
TEST_F(CoordinatorTakeover, AJobItsCoordinatorNeverPlacedIsTakenOverFromItsQueuedRecordAndRuns) {
  StartFour({"FEDGATE_CRASH_AT=coordinator-after-reserving"});
  const std::string id =
      Submit("site-a", "name: queued\ngpus: 8\ngpu_models: [A100-80GB]\ncommand: [sleep, '2']\n");
  ASSERT_TRUE(fed_.WaitExit("site-a", 20000).has_value()) << "site-a never reserved the job";
  std::string to;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const char* s : {"site-b", "site-c", "site-d"}) {
          const v1::Job j = Get(s, id);
          if (j.term() >= 2 && j.coordinator() == s) to = s;
        }
        return !to.empty();
      },
      20000))
      << fed_.log("site-b") << fed_.log("site-c") << fed_.log("site-d");
  ASSERT_TRUE(WaitState(to, id, v1::Job::SUCCEEDED, 30000)) << Get(to, id).reason() << fed_.log(to);
  const v1::Job done = Get(to, id);
  EXPECT_EQ(done.attempt(), 1u) << "its first world is the one its successor placed";
  EXPECT_EQ(done.run().sites_size(), 2);
  EXPECT_EQ(CountEvents(to, id, "coordinator_moved"), 1);
  EXPECT_EQ(CountEvents(to, id, "started"), 1) << "started once, by " << to;
}

// A witness is told the job ended and forgets it: nobody takes over a job
// that is over, however long its coordinator stays quiet about it.
TEST_F(CoordinatorTakeover, AWitnessForgetsAJobThatEndedAndNobodyTakesItOver) {
  StartFour();
  const std::string id =
      Submit("site-a", "name: short\ngpus: 4\ngpu_models: [A100-80GB]\ncommand: [sleep, '3']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
  const v1::Job job = Get("site-a", id);
  ASSERT_EQ(job.run().witnesses_size(), 1);
  const std::string witness = job.run().witnesses(0);
  ASSERT_TRUE(Eventually([&] { return Get(witness, id).coordinator() == "site-a"; }, 10000));
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 20000));
  ASSERT_TRUE(Eventually([&] { return Alice(witness, {"jobs", "get", id}).exit_code != 0; }, 10000))
      << "the witness forgot the record" << fed_.log(witness);
  // Past the takeover time: still site-a's, at term 1, everywhere.
  std::this_thread::sleep_for(std::chrono::milliseconds(kTakeoverAfterMs + 2000));
  for (const char* s : {"site-b", "site-c", "site-d"}) {
    EXPECT_NE(Get(s, id).term(), 2u) << s << " took over a job that had ended";
  }
  EXPECT_EQ(Get("site-a", id).coordinator(), "site-a");
  EXPECT_EQ(CountEvents("site-a", id, "coordinator_moved"), 0);
}

// The end as a decision that outlives its coordinator: site-a stores the
// job SUCCEEDED and dies at once, before telling anyone (chaos_bench lost a
// job this way: its coordinator decided the end 0.35 s before it was lost
// for good, and the members had let the record go). The members keep the
// record until they are told, so site-b takes over and decides the end
// again from the slices, which it can: nothing is run again.
TEST_F(CoordinatorTakeover, AnEndItsCoordinatorDiedDecidingIsDecidedAgainByTheMembers) {
  StartFour({"FEDGATE_CRASH_AT=coordinator-after-success"});
  const std::string id = SubmitStitched(3);
  ASSERT_TRUE(fed_.WaitExit("site-a", 20000).has_value()) << "site-a never decided the end";
  std::string to;
  ASSERT_TRUE(Eventually([&] { return !(to = NewCoordinator(id)).empty(); }, 20000))
      << fed_.log("site-b") << fed_.log("site-c");
  EXPECT_EQ(to, "site-b");
  ASSERT_TRUE(WaitState(to, id, v1::Job::SUCCEEDED, 15000)) << Get(to, id).reason() << fed_.log(to);
  const v1::Job done = Get(to, id);
  EXPECT_EQ(done.attempt(), 1u) << "decided from the slices' ends, not run again";
  EXPECT_EQ(done.run().restart(), 0u);
  EXPECT_EQ(CountEvents(to, id, "started"), 0) << "no rank started again";
  // site-c is told the end by its new coordinator and forgets the record.
  EXPECT_TRUE(Eventually([&] { return Alice("site-c", {"--no-follow", "jobs", "get", id}).exit_code != 0; },
                         10000))
      << fed_.log("site-c");
}

// The same death, but site-a comes back at once: it tells the members the
// end again (who had been told died with the process), so nobody takes
// over a job that is over.
TEST_F(CoordinatorTakeover, ACoordinatorRestartedRightAfterTheEndTellsTheMembersAgain) {
  StartFour({"FEDGATE_CRASH_AT=coordinator-after-success"});
  const std::string id = SubmitStitched(3);
  ASSERT_TRUE(fed_.WaitExit("site-a", 20000).has_value()) << "site-a never decided the end";
  fed_.Start("site-a");
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  EXPECT_EQ(Get("site-a", id).state(), v1::Job::SUCCEEDED);
  for (const char* s : {"site-b", "site-c"}) {
    EXPECT_TRUE(Eventually([&] { return Alice(s, {"--no-follow", "jobs", "get", id}).exit_code != 0; },
                           kTakeoverAfterMs))
        << s << " still keeps the record" << fed_.log(s);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(kTakeoverAfterMs + 1000));
  for (const char* s : {"site-b", "site-c", "site-d"}) {
    EXPECT_LT(Get(s, id).term(), 2u) << s << " took over a job that had ended";
  }
  EXPECT_EQ(Get("site-a", id).coordinator(), "site-a");
  EXPECT_EQ(CountEvents("site-a", id, "coordinator_moved"), 0);
}

}  // namespace
}  // namespace fedgate::testing
