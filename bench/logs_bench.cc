// The gateway's memory while `fedctl jobs logs` reads a 1 GiB log: once
// following it while the rank writes it, once reading the finished log.
// Samples the gateway's RSS from /proc every 10 ms and prints the growth of
// each phase against the target (< 64 MiB), and against a reference read of
// a 1 MiB log in the same run. Exits 1 when a byte is lost or the target is
// missed.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "fedgate/v1/jobs.grpc.pb.h"
#include "tests/support/harness.h"

using namespace fedgate;
using namespace fedgate::testing;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double RssMiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

struct Phase {
  std::string name;
  long bytes = 0;  // what fedctl printed
  double before = 0, peak = 0, after = 0, seconds = 0;
};

// Runs fedctl jobs logs (which follows until the job ends) through `wc -c`,
// sampling the gateway's RSS.
Phase ReadLog(const std::string& name, pid_t gateway, const std::string& endpoint,
              const std::string& tls_dir, const std::string& id) {
  Phase p;
  p.name = name;
  p.before = p.peak = RssMiB(gateway);
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done) {
      p.peak = std::max(p.peak, RssMiB(gateway));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RunCommand({"/bin/bash", "-c",
                       "set -o pipefail; \"$0\" --gateway \"$1\" --tls-dir \"$2\" jobs logs "
                       "\"$3\" | wc -c",
                       FedctlBin(), endpoint, tls_dir, id},
                      {}, 600000);
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done = true;
  sampler.join();
  p.after = RssMiB(gateway);
  if (r.exit_code == 0) p.bytes = std::stol(r.out);
  else std::fprintf(stderr, "%s: fedctl failed: %s\n", name.c_str(), r.err.c_str());
  return p;
}

std::string Submit(v1::JobService::Stub* stub, const std::string& script) {
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name("chatty");
  req.mutable_spec()->set_gpus(1);
  for (const char* a : {"sh", "-c"}) req.mutable_spec()->add_command(a);
  req.mutable_spec()->add_command(script);
  v1::SubmitJobResponse resp;
  auto st = stub->Submit(&ctx, req, &resp);
  if (!st.ok()) std::fprintf(stderr, "submit: %s\n", st.error_message().c_str());
  return resp.job().id();
}

v1::Job::State State(v1::JobService::Stub* stub, const std::string& id) {
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_id(id);
  v1::GetJobResponse resp;
  (void)stub->Get(&ctx, req, &resp);
  return resp.job().state();
}

}  // namespace

int main() {
  TestCa ca;
  TestFederation fed(&ca);
  TempDir tmp;
  SiteOptions o;
  o.site = "site-a";
  o.node_lines = {"{name: a-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2}"};
  fed.AddSite(o);
  fed.StartAll();
  if (!fed.WaitReady("site-a")) {
    std::fprintf(stderr, "gateway did not start\n");
    return 1;
  }
  const TlsFiles user = ca.User("vision", "bench");
  WriteTlsDir(tmp / "user", user);
  auto stub = v1::JobService::NewStub(TlsChannel(fed.endpoint("site-a"), user));
  const pid_t gw = fed.pid("site-a");
  const std::string tls = tmp / "user";

  // 1 GiB of 'x' and a newline, paced so that a follower reads while it grows.
  const long kBig = 1L << 30, kSmall = 1L << 20;
  const std::string big =
      "for i in $(seq 64); do head -c 16777216 /dev/zero | tr '\\0' x; done; echo";
  const std::string small = "head -c 1048576 /dev/zero | tr '\\0' x; echo";

  // The reference: a finished 1 MiB log.
  const std::string small_id = Submit(stub.get(), small);
  Eventually([&] { return State(stub.get(), small_id) == v1::Job::SUCCEEDED; }, 60000, 100);
  Phase ref = ReadLog("1 MiB log, read (reference)", gw, fed.endpoint("site-a"), tls, small_id);

  const std::string big_id = Submit(stub.get(), big);
  Phase follow = ReadLog("1 GiB log, followed while written", gw, fed.endpoint("site-a"), tls,
                         big_id);
  Eventually([&] { return State(stub.get(), big_id) == v1::Job::SUCCEEDED; }, 60000, 100);
  Phase read = ReadLog("1 GiB log, read when finished", gw, fed.endpoint("site-a"), tls, big_id);

  std::printf("# gateway RSS while fedctl jobs logs reads a log (target: growth < 64 MiB)\n");
  std::printf("%-34s %12s %9s %9s %9s %9s %8s %10s\n", "phase", "bytes", "rss0_MiB", "peak_MiB",
              "after_MiB", "growth", "seconds", "MiB/s");
  bool ok = true;
  for (const Phase* p : {&ref, &follow, &read}) {
    const double growth = p->peak - p->before;
    std::printf("%-34s %12ld %9.1f %9.1f %9.1f %9.1f %8.2f %10.1f\n", p->name.c_str(), p->bytes,
                p->before, p->peak, p->after, growth, p->seconds, p->bytes / kMiB / p->seconds);
  }
  const double g_ref = ref.peak - ref.before;
  for (const Phase* p : {&follow, &read}) {
    const double growth = p->peak - p->before;
    std::printf("# %s: growth %.1f MiB = %.2f of the target; %.2fx the 1 MiB reference's "
                "growth (%.1f MiB) for 1024x the bytes\n",
                p->name.c_str(), growth, growth / 64.0, g_ref > 0.05 ? growth / g_ref : 0.0,
                g_ref);
    ok = ok && growth < 64.0 && p->bytes == kBig + 1;
  }
  ok = ok && ref.bytes == kSmall + 1;
  std::printf("# target: every byte once and growth < 64 MiB: %s\n", ok ? "OK" : "FAILED");
  fed.Stop("site-a", 30000);
  return ok ? 0 : 1;
}
