// The job API against a real gateway: durable, idempotent submits; tenants
// see only their own jobs; bad specs change nothing; no acknowledged job is
// lost across kill -9.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "fedgate/v1/jobs.pb.h"
#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

class JobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SiteOptions a;
    a.site = "cn-beijing";
    a.node_lines = {"{name: bj-1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 8}"};
    fed_.AddSite(a);
    fed_.Start("cn-beijing");
    ASSERT_TRUE(fed_.WaitReady("cn-beijing"));
    WriteTlsDir(tmp_ / "alice", ca_.User("vision", "alice"));
    WriteTlsDir(tmp_ / "bob", ca_.User("speech", "bob"));
    WriteText(tmp_ / "job.yaml", "name: t\ngpus: 4\ncommand: [true]\n");
    // Runs long enough to be cancelled (jobs really run here).
    WriteText(tmp_ / "long.yaml", "name: t\ngpus: 4\ncommand: [sleep, '60']\n");
  }
  CommandResult Fedctl(const std::string& who, std::vector<std::string> args) {
    std::vector<std::string> argv = {FedctlBin(), "-o", "json", "--gateway",
                                     fed_.endpoint("cn-beijing"), "--tls-dir",
                                     who == "admin" ? fed_.admin_tls_dir("cn-beijing") : tmp_ / who};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  v1::Job JobOf(const CommandResult& r) {
    v1::GetJobResponse resp;  // submit/get/cancel all wrap {"job": ...}
    google::protobuf::util::JsonParseOptions lax;
    lax.ignore_unknown_fields = true;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &resp, lax).ok()) << r.out;
    return resp.job();
  }
  size_t Count(const std::string& who) {
    auto r = Fedctl(who, {"jobs", "list"});
    v1::ListJobsResponse resp;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &resp).ok()) << r.out << r.err;
    return static_cast<size_t>(resp.jobs_size());
  }
  TestCa ca_;
  TestFederation fed_{&ca_};
  TempDir tmp_;
};

