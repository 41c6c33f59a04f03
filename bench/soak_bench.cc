// Bounded state: --jobs short jobs (default 10 000, `true` on one GPU) run
// through a three-site federation, all coordinated by site-a, at most
// --in-flight at a time. Prints each gateway's RSS and open fds before the
// first job, after a warm-up of --warmup jobs, and at the end (after the
// last job ended and the sites settled); the targets: RSS grows < 10 % and
// fds come back to their start (+-5). Exits 1 when a target is missed or a
// job did not succeed. --smaps DIR also copies each gateway's
// /proc/PID/smaps at the three points (DIR/<site>-<start|warm|end>.smaps), to
// tell which mapping grew: the brk heap, thread stacks or another mmap.
#include <dirent.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "fedgate/v1/jobs.grpc.pb.h"
#include "tests/support/harness.h"

using namespace fedgate;
using namespace fedgate::testing;

namespace {

struct Usage {
  double rss_mib = 0;
  double anon_mib = 0;  // heap and stacks: what state growth shows in
  double file_mib = 0;  // mapped code and libraries, paged in on first use
  int fds = 0;
  int threads = 0;
};

Usage Measure(pid_t pid) {
  Usage u;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) u.rss_mib = std::stod(line.substr(6)) / 1024.0;
    if (line.rfind("RssAnon:", 0) == 0) u.anon_mib = std::stod(line.substr(8)) / 1024.0;
    if (line.rfind("RssFile:", 0) == 0) u.file_mib = std::stod(line.substr(8)) / 1024.0;
    if (line.rfind("Threads:", 0) == 0) u.threads = std::stoi(line.substr(8));
  }
  if (DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (dirent* e = readdir(d)) u.fds += e->d_name[0] != '.';
    closedir(d);
  }
  return u;
}

void CopySmaps(pid_t pid, const std::string& dir, const std::string& name) {
  if (dir.empty()) return;
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  std::ofstream out(dir + "/" + name + ".smaps");
  out << in.rdbuf();
}

