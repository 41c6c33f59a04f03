// Durable job submits over mTLS from 32 concurrent clients against a real
// fedgate process, then the same run against a no-store baseline
// (FEDGATE_BENCH_NO_STORE=1) for the ratio. Also prints the store's PRAGMAs,
// its group-commit batches and a raw fsync baseline of the same disk.
//   submit_bench [--clients 32] [--seconds 5]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "fedgate/v1/jobs.grpc.pb.h"
#include "gateway/security/certs.h"
#include "gateway/security/tls.h"
#include "tests/support/harness.h"

extern char** environ;

namespace {

using namespace fedgate;
using Clock = std::chrono::steady_clock;

struct Result {
  double jobs_per_s = 0, p50_ms = 0, p99_ms = 0;
  uint64_t ok = 0, failed = 0;
  std::string first_error;  // of the failed calls, for the report
};

pid_t StartGateway(const std::string& config, const std::string& log, bool no_store) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  if (no_store) env.emplace_back("FEDGATE_BENCH_NO_STORE=1");
  std::vector<char*> cenv, argv;
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  std::string bin = testing::FedgateBin(), flag = "--config", cfg = config;
  argv = {bin.data(), flag.data(), cfg.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

std::string Scrape(int port, const std::string& name) {
  std::string cmd = "curl -s http://127.0.0.1:" + std::to_string(port) + "/metrics | grep '^" +
                    name + " '";
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[256] = {0};
  std::string out = p && std::fgets(buf, sizeof(buf), p) ? buf : "";
  if (p) ::pclose(p);
  return out.empty() ? "?" : out.substr(name.size() + 1, out.size() - name.size() - 2);
}

Result Run(const std::string& endpoint, int ops_port, const gateway::KeyAndCert& user,
           const std::string& ca, int clients, int seconds) {
  // Clients start once the gateway is ready (/readyz: every listener up),
  // so start-up is not timed. The ops port answers earlier than gRPC does:
  // waiting for a metric instead let calls race the gRPC listener and fail.
  for (int i = 0; i < 400; ++i) {
    int status = 0;
    (void)testing::HttpGet(ops_port, "/readyz", &status);
    if (status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  std::mutex mu;
  std::vector<double> lat_ms;
  std::atomic<uint64_t> ok{0}, failed{0};
  std::string first_error;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      // A channel of its own per client thread.
      auto ch = gateway::DialGateway(endpoint,
                                     gateway::MakeStaticProvider(ca, user.cert_pem, user.key_pem),
                                     [](const gateway::Identity&) { return absl::OkStatus(); });
      auto stub = v1::JobService::NewStub(ch);
      std::vector<double> mine;
      int n = 0;
      while (Clock::now() < end) {
        v1::SubmitJobRequest req;
        req.mutable_spec()->set_name("bench");
        req.mutable_spec()->set_gpus(1);
        req.mutable_spec()->add_command("true");
        req.set_idempotency_key("c" + std::to_string(c) + "-" + std::to_string(n++));
        v1::SubmitJobResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        const auto t0 = Clock::now();
        auto st = stub->Submit(&ctx, req, &resp);
        // Latency of successful calls only: a fast failure is not a fast submit.
        if (st.ok()) {
          mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
        (st.ok() ? ok : failed)++;
        if (!st.ok()) {
          std::lock_guard lock(mu);
          if (first_error.empty()) {
            first_error = std::to_string(st.error_code()) + ": " + st.error_message();
          }
        }
      }
      std::lock_guard lock(mu);
      lat_ms.insert(lat_ms.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  std::sort(lat_ms.begin(), lat_ms.end());
  Result r;
  r.ok = ok;
  r.failed = failed;
  r.first_error = first_error;
  r.jobs_per_s = static_cast<double>(ok) / seconds;
  if (!lat_ms.empty()) {
    r.p50_ms = lat_ms[lat_ms.size() / 2];
    r.p99_ms = lat_ms[std::min(lat_ms.size() - 1, lat_ms.size() * 99 / 100)];
  }
  return r;
}

double FsyncsPerSecond(const std::string& dir) {
  const std::string path = dir + "/fsync-probe";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  char buf[4096] = {0};
  int n = 0;
  const auto end = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < end) {
    (void)::pwrite(fd, buf, sizeof(buf), 0);
    ::fdatasync(fd);
    ++n;
  }
  ::close(fd);
  ::unlink(path.c_str());
  return n;
}


}  // namespace

int main(int argc, char** argv) {
  int clients = 32, seconds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--clients") clients = std::atoi(argv[i + 1]);
    if (a == "--seconds") seconds = std::atoi(argv[i + 1]);
  }
  char tmpl[] = "/tmp/fedgate-submit-bench.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  gateway::CertSpec ca_spec;
  ca_spec.common_name = "bench CA";
  ca_spec.organization = "aidc";
  ca_spec.is_ca = true;
  auto ca = *gateway::MakeCertificate(ca_spec, nullptr);
  gateway::CertSpec gw;
  gw.common_name = "gw";
  gw.uris = {"spiffe://aidc/site/cn-beijing/gateway"};
  auto gw_kc = *gateway::MakeCertificate(gw, &ca);
  gateway::CertSpec usr;
  usr.common_name = "user";
  usr.uris = {"spiffe://aidc/tenant/vision/user/bench"};
  auto user = *gateway::MakeCertificate(usr, &ca);
  (void)gateway::WriteFileAtomic(dir + "/ca.pem", ca.cert_pem, 0644);
  (void)gateway::WriteFileAtomic(dir + "/cert.pem", gw_kc.cert_pem, 0644);
  (void)gateway::WriteFileAtomic(dir + "/key.pem", gw_kc.key_pem, 0600);
  // The ranks' folders: somewhere the rank user may enter, not `dir` (0700).
  const std::string work =
      "/var/tmp/fedgate-test-work/" + std::filesystem::path(dir).filename().string();
  const int grpc_port = testing::FreePort(), ops_port = testing::FreePort();
  const std::string endpoint = "127.0.0.1:" + std::to_string(grpc_port);
  std::ofstream(dir + "/fedgate.yaml")
      << "site: cn-beijing\nfederation: aidc\nlisten: {grpc: " << endpoint
      << ", ops: 127.0.0.1:" << ops_port << ", http: 127.0.0.1:" << testing::FreePort() << "}\n"
      << "tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\ndata_dir: data\n"
      << "inventory:\n  nodes:\n    - {name: n1, address: 127.0.0.1, gpu_model: H100, gpus: 8}\n"
      << "executor: {work_dir: " << work << "}\n";

  std::printf("# durable submits over mTLS: %d clients, %d s each run, 2 cores\n", clients, seconds);
  std::printf("# store: SQLite WAL, synchronous=FULL, one writer thread, group commit\n");
  std::printf("# raw fdatasync baseline of this disk: %.0f fsyncs/s\n", FsyncsPerSecond(dir));

  pid_t pid = StartGateway(dir + "/fedgate.yaml", dir + "/durable.log", false);
  Result durable = Run(endpoint, ops_port, user, ca.cert_pem, clients, seconds);
  const std::string commits = Scrape(ops_port, "fedgate_job_store_commits_total");
  const std::string batch = Scrape(ops_port, "fedgate_job_store_largest_batch");
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);

  pid = StartGateway(dir + "/fedgate.yaml", dir + "/nostore.log", true);
  Result base = Run(endpoint, ops_port, user, ca.cert_pem, clients, seconds);
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  // Ranks outlive their gateway's SIGTERM: the last jobs' slices are ended here.
  testing::EndSliceCgroups("cn-beijing", dir + "/data");

  std::printf("%-10s %10s %9s %9s %8s\n", "run", "jobs/s", "p50 ms", "p99 ms", "failed");
  std::printf("%-10s %10.0f %9.2f %9.2f %8lu\n", "durable", durable.jobs_per_s, durable.p50_ms,
              durable.p99_ms, static_cast<unsigned long>(durable.failed));
  std::printf("%-10s %10.0f %9.2f %9.2f %8lu\n", "no-store", base.jobs_per_s, base.p50_ms,
              base.p99_ms, static_cast<unsigned long>(base.failed));
  std::printf("# durable / no-store throughput: %.3f\n", durable.jobs_per_s / base.jobs_per_s);
  std::printf("# job store transactions: %s for %lu submits (largest batch %s)\n", commits.c_str(),
              static_cast<unsigned long>(durable.ok), batch.c_str());
  // A failed call is a failure of the benchmark, never a fast success.
  const bool no_failures = durable.failed == 0 && base.failed == 0;
  for (const Result* r : {&durable, &base}) {
    if (!r->first_error.empty()) std::printf("# first failure: %s\n", r->first_error.c_str());
  }
  std::printf("# failed calls: %lu durable, %lu no-store: %s\n",
              static_cast<unsigned long>(durable.failed), static_cast<unsigned long>(base.failed),
              no_failures ? "OK" : "FAILED");
  std::printf("# target: >= 5000 durable submits/s with p99 < 10 ms: %s\n",
              durable.jobs_per_s >= 5000 && durable.p99_ms < 10 ? "OK" : "FAILED");
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(work);
  return no_failures ? 0 : 1;
}
