// The simulator and the gateways agree: one small trace, replayed through a
// real three-site federation (process executor, short jobs) and through
// fedsim, starts its jobs in the same order.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "bench/fedsim/sim.h"
#include "fedgate/v1/jobs.pb.h"
#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

struct TraceRow {
  const char* name;
  const char* estimate;  // estimated_duration
  const char* priority;
  const char* tenant;
};

TEST(FedsimAgrees, SameStartOrderAsARealFederation) {
  TestCa ca;
  TestFederation fed(&ca);
  TempDir tmp;
  WriteTlsDir(tmp / "alice", ca.User("vision", "alice"));
  for (const char* s : {"site-a", "site-b", "site-c"}) {
    SiteOptions o;
    o.site = s;
    for (const char* p : {"site-a", "site-b", "site-c"}) {
      if (std::string(p) != s) o.peers.push_back(p);
    }
    o.node_lines = {std::string("{name: ") + s + "-n1, address: 127.0.0.1, gpu_model: A100, gpus: 2}"};
    fed.AddSite(o);
  }
  fed.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed.Converged({"site-a", "site-b", "site-c"}); }, 15000));
  auto fedctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {FedctlBin(), "-o", "json", "--gateway", fed.endpoint("site-a"),
                                     "--tls-dir", tmp / "alice"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  };
  int n = 0;
  auto submit = [&](const std::string& name, int gpus, const std::string& est, const std::string& prio,
                    const std::string& cmd) {
    const std::string file = tmp / ("j" + std::to_string(++n) + ".yaml");
    WriteText(file, "name: " + name + "\ngpus: " + std::to_string(gpus) + "\nestimated_duration: " +
                        est + "\npriority: " + prio + "\ncommand: [sh, -c, '" + cmd + "']\n");
    auto r = fedctl({"jobs", "submit", "-f", file});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    v1::SubmitJobResponse resp;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &resp).ok()) << r.out;
    return resp.job();
  };
  auto get = [&](const std::string& id) {
    auto r = fedctl({"jobs", "get", id});
    v1::GetJobResponse resp;
    google::protobuf::util::JsonParseOptions lax;
    lax.ignore_unknown_fields = true;
    (void)google::protobuf::util::JsonStringToMessage(r.out, &resp, lax);
    return resp.job();
  };
  // A blocker takes all 6 GPUs; the queue forms behind it. Every queued job
  // needs all 6 GPUs too, so they run one by one in the policy's order:
  // guaranteed before spot, shortest per GPU with aging.
  const v1::Job blocker = submit("blocker", 6, "1m", "guaranteed", "sleep 5");
  ASSERT_TRUE(Eventually([&] { return get(blocker.id()).state() == v1::Job::RUNNING; }, 20000));
  const std::vector<TraceRow> rows = {{"q-long", "40m", "guaranteed", "vision"},
                                      {"q-spot", "1m", "spot", "vision"},
                                      {"q-short", "5m", "guaranteed", "vision"},
                                      {"q-mid", "20m", "guaranteed", "vision"},
                                      {"q-tiny-spot", "30s", "spot", "vision"}};
  std::vector<v1::Job> queued;
  for (const auto& r : rows) {
    queued.push_back(submit(r.name, 6, r.estimate, r.priority, "sleep 0.3"));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  ASSERT_EQ(get(blocker.id()).state(), v1::Job::RUNNING) << "the queue must form while it runs";
  for (const auto& q : queued) {
    ASSERT_TRUE(Eventually([&] { return get(q.id()).state() == v1::Job::SUCCEEDED; }, 60000))
        << q.spec().name() << ": " << get(q.id()).reason();
  }
  // The federation's start order: by each run's epoch (its reservation time).
  std::vector<std::pair<uint64_t, std::string>> real;
  for (const auto& q : queued) real.push_back({get(q.id()).run().epoch(), q.spec().name()});
  std::sort(real.begin(), real.end());

  // The same trace for fedsim: submit times from the jobs' creation times.
  std::string trace = "time,duration,num_gpus,tenant,priority\n";
  trace += "0,5,6,vision,guaranteed\n";
  std::map<int, std::string> line_name;
  int line = 2;
  for (size_t i = 0; i < queued.size(); ++i) {
    const double t = (queued[i].created_at_unix_ms() - blocker.created_at_unix_ms()) / 1000.0;
    trace += std::to_string(t) + ",0.3,6,vision," + rows[i].priority + "\n";
    line_name[++line] = rows[i].name;
  }
  fedsim::TraceInfo info;
  auto jobs = fedsim::ParseTrace(trace, &info);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  // fedsim's estimates are the trace durations (no noise): give each row
  // the estimate its job declared, by scaling through the duration column.
  for (size_t i = 0; i < queued.size(); ++i) {
    auto ms = [](const std::string& d) {
      const double v = std::stod(d.substr(0, d.size() - 1));
      return d.back() == 'm' ? v * 60 : v;
    };
    (*jobs)[i + 1].duration_s = ms(rows[i].estimate);
  }
  (*jobs)[0].duration_s = 60;
  fedsim::SimOptions o;
  o.policy = federation::SchedPolicy::kFedgate;
  auto sim = fedsim::Simulate(*jobs, info, {{"site-a", "A100", 2}, {"site-b", "A100", 2}, {"site-c", "A100", 2}}, o);
  ASSERT_TRUE(sim.ok()) << sim.status();
  std::vector<std::string> sim_order, real_order;
  for (int l : sim->start_order) {
    if (line_name.contains(l)) sim_order.push_back(line_name[l]);
  }
  for (const auto& [epoch, name] : real) real_order.push_back(name);
  EXPECT_EQ(real_order, sim_order);
  EXPECT_EQ(real_order,
            (std::vector<std::string>{"q-short", "q-mid", "q-long", "q-tiny-spot", "q-spot"}));
}

}  // namespace
}  // namespace fedgate::testing