TEST_F(JobsTest, SubmitGetListCancelWithTenantsFromCertificates) {
  auto r = Fedctl("alice", {"jobs", "submit", "-f", tmp_ / "long.yaml", "--idempotency-key", "k1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const v1::Job job = JobOf(r);
  EXPECT_EQ(job.tenant(), "vision") << "the tenant comes from the certificate";
  EXPECT_EQ(job.state(), v1::Job::PENDING);
  EXPECT_EQ(job.spec().priority(), "guaranteed") << "defaults filled in";

  auto again = Fedctl("alice", {"jobs", "submit", "-f", tmp_ / "long.yaml", "--idempotency-key", "k1"});
  EXPECT_EQ(JobOf(again).id(), job.id()) << "same key, same job";
  EXPECT_NE(again.out.find("\"created\":false"), std::string::npos) << again.out;

  auto got = Fedctl("alice", {"jobs", "get", job.id()});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  const v1::Job full = JobOf(got);
  EXPECT_TRUE(full.state() == v1::Job::PENDING || full.state() == v1::Job::RESERVING ||
              full.state() == v1::Job::RUNNING)
      << full.state();

  // Another tenant neither sees nor cancels it; the site's admin sees all.
  auto bob = Fedctl("bob", {"jobs", "get", job.id()});
  EXPECT_NE(bob.exit_code, 0);
  EXPECT_NE(bob.err.find("NOT_FOUND"), std::string::npos) << bob.err;
  EXPECT_NE(Fedctl("bob", {"jobs", "cancel", job.id()}).exit_code, 0);
  EXPECT_EQ(Count("bob"), 0u);
  EXPECT_EQ(Count("alice"), 1u);
  EXPECT_EQ(Count("admin"), 1u);
  auto admin_submit = Fedctl("admin", {"jobs", "submit", "-f", tmp_ / "job.yaml"});
  EXPECT_NE(admin_submit.err.find("PERMISSION_DENIED"), std::string::npos) << admin_submit.err;

  auto cancel = Fedctl("alice", {"jobs", "cancel", job.id()});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(JobOf(cancel).state(), v1::Job::CANCELLED);
  EXPECT_NE(Fedctl("alice", {"jobs", "cancel", job.id()}).err.find("already ended"),
            std::string::npos);
  // fedctl jobs events: one JSON document, its story oldest first.
  auto story = Fedctl("alice", {"jobs", "events", job.id()});
  ASSERT_EQ(story.exit_code, 0) << story.err;
  v1::JobEventsResponse events;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(story.out, &events).ok()) << story.out;
  ASSERT_GE(events.events_size(), 2) << story.out;
  EXPECT_EQ(events.events(0).type(), "submitted");
  EXPECT_EQ(events.events(0).site(), "cn-beijing");
  EXPECT_EQ(events.events(events.events_size() - 1).type(), "finished");
  EXPECT_NE(story.out.find("\"seq\":"), std::string::npos) << "snake_case numbers: " << story.out;
  EXPECT_NE(Fedctl("bob", {"jobs", "events", job.id()}).err.find("NOT_FOUND"), std::string::npos);

  // What an operator's dashboards read: jobs by state, the oldest pending
  // job, and every site's GPUs.
  const int ops = fed_.ops_port("cn-beijing");
  EXPECT_EQ(Metric(ops, "fedgate_jobs{state=\"CANCELLED\"}"), 1);
  EXPECT_EQ(Metric(ops, "fedgate_jobs{state=\"PENDING\"}"), 0);
  EXPECT_EQ(Metric(ops, "fedgate_job_oldest_pending_seconds"), 0);
  EXPECT_EQ(
      Metric(ops, "fedgate_site_gpus{site=\"cn-beijing\",model=\"A100-80GB\",state=\"total\"}"),
      8);
  // glibc malloc's view of the heap: a running gateway holds some megabytes
  // (AddressSanitizer's allocator reports zeros).
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_GT(Metric(ops, "fedgate_heap_bytes{kind=\"in_use\"}"), 1 << 20);
#endif
  int status = 0;
  EXPECT_NE(HttpGet(ops, "/metrics", &status).find("fedgate_heap_bytes{kind=\"free\"}"),
            std::string::npos);
}

TEST_F(JobsTest, BadSpecsAreRefusedAndStoreNothing) {
  WriteText(tmp_ / "bad.yaml", "gpus: 4\ngpu_models: [A10O]\ncommand: [true]\n");
  auto r = Fedctl("alice", {"jobs", "submit", "-f", tmp_ / "bad.yaml"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown gpu model \"A10O\""), std::string::npos) << r.err;
  WriteText(tmp_ / "bad2.yaml", "gpus: 4\ncommand: [true]\nhack: {$gt: 1}\n");
  r = Fedctl("alice", {"jobs", "submit", "-f", tmp_ / "bad2.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Count("alice"), 0u);
}

TEST_F(JobsTest, FiftyKillNineCyclesLoseNoAcknowledgedJob) {
  std::vector<std::string> acked;
  for (int cycle = 0; cycle < 50; ++cycle) {
    auto r = Fedctl("alice", {"jobs", "submit", "-f", tmp_ / "job.yaml"});
    ASSERT_EQ(r.exit_code, 0) << "cycle " << cycle << ": " << r.err;
    acked.push_back(JobOf(r).id());
    fed_.Kill("cn-beijing", SIGKILL);  // right after the acknowledgement
    fed_.Start("cn-beijing");
    ASSERT_TRUE(fed_.WaitReady("cn-beijing")) << fed_.log("cn-beijing");
  }
  auto r = Fedctl("alice", {"jobs", "list"});
  for (const auto& id : acked) {
    EXPECT_NE(r.out.find(id), std::string::npos) << "lost acknowledged job " << id;
  }
  EXPECT_EQ(Count("alice"), acked.size());
}

}  // namespace
}  // namespace fedgate::testing
