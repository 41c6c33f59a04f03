// The job lifecycle against real gateways: a cancel acknowledged while a
// participant is frozen in Prepare starts no rank anywhere; a site other than
// the job's coordinator is refused on every participant call; many fedctl
// processes submit at once; a large log is followed to its end; open
// streams hold no thread; aborts under load never put two jobs on one GPU
// (read from the process table).
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "fedgate/v1/jobs.grpc.pb.h"
#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

class LifecycleTest : public ::testing::Test {
 protected:
  void AddSite(const std::string& site, std::vector<std::string> peers, int gpus,
               const std::string& lease = "") {
    SiteOptions o;
    o.site = site;
    o.peers = std::move(peers);
    o.jobs_lease = lease;
    o.node_lines = {"{name: " + site + "-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: " +
                    std::to_string(gpus) + "}"};
    fed_.AddSite(o);
  }
  void SetUp() override {
    alice_ = ca_.User("vision", "alice");
    WriteTlsDir(tmp_ / "alice", alice_);
  }
  std::unique_ptr<v1::JobService::Stub> Jobs(const std::string& site) {
    return v1::JobService::NewStub(TlsChannel(fed_.endpoint(site), alice_));
  }
  v1::Job Get(const std::string& site, const std::string& id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetJobRequest req;
    req.set_id(id);
    v1::GetJobResponse resp;
    (void)Jobs(site)->Get(&ctx, req, &resp);
    return resp.job();
  }
  std::string Submit(const std::string& site, v1::JobSpec spec) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::SubmitJobRequest req;
    *req.mutable_spec() = std::move(spec);
    v1::SubmitJobResponse resp;
    auto st = Jobs(site)->Submit(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job().id();
  }

  TestCa ca_;
  TestFederation fed_{&ca_};
  TempDir tmp_;
  TlsFiles alice_;
};

