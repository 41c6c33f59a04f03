// Coordinator lease margin under load: 1 000 running jobs across 3 real
// gateways, then one site is black-holed (SIGSTOP). Renewals of the jobs on
// the two healthy sites must keep their margin: no healthy slice may stop.
// Prints the worst renewal gap as a ratio of the lease, and OK / FAILED.
#include <google/protobuf/util/json_util.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "fedgate/v1/jobs.grpc.pb.h"
#include "tests/support/harness.h"

using namespace fedgate;
using namespace fedgate::testing;

namespace {

std::vector<v1::Job> ListAll(v1::JobService::Stub* stub) {
  std::vector<v1::Job> out;
  std::string token;
  do {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ListJobsRequest req;
    req.set_page_size(1000);
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    if (!stub->List(&ctx, req, &resp).ok()) return {};
    for (const auto& j : resp.jobs()) out.push_back(j);
    token = resp.next_page_token();
  } while (!token.empty());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--jobs") jobs = std::atoi(argv[i + 1]);
  }
  const int per_site = jobs / 3 + 10;
  TestCa ca;
  TestFederation fed(&ca);
  const std::vector<std::string> sites = {"site-a", "site-b", "site-c"};
  fed.AddMesh(sites, per_site);
  fed.StartAll();
  if (!Eventually([&] { return fed.Converged(sites); }, 30000)) {
    std::fprintf(stderr, "federation did not converge\n");
    return 1;
  }
  auto stub = v1::JobService::NewStub(TlsChannel(fed.endpoint("site-a"), ca.User("vision", "b")));
  const auto t0 = std::chrono::steady_clock::now();
  int failed_submits = 0;
  for (int i = 0; i < jobs; ++i) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name("lease");
    req.mutable_spec()->set_gpus(1);
    req.mutable_spec()->add_command("sleep");
    req.mutable_spec()->add_command("3600");
    v1::SubmitJobResponse resp;
    if (!stub->Submit(&ctx, req, &resp).ok()) ++failed_submits;
  }
  std::fprintf(stderr, "submitted %d jobs (%d failed); waiting for all to run\n", jobs,
               failed_submits);
  int running = 0;
  Eventually(
      [&] {
        running = 0;
        for (const auto& j : ListAll(stub.get())) running += j.state() == v1::Job::RUNNING;
        std::fprintf(stderr, "\r%d/%d running", running, jobs);
        return running == jobs;
      },
      600000, 1000);
  const double start_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\n");
  const double lease_s = Metric(fed.ops_port("site-a"), "fedgate_coordinator_lease_seconds");
  std::map<std::string, std::string> site_of;  // healthy jobs: id -> site
  for (const auto& j : ListAll(stub.get())) {
    if (j.run().sites_size() == 1 && j.run().sites(0).site() != "site-c") {
      site_of[j.id()] = j.run().sites(0).site();
    }
  }
  const double gap_before =
      Metric(fed.ops_port("site-a"), "fedgate_coordinator_worst_renew_gap_seconds");
  const double passes_before =
      Metric(fed.ops_port("site-a"), "fedgate_coordinator_renew_passes_total");

  fed.Kill("site-c", SIGSTOP);
  std::fprintf(stderr, "site-c black-holed; watching for %.0f s (4 leases)\n", 4 * lease_s);
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(4000 * lease_s)));
  const double gap = Metric(fed.ops_port("site-a"), "fedgate_coordinator_worst_renew_gap_seconds");
  const double passes =
      Metric(fed.ops_port("site-a"), "fedgate_coordinator_renew_passes_total") - passes_before;
  int healthy_stopped = 0, c_failed_over = 0;
  for (const auto& j : ListAll(stub.get())) {
    if (site_of.contains(j.id())) {
      if (j.state() != v1::Job::RUNNING || j.attempt() != 1) ++healthy_stopped;
    } else if (j.attempt() > 1 || j.state() != v1::Job::RUNNING) {
      ++c_failed_over;
    }
  }
  fed.Kill("site-c", SIGCONT);

  std::printf("# coordinator lease margin: %d running jobs on 3 sites, site-c black-holed\n",
              jobs);
  std::printf("# all %d jobs running after %.1f s (placement: %.0f jobs/s)\n", jobs, start_s,
              jobs / start_s);
  std::printf("%-34s %10s\n", "measure", "value");
  std::printf("%-34s %10.1f\n", "lease (s)", lease_s);
  std::printf("%-34s %10zu\n", "jobs on healthy sites", site_of.size());
  std::printf("%-34s %10.0f\n", "renewal passes while black-holed", passes);
  std::printf("%-34s %10.3f\n", "worst renewal gap before (s)", gap_before);
  std::printf("%-34s %10.3f\n", "worst renewal gap (s)", gap);
  std::printf("%-34s %10.3f\n", "worst gap / lease", gap / lease_s);
  std::printf("%-34s %10.3f\n", "worst margin / lease", 1 - gap / lease_s);
  std::printf("%-34s %10d\n", "healthy slices stopped", healthy_stopped);
  std::printf("%-34s %10d\n", "site-c jobs failed over or waiting", c_failed_over);
  const bool ok = healthy_stopped == 0 && failed_submits == 0 && !site_of.empty();
  std::printf("# target: no healthy slice stops: %s\n", ok ? "OK" : "FAILED");
  for (const auto& s : sites) fed.Stop(s, 60000);  // SIGTERM: each stops its ranks
  return ok ? 0 : 1;
}
