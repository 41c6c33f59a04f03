// Tenant governance with real gateways: a quota held at the tenant's home
// site across coordinators, spot preemption with grace across coordinators,
// the hard time_limit, and the quota commands.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "fedgate/v1/jobs.grpc.pb.h"
#include "tests/support/jobs_fixture.h"

namespace fedgate::testing {
namespace {

class GovernanceTest : public JobsTest {
 protected:
  // A job that appends "<job> start|end <unix seconds>" to a shared file.
  std::string Spans(const std::string& file, int gpus, int seconds) {
    return "name: q\ngpus: " + std::to_string(gpus) +
           "\nestimated_duration: 10s\ncommand: [sh, -c, 'echo $FEDGATE_JOB_ID start $(date +%s.%N) "
           ">> " + file + "; sleep " + std::to_string(seconds) +
           "; echo $FEDGATE_JOB_ID end $(date +%s.%N) >> " + file + "']\n";
  }
};

// The most jobs whose [first start, last end] intervals overlap.
int MaxConcurrent(const std::string& text) {
  std::map<std::string, std::pair<double, double>> span;
  std::istringstream in(text);
  std::string job, what;
  double t = 0;
  while (in >> job >> what >> t) {
    auto [it, fresh] = span.try_emplace(job, t, t);
    if (what == "start") it->second.first = std::min(it->second.first, t);
    if (what == "end") it->second.second = std::max(it->second.second, t);
  }
  std::vector<std::pair<double, int>> edges;
  for (const auto& [j, s] : span) {
    edges.push_back({s.first, +1});
    edges.push_back({s.second, -1});
  }
  std::sort(edges.begin(), edges.end());  // an end before a start at the same time
  int now = 0, most = 0;
  for (const auto& [time, d] : edges) most = std::max(most, now += d);
  return most;
}

TEST_F(GovernanceTest, QuotaAtTheHomeSiteHoldsAcrossTwoCoordinators) {
  // site-a is vision's home (4 GPUs, no borrowing); b and c coordinate and
  // have room for all three 2-GPU jobs at once: only the quota limits them.
  AddSite("site-a", {"site-b", "site-c"}, 1, "A100-80GB", "tenants:\n  - {name: vision, gpus: 4}\n");
  AddSite("site-b", {"site-a", "site-c"}, 4);
  AddSite("site-c", {"site-a", "site-b"}, 4);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c"}); }, 15000));
  ASSERT_TRUE(Eventually([&] { return Alice("site-b", {"quota", "get"}).exit_code == 0; }, 10000))
      << "site-b learns vision's quota from site-a's ad";
  const std::string spans = fed_.shared_dir() + "/spans.txt";
  std::vector<std::string> ids(3);
  std::vector<std::thread> submit;
  for (int i = 0; i < 3; ++i) {
    submit.emplace_back([&, i] { ids[i] = Submit(i == 0 ? "site-c" : "site-b", Spans(spans, 2, 3)); });
  }
  for (auto& t : submit) t.join();
  std::map<std::string, std::string> at = {{ids[0], "site-c"}, {ids[1], "site-b"}, {ids[2], "site-b"}};
  bool saw_quota_wait = false;
  ASSERT_TRUE(Eventually(
      [&] {
        int done = 0;
        for (const auto& [id, site] : at) {
          const v1::Job j = Get(site, id);
          if (j.state() == v1::Job::PENDING &&
              j.reason().find("waiting for quota") != std::string::npos) {
            saw_quota_wait = true;
          }
          done += j.state() == v1::Job::SUCCEEDED ? 1 : 0;
        }
        return done == 3;
      },
      60000, 100))
      << fed_.log("site-a");
  EXPECT_TRUE(saw_quota_wait) << "the third job said it waits for quota";
  EXPECT_EQ(Metric(fed_.ops_port("site-a"), "fedgate_tenant_quota_gpus{kind=\"nominal\",tenant=\"vision\"}"), 4);
  EXPECT_EQ(MaxConcurrent(ReadText(spans)), 2) << ReadText(spans);
  // Every hold was released at the home site.
  auto q = Alice("site-c", {"quota", "get"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.out.find("\"home\":\"site-a\""), std::string::npos) << q.out;
  EXPECT_TRUE(Eventually(
      [&] { return Alice("site-b", {"quota", "get"}).out.find("\"used_gpus\":0") != std::string::npos; },
      10000))
      << Alice("site-b", {"quota", "get"}).out;
  // A tenant sees only its own quota; admins of the home site set it.
  auto other = Alice("site-b", {"quota", "get", "--tenant", "nlp"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("may only see its own quota"), std::string::npos) << other.err;
  auto set_elsewhere = RunCommand({FedctlBin(), "--gateway", fed_.endpoint("site-b"), "--tls-dir",
                                   fed_.admin_tls_dir("site-b"), "quota", "set", "--tenant",
                                   "vision", "--gpus", "8"});
  EXPECT_NE(set_elsewhere.exit_code, 0);
  EXPECT_NE(set_elsewhere.err.find("governed by site site-a"), std::string::npos) << set_elsewhere.err;
  auto set_home = RunCommand({FedctlBin(), "-o", "json", "--gateway", fed_.endpoint("site-a"),
                              "--tls-dir", fed_.admin_tls_dir("site-a"), "quota", "set",
                              "--tenant", "vision", "--gpus", "6", "--borrow", "2"});
  ASSERT_EQ(set_home.exit_code, 0) << set_home.err;
  EXPECT_NE(set_home.out.find("\"gpus\":6"), std::string::npos) << set_home.out;
  // The new quota reaches the other sites' view through site-a's ad, also
  // over REST, and survives a restart of the home site.
  fed_.Stop("site-a");
  fed_.Start("site-a");
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  EXPECT_TRUE(Eventually(
      [&] { return Alice("site-c", {"quota", "get"}).out.find("\"borrow\":2") != std::string::npos; },
      10000))
      << Alice("site-c", {"quota", "get"}).out;
  const std::string audit = ReadText(fed_.dir("site-a") + "/data/audit.log");
  EXPECT_NE(audit.find("quota.set"), std::string::npos) << audit;

  // A home site that is down blocks its tenants' new guaranteed work, also
  // once its ad has expired; it runs when the home is back.
  fed_.Kill("site-a");
  const std::string blocked = Submit("site-b", Spans(spans, 1, 1));
  ASSERT_TRUE(Eventually(
      [&] {
        return Get("site-b", blocked).reason().find("home site site-a of tenant vision is down") !=
               std::string::npos;
      },
      10000))
      << Get("site-b", blocked).reason();
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // past the ad's 1.5 s TTL
  EXPECT_EQ(Get("site-b", blocked).state(), v1::Job::PENDING) << Get("site-b", blocked).reason();
  fed_.Start("site-a");
  ASSERT_TRUE(WaitState("site-b", blocked, v1::Job::SUCCEEDED, 30000))
      << Get("site-b", blocked).reason();
}

TEST_F(GovernanceTest, GuaranteedJobPreemptsASpotJobOfAnotherCoordinator) {
  // site-a's 4 GPUs are filled by a spot job coordinated by site-b; a
  // guaranteed job submitted at site-a needs them.
  AddSite("site-a", {"site-b"}, 4, "A100-80GB", "preemption: {grace: 5s}\n");
  AddSite("site-b", {"site-a"}, 1);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  // The spot job traps SIGTERM, reads its deadline and exits; max_attempts 1
  // proves that the preemption does not count as an attempt.
  const std::string spot = Submit(
      "site-b",
      "name: spot\ngpus: 4\npriority: spot\nmax_attempts: 1\nallowed_sites: [site-a]\n"
      "command: [sh, -c, 'trap \"echo preempted, deadline \\$(cat \\$FEDGATE_PREEMPT_FILE); exit 143\" "
      "TERM; echo attempt $FEDGATE_ATTEMPT; for i in $(seq 1 40); do sleep 0.25; done']\n");
  ASSERT_TRUE(WaitState("site-b", spot, v1::Job::RUNNING, 20000)) << Get("site-b", spot).reason();
  // The ad says its GPUs are preemptible (min_runtime 0s).
  ASSERT_TRUE(Eventually(
      [&] {
        auto cap = fed_.Capacity("site-b");
        return cap && Free("site-b", "site-a") == 0;
      },
      5000));
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t submitted_s = std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  const std::string guaranteed =
      Submit("site-a", "name: g\ngpus: 4\nallowed_sites: [site-a]\ncommand: [sleep, '6']\n");
  ASSERT_TRUE(WaitState("site-a", guaranteed, v1::Job::RUNNING, 8000))
      << Get("site-a", guaranteed).reason() << fed_.log("site-a");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("guaranteed job running %.2f s after its submit (grace 5 s; the victim exits on "
              "SIGTERM)\n", took);
  EXPECT_LT(took, 5 + 3.0);
  // The victim's coordinator learnt who preempted it; the job waits again.
  EXPECT_TRUE(Eventually(
      [&] {
        return Get("site-b", spot).reason().find("preempted by " + guaranteed) != std::string::npos;
      },
      5000))
      << Get("site-b", spot).reason();
  const std::string log1 = ReadText(fed_.dir("site-a") + "/data/jobs/" + spot + "/attempt-1/rank-0.log");
  int64_t deadline = 0;
  ASSERT_EQ(std::sscanf(log1.c_str() + std::min(log1.size(), log1.find("deadline ")),
                        "deadline %ld", &deadline), 1)
      << log1;
  EXPECT_GE(deadline, submitted_s + 4);
  EXPECT_LE(deadline, submitted_s + 5 + 3) << "now + grace";
  // After the guaranteed job, the spot job runs again as attempt 2.
  ASSERT_TRUE(WaitState("site-a", guaranteed, v1::Job::SUCCEEDED, 20000));
  ASSERT_TRUE(WaitState("site-b", spot, v1::Job::SUCCEEDED, 30000)) << Get("site-b", spot).reason();
  EXPECT_EQ(Get("site-b", spot).attempt(), 2u);
}

TEST_F(GovernanceTest, TimeLimitStopsAnOverrunningJob) {
  AddSite("site-a", {}, 2, "A100-80GB", "preemption: {grace: 1s}\n");
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  const std::string id = Submit("site-a", "name: t\ngpus: 1\ntime_limit: 2s\ncommand: [sleep, '60']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::FAILED, 15000)) << Get("site-a", id).reason();
  EXPECT_NE(Get("site-a", id).reason().find("ran past its time_limit of 2s"), std::string::npos)
      << Get("site-a", id).reason();
  EXPECT_EQ(Get("site-a", id).attempt(), 1u) << "not retried";
  EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-a") == 2; }, 10000));
  WriteText(tmp_ / "bad.yaml", "gpus: 1\ntime_limit: soon\ncommand: [true]\n");
  auto bad = Alice("site-a", {"jobs", "submit", "-f", tmp_ / "bad.yaml"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("time_limit"), std::string::npos) << bad.err;
}

// A job that ran only at its coordinator's site, with its quota held at a
// home elsewhere: once the job's own site says it ended, the renewal does not
// also ask the home about it (the quota is released next). Timing is taken
// out of it: site-b's renewal passes are 6 s apart (a 30 s lease), and six
// `true` jobs are submitted right after one pass, so every job has ended by
// the time the next pass sees it.
TEST_F(GovernanceTest, AHomeIsNotAskedAboutShortJobsThatEndedWhereTheyRan) {
  AddSite("site-a", {"site-b"}, 1, "A100-80GB", "tenants:\n  - {name: vision, gpus: 100}\n");
  AddSite("site-b", {"site-a"}, 8, "A100-80GB", "jobs: {lease: 30s}\n");
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  ASSERT_TRUE(Eventually([&] { return Alice("site-b", {"quota", "get"}).exit_code == 0; }, 10000));
  auto passes = [&] {
    return Metric(fed_.ops_port("site-b"), "fedgate_coordinator_renew_passes_total");
  };
  const double before = passes();
  ASSERT_TRUE(Eventually([&] { return passes() > before; }, 10000, 5)) << "no renewal pass";
  auto stub = v1::JobService::NewStub(TlsChannel(fed_.endpoint("site-b"), ca_.User("vision", "s")));
  constexpr int kJobs = 6;
  std::vector<std::string> ids;
  for (int i = 0; i < kJobs; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name("s");
    req.mutable_spec()->set_gpus(1);
    req.mutable_spec()->add_allowed_sites("site-b");
    req.mutable_spec()->add_command("true");
    v1::SubmitJobResponse resp;
    ASSERT_TRUE(stub->Submit(&ctx, req, &resp).ok());
    ids.push_back(resp.job().id());
  }
  for (const auto& id : ids) {
    ASSERT_TRUE(WaitState("site-b", id, v1::Job::SUCCEEDED, 30000)) << Get("site-b", id).reason();
  }
  EXPECT_TRUE(Eventually(
      [&] { return Alice("site-b", {"quota", "get"}).out.find("\"used_gpus\":0") != std::string::npos; },
      10000))
      << "the quota is released";
  auto handled = [&](const char* method) {
    return Metric(fed_.ops_port("site-a"),
                  std::string("fedgate_peer_rpc_handled_total{method=\"") + method + "\"}");
  };
  EXPECT_EQ(handled("Prepare"), kJobs) << "every job held quota at its home";
  EXPECT_EQ(handled("Abort"), kJobs) << "and released it";
  EXPECT_EQ(handled("SliceStatus"), 0) << "no pass found one of these jobs still running";
}

TEST_F(GovernanceTest, AQuotaHoldOfACoordinatorKilledBeforeItsCommitsIsCommittedAtRestart) {
  // site-a is vision's home and site-b runs the ranks; site-c coordinates
  // and is killed between its durable decision and its commits (whose quota
  // commit nothing waits for). After its restart the renewal commits both.
  AddSite("site-a", {"site-b", "site-c"}, 1, "A100-80GB", "tenants:\n  - {name: vision, gpus: 4}\n");
  AddSite("site-b", {"site-a", "site-c"}, 4);
  AddSite("site-c", {"site-a", "site-b"}, 1);
  fed_.Start("site-a");
  fed_.Start("site-b");
  fed_.Start("site-c", {"FEDGATE_CRASH_AT=coordinator-after-decision"});
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c"}); }, 15000));
  ASSERT_TRUE(Eventually([&] { return Alice("site-c", {"quota", "get"}).exit_code == 0; }, 10000));
  const std::string spans = fed_.shared_dir() + "/spans.txt";
  const std::string id = Submit("site-c", Spans(spans, 2, 2));
  ASSERT_TRUE(fed_.WaitExit("site-c", 30000).has_value()) << "the crash point was not reached";
  fed_.Start("site-c");
  ASSERT_TRUE(fed_.WaitReady("site-c"));
  ASSERT_TRUE(WaitState("site-c", id, v1::Job::SUCCEEDED, 30000)) << Get("site-c", id).reason();
  EXPECT_EQ(Get("site-c", id).attempt(), 1u) << Get("site-c", id).reason();
  EXPECT_NE(fed_.log("site-c").find("re-sending the commit to site-b"), std::string::npos);
  EXPECT_NE(fed_.log("site-c").find("re-sending the quota commit to site-a"), std::string::npos);
  EXPECT_TRUE(Eventually(
      [&] { return Alice("site-c", {"quota", "get"}).out.find("\"used_gpus\":0") != std::string::npos; },
      10000))
      << Alice("site-c", {"quota", "get"}).out;
}

}  // namespace
}  // namespace fedgate::testing