TEST_F(LifecycleTest, CancelWhileAParticipantIsFrozenInPrepareStartsNoRank) {
  // A long lease gives the calls to the frozen site a 5 s deadline: time to
  // cancel while the job is RESERVING.
  AddSite("site-a", {"site-b"}, 2, "12s");
  AddSite("site-b", {"site-a"}, 4, "12s");
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  const std::string marker = fed_.shared_dir() + "/rank-started";
  v1::JobSpec spec;
  spec.set_name("never");
  spec.set_gpus(6);  // needs both sites
  for (const char* a : {"sh", "-c", "touch \"$0\"; sleep 30"}) spec.add_command(a);
  spec.add_command(marker);

  fed_.Kill("site-b", SIGSTOP);
  const std::string id = Submit("site-a", spec);
  ASSERT_TRUE(Eventually([&] { return Get("site-a", id).state() == v1::Job::RESERVING; }, 5000, 20))
      << Get("site-a", id).reason();
  grpc::ClientContext ctx;
  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  v1::CancelJobResponse resp;
  ASSERT_TRUE(Jobs("site-a")->Cancel(&ctx, cancel, &resp).ok());
  EXPECT_EQ(resp.job().state(), v1::Job::CANCELLED);
  fed_.Kill("site-b", SIGCONT);

  // The reservation's calls end, the coordinator's passes run again and
  // again: the job stays cancelled and no rank of it ever starts.
  for (int i = 0; i < 40; ++i) {
    const v1::Job j = Get("site-a", id);
    ASSERT_EQ(j.state(), v1::Job::CANCELLED) << "after " << i * 100 << " ms: " << j.reason();
    ASSERT_FALSE(std::filesystem::exists(marker)) << "a rank of the cancelled job started";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(Get("site-a", id).attempt(), 1u) << "never placed a second time";
}

TEST_F(LifecycleTest, ASiteOtherThanTheCoordinatorIsRefusedOnEveryParticipantCall) {
  AddSite("site-a", {"site-b"}, 1);
  AddSite("site-b", {"site-a", "site-c"}, 4);
  AddSite("site-c", {"site-b"}, 1);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c"}); }, 15000));
  v1::JobSpec spec;
  spec.set_name("victim");
  spec.set_gpus(3);  // only site-b has 3
  for (const char* a : {"sleep", "60"}) spec.add_command(a);
  const std::string id = Submit("site-a", spec);
  ASSERT_TRUE(Eventually([&] { return Get("site-a", id).state() == v1::Job::RUNNING; }, 20000))
      << Get("site-a", id).reason();
  const v1::Job job = Get("site-a", id);
  ASSERT_EQ(job.run().sites(0).site(), "site-b");

  // site-c is an approved peer of site-b, with a valid gateway certificate,
  // but it does not coordinate this job.
  auto peer = v1::PeerService::NewStub(TlsChannel(fed_.endpoint("site-b"), ca_.Gateway("site-c")));
  v1::ReservationKey key;
  key.set_job_id(id);
  key.set_attempt(job.attempt());
  key.set_epoch(job.run().epoch());
  auto expect_denied = [&](const char* what, auto call) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    const grpc::Status st = call(&ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << what << ": " << st.error_message();
  };
  expect_denied("Abort", [&](grpc::ClientContext* ctx) {
    v1::AbortRequest r;
    r.set_site("site-c");
    *r.mutable_key() = key;
    v1::AbortResponse out;
    return peer->Abort(ctx, r, &out);
  });
  expect_denied("Prepare (newer epoch)", [&](grpc::ClientContext* ctx) {
    v1::PrepareRequest r;
    r.set_site("site-c");
    *r.mutable_key() = key;
    r.mutable_key()->set_epoch(key.epoch() + 1);
    auto* n = r.add_nodes();
    n->set_node("site-b-n1");
    n->set_gpus(1);
    v1::PrepareResponse out;
    return peer->Prepare(ctx, r, &out);
  });
  expect_denied("Commit", [&](grpc::ClientContext* ctx) {
    v1::CommitRequest r;
    r.set_site("site-c");
    *r.mutable_key() = key;
    r.add_command("true");
    r.set_world_size(1);
    r.set_master_port(1);
    v1::CommitResponse out;
    return peer->Commit(ctx, r, &out);
  });
  expect_denied("SliceStatus", [&](grpc::ClientContext* ctx) {
    v1::SliceStatusRequest r;
    r.set_site("site-c");
    *r.mutable_key() = key;
    v1::SliceStatusResponse out;
    return peer->SliceStatus(ctx, r, &out);
  });
  expect_denied("ReadLog", [&](grpc::ClientContext* ctx) {
    v1::ReadLogRequest r;
    r.set_site("site-c");
    r.set_job_id(id);
    v1::ReadLogResponse out;
    return peer->ReadLog(ctx, r, &out);
  });
  // A job id that is not one is refused before it becomes part of a path.
  {
    grpc::ClientContext ctx;
    v1::ReadLogRequest r;
    r.set_site("site-c");
    r.set_job_id("../../../etc");
    v1::ReadLogResponse out;
    EXPECT_EQ(peer->ReadLog(&ctx, r, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Nothing the intruder sent touched the job.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(Get("site-a", id).state(), v1::Job::RUNNING) << Get("site-a", id).reason();
}

TEST_F(LifecycleTest, SixtyFourFedctlProcessesSubmitAtOnce) {
  AddSite("site-a", {}, 8);
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  WriteText(tmp_ / "job.yaml", "name: burst\ngpus: 1\ncommand: ['true']\n");
  std::vector<std::unique_ptr<Process>> procs;
  for (int i = 0; i < 64; ++i) {
    procs.push_back(Process::Spawn({FedctlBin(), "--gateway", fed_.endpoint("site-a"),
                                    "--tls-dir", tmp_ / "alice", "-o", "json", "jobs", "submit",
                                    "-f", tmp_ / "job.yaml"},
                                   tmp_ / ("submit-" + std::to_string(i) + ".log")));
  }
  int ok = 0;
  for (int i = 0; i < 64; ++i) {
    auto code = procs[i]->Wait(60000);
    if (code && *code == 0) {
      ++ok;
    } else {
      ADD_FAILURE() << "fedctl " << i << ": " << ReadText(tmp_ / ("submit-" + std::to_string(i) + ".log"));
    }
  }
  EXPECT_EQ(ok, 64);
}

TEST_F(LifecycleTest, ALargeLogIsFollowedToItsEndInChunks) {
  AddSite("site-a", {}, 1);
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  // 1 GiB: far past gRPC's 4 MiB message limit, so only chunks get through.
  constexpr long kBytes = 1L << 30;
  v1::JobSpec spec;
  spec.set_name("chatty");
  spec.set_gpus(1);
  for (const char* a : {"sh", "-c", "head -c 1073741824 /dev/zero | tr '\\0' x; echo; echo END"}) {
    spec.add_command(a);
  }
  const std::string id = Submit("site-a", spec);
  auto r = RunCommand({"/bin/sh", "-c",
                       "\"$0\" --gateway \"$1\" --tls-dir \"$2\" jobs logs \"$3\" | wc -c",
                       FedctlBin(), fed_.endpoint("site-a"), tmp_ / "alice", id},
                      {}, 120000);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::stol(r.out), kBytes + 5) << "every byte once, up to END";
  EXPECT_EQ(Get("site-a", id).state(), v1::Job::SUCCEEDED);
}

TEST_F(LifecycleTest, StreamsPerCallerAreCapped) {
  SiteOptions o;
  o.site = "site-a";
  o.node_lines = {"{name: a-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2}"};
  o.extra_yaml = "api: {max_streams_per_caller: 2}\n";
  fed_.AddSite(o);
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  v1::JobSpec spec;
  spec.set_name("long");
  spec.set_gpus(1);
  for (const char* a : {"sleep", "60"}) spec.add_command(a);
  const std::string id = Submit("site-a", spec);
  auto stub = Jobs("site-a");
  v1::WatchJobRequest req;
  req.set_id(id);
  // Two streams open and deliver the job.
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Job>>> open;
  for (int i = 0; i < 2; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    open.push_back(stub->Watch(ctxs.back().get(), req));
    v1::Job j;
    ASSERT_TRUE(open.back()->Read(&j)) << "stream " << i;
    EXPECT_EQ(j.id(), id);
  }
  // The third of the same caller is refused.
  {
    grpc::ClientContext ctx;
    auto third = stub->Watch(&ctx, req);
    v1::Job j;
    EXPECT_FALSE(third->Read(&j));
    const grpc::Status st = third->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  }
  // Closing one frees its slot.
  ctxs[0]->TryCancel();
  (void)open[0]->Finish();
  EXPECT_TRUE(Eventually(
      [&] {
        grpc::ClientContext ctx;
        auto again = stub->Watch(&ctx, req);
        v1::Job j;
        const bool ok = again->Read(&j);
        ctx.TryCancel();
        (void)again->Finish();
        return ok;
      },
      5000, 100));
  ctxs[1]->TryCancel();
  (void)open[1]->Finish();
}

// The GPUs that live rank processes of `jobs` hold right now, read from the
// process table (each rank's environment), not from any gateway's ledger.
std::map<std::string, std::set<std::string>> GpuHolders(const std::set<std::string>& jobs,
                                                        int* processes) {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
    std::ifstream in(e.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::map<std::string, std::string> vars;
    for (size_t at = 0; at < env.size();) {
      size_t end = env.find('\0', at);
      if (end == std::string::npos) end = env.size();
      const std::string kv = env.substr(at, end - at);
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
      at = end + 1;
    }
    auto job = vars.find("FEDGATE_JOB_ID");
    if (job == vars.end() || jobs.count(job->second) == 0) continue;
    ++*processes;
    out[vars["FEDGATE_SITE"] + "/gpu" + vars["CUDA_VISIBLE_DEVICES"]].insert(job->second);
  }
  return out;
}

// Jobs that ignore SIGTERM (so an aborted slice lingers until it is killed
// after the grace) are cancelled at random while others wait for their GPUs.
// Sampled every few milliseconds from /proc: no GPU of any site is ever held
// by live processes of two jobs.
TEST_F(LifecycleTest, AbortUnderLoadNeverDoubleBooksAGpu) {
  AddSite("site-a", {"site-b"}, 2);
  AddSite("site-b", {"site-a"}, 2);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  std::set<std::string> ids;
  std::vector<std::string> order;
  for (int i = 0; i < 14; ++i) {
    v1::JobSpec spec;
    spec.set_name("stubborn-" + std::to_string(i));
    spec.set_gpus(i % 3 == 0 ? 3 : 1);  // some span both sites
    for (const char* a : {"sh", "-c", "trap '' TERM; sleep 1.5"}) spec.add_command(a);
    const std::string id = Submit("site-a", spec);
    ASSERT_FALSE(id.empty());
    ids.insert(id);
    order.push_back(id);
  }

  std::atomic<bool> done{false};
  std::atomic<int> samples{0}, seen_procs{0};
  std::string violation;
  std::thread sampler([&] {
    while (!done) {
      int procs = 0;
      for (const auto& [gpu, holders] : GpuHolders(ids, &procs)) {
        if (holders.size() > 1 && violation.empty()) {
          violation = gpu + " held by " + *holders.begin() + " and " + *holders.rbegin();
        }
      }
      seen_procs += procs;
      ++samples;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });

  // Cancel every other job once it runs; the rest run to their end.
  int cancelled_running = 0;
  auto stub = Jobs("site-a");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  std::set<std::string> left = ids;
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < order.size(); ++i) {
      if (left.count(order[i]) == 0) continue;
      const v1::Job j = Get("site-a", order[i]);
      if (j.state() == v1::Job::SUCCEEDED || j.state() == v1::Job::FAILED || j.state() == v1::Job::CANCELLED) {
        left.erase(order[i]);
      } else if (i % 2 == 1 && j.state() == v1::Job::RUNNING) {
        grpc::ClientContext ctx;
        v1::CancelJobRequest req;
        req.set_id(order[i]);
        v1::CancelJobResponse resp;
        if (stub->Cancel(&ctx, req, &resp).ok()) ++cancelled_running;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Lingering ranks of the last aborts are killed after the grace.
  EXPECT_TRUE(Eventually(
      [&] {
        int procs = 0;
        (void)GpuHolders(ids, &procs);
        return procs == 0;
      },
      10000));
  done = true;
  sampler.join();
  EXPECT_TRUE(left.empty()) << left.size() << " job(s) never ended";
  EXPECT_TRUE(violation.empty()) << violation;
  EXPECT_GE(cancelled_running, 4) << "the abort path was hardly exercised";
  EXPECT_GT(seen_procs.load(), 0) << "no rank process was ever seen: the check saw nothing";
  std::cout << samples.load() << " process-table samples, " << cancelled_running
            << " running jobs cancelled\n";
}

int Threads(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// Watch and Logs are reactors: 48 open streams hold no thread while they
// wait, and a state write (the cancel) wakes every Watch at once.
TEST_F(LifecycleTest, OpenStreamsHoldNoThreadAndWakeOnStateChanges) {
  SiteOptions o;
  o.site = "site-a";
  o.node_lines = {"{name: a-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2}"};
  o.extra_yaml = "api: {max_streams_per_caller: 64}\n";
  fed_.AddSite(o);
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  v1::JobSpec spec;
  spec.set_name("quiet");
  spec.set_gpus(1);
  for (const char* a : {"sleep", "60"}) spec.add_command(a);
  const std::string id = Submit("site-a", spec);
  ASSERT_TRUE(Eventually([&] { return Get("site-a", id).state() == v1::Job::RUNNING; }, 10000));
  // The histograms an operator watches saw this job and its calls.
  const int ops = fed_.ops_port("site-a");
  EXPECT_EQ(Metric(ops, "fedgate_job_scheduling_delay_seconds_count{tenant=\"vision\","
                        "priority=\"guaranteed\"}"),
            1);
  EXPECT_GE(Metric(ops, "fedgate_job_store_commit_seconds_count"), 2);  // submit, RUNNING
  EXPECT_EQ(Metric(ops, "fedgate_rpc_duration_seconds_count{method=\"Submit\",code=\"OK\"}"), 1);
  // Each store commit observes both histograms; two scrapes may straddle a
  // commit (the reservation's record), so compare until they agree.
  EXPECT_TRUE(Eventually(
      [&] {
        return Metric(ops, "fedgate_job_store_batch_size_count") ==
               Metric(ops, "fedgate_job_store_commit_seconds_count");
      },
      5000));
  // Counted once every site answered the commit, which may be just after
  // the job reads RUNNING (the decision is written first).
  EXPECT_TRUE(Eventually([&] { return Metric(ops, "fedgate_reservations_total{result=\"committed\"}") == 1; }, 5000));
  EXPECT_EQ(Metric(ops, "fedgate_reservation_phase_seconds_count{phase=\"prepare\",result=\"ok\"}"), 1);
  EXPECT_EQ(Metric(ops, "fedgate_job_gpus{state=\"RUNNING\",tenant=\"vision\",priority=\"guaranteed\"}"),
            spec.gpus());
  EXPECT_GT(Metric(ops, "fedgate_tls_cert_expiry_seconds"), 1.7e9);
  auto stub = Jobs("site-a");
  const pid_t pid = fed_.pid("site-a");
  const int before = Threads(pid);
  ASSERT_GT(before, 0);

  constexpr int kWatches = 32, kLogs = 16;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Job>>> watches;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::LogsResponse>>> logs;
  v1::WatchJobRequest wreq;
  wreq.set_id(id);
  for (int i = 0; i < kWatches; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    watches.push_back(stub->Watch(ctxs.back().get(), wreq));
    v1::Job j;
    ASSERT_TRUE(watches.back()->Read(&j)) << "watch " << i;
    ASSERT_EQ(j.state(), v1::Job::RUNNING);
  }
  v1::LogsRequest lreq;
  lreq.set_id(id);
  lreq.set_follow(true);
  for (int i = 0; i < kLogs; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    logs.push_back(stub->Logs(ctxs.back().get(), lreq));
  }
  ASSERT_TRUE(Eventually(
      [&] {
        return Metric(fed_.ops_port("site-a"), "fedgate_job_rpc_handled_total{method=\"Logs\"}") >=
               kLogs;
      },
      5000));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // a few log ticks
  const int during = Threads(pid);
  std::cout << "gateway threads: " << before << " before, " << during << " with "
            << kWatches + kLogs << " streams open\n";
  // A thread per stream would add 48; gRPC may add a few of its own.
  EXPECT_LT(during - before, 12) << before << " threads before, " << during << " with "
                                 << kWatches + kLogs << " streams open";

  // The cancel wakes every Watch with the new state, then each ends with OK;
  // the log followers end once the job has ended.
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_id(id);
    v1::CancelJobResponse resp;
    ASSERT_TRUE(stub->Cancel(&ctx, req, &resp).ok());
  }
  for (int i = 0; i < kWatches; ++i) {
    v1::Job j;
    ASSERT_TRUE(watches[i]->Read(&j)) << "watch " << i;
    EXPECT_EQ(j.state(), v1::Job::CANCELLED);
    EXPECT_FALSE(watches[i]->Read(&j));
    EXPECT_TRUE(watches[i]->Finish().ok());
  }
  for (int i = 0; i < kLogs; ++i) {
    v1::LogsResponse r;
    while (logs[i]->Read(&r)) {
    }
    const grpc::Status st = logs[i]->Finish();
    EXPECT_TRUE(st.ok()) << "logs " << i << ": " << st.error_message();
  }
}

}  // namespace
}  // namespace fedgate::testing