int Count(v1::JobService::Stub* stub, v1::Job::State state) {
  int n = 0;
  std::string token;
  do {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ListJobsRequest req;
    req.set_state(state);
    req.set_page_size(1000);
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    if (!stub->List(&ctx, req, &resp).ok()) return -1;
    n += resp.jobs_size();
    token = resp.next_page_token();
  } while (!token.empty());
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 10000, in_flight = 300, warmup = 500;
  std::string smaps_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--jobs") jobs = std::atoi(argv[i + 1]);
    if (a == "--in-flight") in_flight = std::atoi(argv[i + 1]);
    if (a == "--warmup") warmup = std::atoi(argv[i + 1]);
    if (a == "--smaps") smaps_dir = argv[i + 1];
  }
  TestCa ca;
  TestFederation fed(&ca);
  const std::vector<std::string> sites = {"site-a", "site-b", "site-c"};
  fed.AddMesh(sites, 64);
  fed.StartAll();
  if (!Eventually([&] { return fed.Converged(sites); }, 30000)) {
    std::fprintf(stderr, "federation did not converge\n");
    return 1;
  }
  auto stub = v1::JobService::NewStub(TlsChannel(fed.endpoint("site-a"), ca.User("vision", "s")));
  // The bench's own connection to site-a (TLS session, HTTP/2 transport) is
  // set up before the start is measured, so it does not count as growth.
  if (Count(stub.get(), v1::Job::PENDING) != 0) {
    std::fprintf(stderr, "cannot list jobs on site-a, or the store is not empty\n");
    return 1;
  }
  std::map<std::string, Usage> start, warm, end;
  for (const auto& s : sites) {
    start[s] = Measure(fed.pid(s));
    CopySmaps(fed.pid(s), smaps_dir, s + "-start");
  }
  auto sqlite_mib = [&] {
    return Metric(fed.ops_port("site-a"), "fedgate_sqlite_memory_bytes") / (1024.0 * 1024.0);
  };
  const double sqlite0 = sqlite_mib();
  // Live heap against heap held free: tells state growth from fragmentation.
  struct Heap {
    double in_use_mib = 0, free_mib = 0;
  };
  auto heap = [&] {
    const int port = fed.ops_port("site-a");
    constexpr double kMib = 1024.0 * 1024.0;
    return Heap{Metric(port, "fedgate_heap_bytes{kind=\"in_use\"}") / kMib,
                Metric(port, "fedgate_heap_bytes{kind=\"free\"}") / kMib};
  };
  const Heap heap0 = heap();
  Heap heap_warm;

  const auto t0 = std::chrono::steady_clock::now();
  double warm_s = 0;
  int submitted = 0, failed_submits = 0, done = 0;
  while (done < jobs) {
    const int active = Count(stub.get(), v1::Job::PENDING) + Count(stub.get(), v1::Job::RESERVING) +
                       Count(stub.get(), v1::Job::RUNNING);
    done = submitted - active;
    for (int i = 0; i < in_flight - active && submitted < jobs; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::SubmitJobRequest req;
      req.mutable_spec()->set_name("soak");
      req.mutable_spec()->set_gpus(1);
      req.mutable_spec()->add_command("true");
      v1::SubmitJobResponse resp;
      if (stub->Submit(&ctx, req, &resp).ok()) {
        ++submitted;
      } else {
        ++failed_submits;
      }
    }
    if (warm.empty() && done >= warmup) {
      for (const auto& s : sites) {
        warm[s] = Measure(fed.pid(s));
        CopySmaps(fed.pid(s), smaps_dir, s + "-warm");
      }
      heap_warm = heap();
      warm_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    std::fprintf(stderr, "\r%d/%d done, %d in flight   ", done, jobs, active);
    if (failed_submits > 100) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\nsettling 5 s\n");
  std::this_thread::sleep_for(std::chrono::seconds(5));
  for (const auto& s : sites) {
    end[s] = Measure(fed.pid(s));
    CopySmaps(fed.pid(s), smaps_dir, s + "-end");
  }
  const double sqlite1 = sqlite_mib();
  const Heap heap1 = heap();
  const int succeeded = Count(stub.get(), v1::Job::SUCCEEDED);

  std::printf("# soak: %d jobs (true, 1 GPU) through 3 sites coordinated by site-a, %d in flight\n",
              jobs, in_flight);
  std::printf("# %d succeeded in %.1f s: %.1f jobs/s (warm-up of %d jobs took %.1f s)\n",
              succeeded, run_s, jobs / run_s, warmup, warm_s);
  std::printf("%-8s %10s %10s %10s %8s %6s %6s %6s %8s %9s\n", "site", "rss0_MiB", "rss_warm",
              "rss_end", "growth", "fds0", "fds_w", "fds_e", "fd_diff", "threads");
  bool ok = succeeded == jobs && failed_submits == 0;
  for (const auto& s : sites) {
    const double growth = (end[s].rss_mib - start[s].rss_mib) / start[s].rss_mib;
    const int fd_diff = end[s].fds - start[s].fds;
    std::printf("%-8s %10.1f %10.1f %10.1f %7.1f%% %6d %6d %6d %8d %4d->%-4d\n", s.c_str(),
                start[s].rss_mib, warm[s].rss_mib, end[s].rss_mib, growth * 100, start[s].fds,
                warm[s].fds, end[s].fds, fd_diff, start[s].threads, end[s].threads);
    ok = ok && growth < 0.10 && std::abs(fd_diff) <= 5;
  }
  std::printf("# RSS growth after the warm-up: ");
  for (const auto& s : sites) {
    std::printf("%s %+.1f%%  ", s.c_str(),
                (end[s].rss_mib - warm[s].rss_mib) / warm[s].rss_mib * 100);
  }
  std::printf("\n# RSS split, start -> warm -> end (MiB): ");
  for (const auto& s : sites) {
    std::printf("%s anon %.1f->%.1f->%.1f file %.1f->%.1f->%.1f  ", s.c_str(), start[s].anon_mib,
                warm[s].anon_mib, end[s].anon_mib, start[s].file_mib, warm[s].file_mib,
                end[s].file_mib);
  }
  std::printf("\n# site-a's SQLite heap (page caches): %.1f MiB at the start, %.1f MiB at the end\n",
              sqlite0, sqlite1);
  std::printf("# site-a's malloc heap, start -> warm -> end (MiB): in use %.1f->%.1f->%.1f, "
              "held free %.1f->%.1f->%.1f\n",
              heap0.in_use_mib, heap_warm.in_use_mib, heap1.in_use_mib, heap0.free_mib,
              heap_warm.free_mib, heap1.free_mib);
  std::printf("# target: RSS growth < 10%% and fds within 5 of the start: %s\n",
              ok ? "OK" : "FAILED");
  for (const auto& s : sites) fed.Stop(s, 30000);
  return ok ? 0 : 1;
}
