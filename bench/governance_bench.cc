// Tenant governance, measured on real gateways:
// 1. Submit throughput with quotas on against quotas off, in one run: --jobs
//    short jobs (`true`, 1 GPU) submitted at once at site-a of a two-site
//    federation, from the first submit to the last commit. "On":
//    site-b is the tenant's home with a quota that never binds, so every
//    reservation also holds quota at another site. Target: on >= 0.8 x off.
// 2. Preemption: a spot job that ignores SIGTERM fills site-a (coordinated
//    by site-b); a guaranteed job submitted at site-a must preempt it. Time
//    from the submit to RUNNING, minus preemption.grace (2 s). Target < 3 s.
// Exits 1 when a target is missed or a job did not end as expected.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "fedgate/v1/jobs.grpc.pb.h"
#include "tests/support/harness.h"

using namespace fedgate;
using namespace fedgate::testing;
using Clock = std::chrono::steady_clock;

namespace {

SiteOptions Site(const std::string& name, const std::string& peer, int gpus,
                 const std::string& extra) {
  SiteOptions o;
  o.site = name;
  o.peers = {peer};
  o.interval = "500ms";
  o.ttl = "2500ms";
  o.node_lines = {"{name: " + name + "-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: " +
                  std::to_string(gpus) + "}"};
  o.extra_yaml = extra;
  return o;
}

v1::Job::State StateOf(v1::JobService::Stub* stub, const std::string& id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetJobRequest req;
  req.set_id(id);
  v1::GetJobResponse resp;
  if (!stub->Get(&ctx, req, &resp).ok()) return v1::Job::STATE_UNSPECIFIED;
  return resp.job().state();
}

std::string Submit(v1::JobService::Stub* stub, const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  auto st = stub->Submit(&ctx, req, &resp);
  if (!st.ok()) std::fprintf(stderr, "submit: %s\n", st.error_message().c_str());
  return resp.job().id();
}

bool WaitFor(v1::JobService::Stub* stub, const std::string& id, v1::Job::State want, int ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < end) {
    if (StateOf(stub, id) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Placements per second: --jobs short jobs (`true`, 1 GPU) submitted at once
// at site-a, from the first submit until the last one is committed (site-a's
// commit count), so that how often the coordinator polls for ended jobs does
// not decide it; then every job must end SUCCEEDED. -1 on failure.
double Throughput(bool quotas, int jobs) {
  TestCa ca;
  TestFederation fed(&ca);
  fed.AddSite(Site("site-a", "site-b", jobs, ""));
  fed.AddSite(Site("site-b", "site-a", 1,
                   quotas ? "tenants:\n  - {name: vision, gpus: 100000}\n" : ""));
  fed.StartAll();
  if (!Eventually([&] { return fed.Converged({"site-a", "site-b"}); }, 30000)) return -1;
  auto stub = v1::JobService::NewStub(TlsChannel(fed.endpoint("site-a"), ca.User("vision", "b")));
  v1::JobSpec spec;
  spec.set_name("t");
  spec.set_gpus(1);
  spec.add_command("true");
  const std::string commits =
      "fedgate_reservation_phase_seconds_count{phase=\"commit\",result=\"ok\"}";
  const auto t0 = Clock::now();
  std::vector<std::string> ids;
  for (int i = 0; i < jobs; ++i) {
    ids.push_back(Submit(stub.get(), spec));
    if (ids.back().empty()) return -1;
  }
  if (!Eventually([&] { return Metric(fed.ops_port("site-a"), commits) >= jobs; }, 300000, 10)) {
    std::fprintf(stderr, "only %.0f of %d jobs were placed\n", Metric(fed.ops_port("site-a"), commits),
                 jobs);
    return -1;
  }
  const double rate = jobs / std::chrono::duration<double>(Clock::now() - t0).count();
  // Where a placement's time goes: site-a's mean prepare and commit phase.
  auto mean_ms = [&](const char* phase) {
    const std::string labels = std::string("{phase=\"") + phase + "\",result=\"ok\"}";
    const double n = Metric(fed.ops_port("site-a"), "fedgate_reservation_phase_seconds_count" + labels);
    return n > 0 ? 1000 * Metric(fed.ops_port("site-a"), "fedgate_reservation_phase_seconds_sum" + labels) / n
                 : 0.0;
  };
  std::printf("  quotas %s: %.1f placements/s (mean prepare %.2f ms, commit %.2f ms)",
              quotas ? "on " : "off", rate, mean_ms("prepare"), mean_ms("commit"));
  // What the home site is asked per job (the quota path's extra calls).
  if (quotas) {
    std::printf("; calls at site-b per job:");
    for (const char* m : {"Prepare", "Commit", "Abort", "SliceStatus"}) {
      const std::string series =
          std::string("fedgate_peer_rpc_handled_total{method=\"") + m + "\"}";
      std::printf(" %s %.2f", m, Metric(fed.ops_port("site-b"), series) / jobs);
    }
  }
  std::printf("\n");
  for (const auto& id : ids) {
    if (!WaitFor(stub.get(), id, v1::Job::SUCCEEDED, 60000)) {
      std::fprintf(stderr, "job %s ended %s\n", id.c_str(),
                   v1::Job::State_Name(StateOf(stub.get(), id)).c_str());
      return -1;
    }
  }
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 400, rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--jobs") jobs = std::atoi(argv[i + 1]);
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
  }
  // This host slows down over a burst of runs (the same mode measured 112,
  // 79 and 63 placements/s in three runs back to back; its CPU, spawn and
  // fsync rates held steady meanwhile), so a fixed order favours whichever
  // mode runs first, and idle time brings the speed back. The first run of
  // a burst is the outlier (up to 1.8x any later one), so one warm-up run
  // is not counted; the modes then run in the order off on on off, on off
  // off on, which gives each mode the same share of early and late slots;
  // the ratio is of their mean rates.
  std::printf("  warm-up run, not counted:\n");
  if (Throughput(true, jobs) < 0) {
    std::fprintf(stderr, "throughput run failed\n");
    return 1;
  }
  const bool order[] = {false, true, true, false, true, false, false, true};
  double sum[2] = {0, 0};
  for (bool quotas : order) {
    const double r = Throughput(quotas, jobs);
    if (r < 0) {
      std::fprintf(stderr, "throughput run failed\n");
      return 1;
    }
    sum[quotas] += r;
  }
  const double off = sum[0] / 4, on = sum[1] / 4;
  std::printf("# %d jobs (true, 1 GPU) submitted at once at site-a of 2 sites: submit to last "
              "commit; after a warm-up run, mean of 4 runs per mode, in the order off on on off on off "
              "off on\n",
              jobs);
  std::printf("quotas off: %.1f placements/s\nquotas on (home at site-b): %.1f placements/s\n"
              "ratio on/off: %.2f"
              " (target >= 0.80)\n",
              off, on, on / off);
  bool ok = on / off >= 0.8;

  // Preemption.
  TestCa ca;
  TestFederation fed(&ca);
  fed.AddSite(Site("site-a", "site-b", 4, "preemption: {grace: 2s}\n"));
  fed.AddSite(Site("site-b", "site-a", 1, ""));
  fed.StartAll();
  if (!Eventually([&] { return fed.Converged({"site-a", "site-b"}); }, 30000)) return 1;
  auto at_a = v1::JobService::NewStub(TlsChannel(fed.endpoint("site-a"), ca.User("vision", "g")));
  auto at_b = v1::JobService::NewStub(TlsChannel(fed.endpoint("site-b"), ca.User("batch", "s")));
  v1::JobSpec spot;
  spot.set_name("spot");
  spot.set_gpus(4);
  spot.set_priority("spot");
  spot.add_allowed_sites("site-a");
  for (const char* a : {"sh", "-c", "trap '' TERM; while true; do sleep 0.2; done"}) spot.add_command(a);
  v1::JobSpec guaranteed;
  guaranteed.set_name("g");
  guaranteed.set_gpus(4);
  guaranteed.add_allowed_sites("site-a");
  guaranteed.add_command("true");
  std::vector<double> lag;
  for (int r = 0; r < rounds; ++r) {
    const std::string s = Submit(at_b.get(), spot);
    if (!WaitFor(at_b.get(), s, v1::Job::RUNNING, 20000)) return 1;
    // The ad must say the GPUs are preemptible before the guaranteed job comes.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    const auto t0 = Clock::now();
    const std::string g = Submit(at_a.get(), guaranteed);
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    v1::Job::State st = v1::Job::STATE_UNSPECIFIED;
    while (Clock::now() < deadline) {
      st = StateOf(at_a.get(), g);
      if (st == v1::Job::RUNNING || st == v1::Job::SUCCEEDED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (st != v1::Job::RUNNING && st != v1::Job::SUCCEEDED) {
      std::fprintf(stderr, "round %d: the guaranteed job did not start\n", r);
      return 1;
    }
    lag.push_back(std::chrono::duration<double>(Clock::now() - t0).count() - 2.0);
    if (!WaitFor(at_a.get(), g, v1::Job::SUCCEEDED, 20000)) return 1;
    grpc::ClientContext ctx;
    v1::CancelJobRequest c;
    c.set_id(s);
    v1::CancelJobResponse cr;
    (void)at_b->Cancel(&ctx, c, &cr);
    if (!Eventually([&] {
          auto cap = fed.Capacity("site-a");
          if (!cap) return false;
          for (const auto& site : cap->sites()) {
            if (site.site() == "site-a") return site.free_gpus() == 4;
          }
          return false;
        }, 20000)) {
      return 1;
    }
  }
  std::sort(lag.begin(), lag.end());
  std::printf("# preemption: spot job ignoring SIGTERM on 4 GPUs of site-a (coordinated by "
              "site-b), guaranteed 4-GPU job submitted at site-a, grace 2 s, %d rounds\n",
              rounds);
  std::printf("submit to RUNNING minus grace: median %.2f s, max %.2f s (target < 3 s)\n",
              lag[lag.size() / 2], lag.back());
  ok = ok && lag[lag.size() / 2] < 3.0;
  return ok ? 0 : 1;
}
