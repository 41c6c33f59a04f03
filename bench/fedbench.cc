// fedbench: the bandwidth benchmark, usable on its own between any two hosts.
//   fedbench server --listen ADDR [--token T]
//   fedbench run --target ADDR --transport tcp|rdma|nccl --streams N --sizes MIN:MAX
//                --duration SECONDS [--expect-gbps X] -o table|json
#include <google/protobuf/util/json_util.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>

#include "absl/strings/str_format.h"
#include "transport/bandwidth.h"
#include "transport/engine.h"
#include "transport/transport.h"

namespace {

using fedgate::transport::FormatSize;

std::string Table(const fedgate::v1::BenchReport& r, const fedgate::transport::RunOptions& o) {
  std::string out;
  out += absl::StrFormat("# fedbench %s -> %s, %u stream(s), %u ms warm-up + %u ms per size\n",
                         r.transport(), r.target(), r.streams(), o.warmup_ms, o.duration_ms);
  out += "# bandwidth = payload bytes counted at the receiver / receiver's window\n#\n";
  out += absl::StrFormat("# %10s %14s %9s %11s %9s %9s %9s\n", "size", "payload", "time",
                         "bandwidth", "lat_min", "lat_p50", "lat_p99");
  out += absl::StrFormat("# %10s %14s %9s %11s %9s %9s %9s\n", "(B)", "(B)", "(s)", "(Gbit/s)",
                         "(us)", "(us)", "(us)");
  for (const auto& row : r.results()) {
    auto lat = [&](double v) { return v > 0 ? absl::StrFormat("%9.1f", v) : std::string("        -"); };
    out += absl::StrFormat("  %10s %14.0f %9.3f %11.4f %s %s %s\n", FormatSize(row.size_bytes()),
                           row.payload_bytes(), row.seconds(), row.gbps(),
                           lat(row.latency_us_min()), lat(row.latency_us_p50()),
                           lat(row.latency_us_p99()));
  }
  out += absl::StrFormat("# Summary: %.4f Gbit/s at the largest size\n", r.gbps());
  return out;
}

std::atomic<bool> g_stop{false};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedbench: payload bandwidth and latency between two hosts (tcp, rdma, nccl)"};
  app.require_subcommand(1);
  app.fallthrough();

  std::string listen = "0.0.0.0:5201", token, token_file;
  int max_sessions = 0;
  auto* server = app.add_subcommand("server", "serve clients one after another until SIGTERM");
  server->add_option("--listen", listen, "HOST:PORT to listen on")->capture_default_str();
  server->add_option("--token", token, "require this token from clients");
  server->add_option("--token-file", token_file, "read the token from a file");
  server->add_option("--sessions", max_sessions, "exit after this many clients (0 = never)");

  fedgate::transport::RunOptions opt;
  std::string sizes = "1M", output = "table";
  double duration_s = 3, warmup_s = 0.5, expect_gbps = -1;
  auto* run = app.add_subcommand("run", "measure against a fedbench server");
  run->add_option("--target", opt.target, "server HOST:PORT")->required();
  run->add_option("--transport", opt.transport, "tcp, rdma or nccl")->capture_default_str();
  run->add_option("--streams", opt.streams, "parallel streams")->capture_default_str();
  run->add_option("--sizes", sizes, "message size or MIN:MAX sweep (4K:64M)")->capture_default_str();
  run->add_option("--duration", duration_s, "timed seconds per size")->capture_default_str();
  run->add_option("--warmup", warmup_s, "warm-up seconds per size")->capture_default_str();
  run->add_option("--latency-iterations", opt.latency_iterations,
                  "ping-pongs for sizes up to 64K")->capture_default_str();
  run->add_option("--token", opt.token, "token the server asks for");
  run->add_option("--expect-gbps", expect_gbps, "print OK/FAILED against this Gbit/s");
  run->add_option("-o,--output", output, "table or json")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "fedbench: %s (see --help)\n", e.what());
    return 2;
  }

  if (server->parsed()) {
    if (!token_file.empty()) {
      FILE* f = std::fopen(token_file.c_str(), "r");
      if (f == nullptr) {
        std::fprintf(stderr, "fedbench: cannot read %s\n", token_file.c_str());
        return 2;
      }
      char buf[256] = {0};
      size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
      std::fclose(f);
      token.assign(buf, n);
      while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    }
    fedgate::transport::ServeOptions so;
    so.token = token;
    so.max_sessions = max_sessions;
    so.log = [](const std::string& line) { std::fprintf(stderr, "fedbench: %s\n", line.c_str()); };
    auto srv = fedgate::transport::BenchServer::Listen(listen, so);
    if (!srv.ok()) {
      std::fprintf(stderr, "fedbench: %s\n", std::string(srv.status().message()).c_str());
      return 2;
    }
    std::string transports;
    for (const auto& t : fedgate::transport::AvailableTransports()) {
      transports += (transports.empty() ? "" : ", ") + t;
    }
    std::fprintf(stderr, "fedbench: serving on port %d (transports: %s); %s\n", (*srv)->port(),
                 transports.c_str(),
                 token.empty() ? "open server: any client may connect, like iperf3"
                               : "clients must present the token");
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread waiter([&] {
      int sig;
      sigwait(&set, &sig);
      g_stop = true;
      (*srv)->Stop();
    });
    waiter.detach();
    (*srv)->Serve();
    return 0;
  }

  if (output != "table" && output != "json") {
    std::fprintf(stderr, "fedbench: unknown output \"%s\" (want table or json)\n", output.c_str());
    return 2;
  }
  auto sweep = fedgate::transport::ParseSizeSweep(sizes);
  if (!sweep.ok()) {
    std::fprintf(stderr, "fedbench: --sizes: %s\n", std::string(sweep.status().message()).c_str());
    return 2;
  }
  if (duration_s < 0 || warmup_s < 0 || duration_s > 3600) {
    std::fprintf(stderr, "fedbench: --duration and --warmup must be 0..3600 seconds\n");
    return 2;
  }
  opt.sizes = *sweep;
  opt.duration_ms = static_cast<uint32_t>(std::lround(duration_s * 1000));
  opt.warmup_ms = static_cast<uint32_t>(std::lround(warmup_s * 1000));
  const double planned_s = static_cast<double>(opt.sizes.size()) * (duration_s + warmup_s);
  if (planned_s > 3) {
    opt.progress = [](const std::string& line) {
      std::fprintf(stderr, "fedbench: %s\n", line.c_str());
    };
  }
  // A transport this host cannot run is a usage problem, not a failed run.
  if (auto probe = fedgate::transport::MakeClientTransport(opt.transport, opt.streams);
      !probe.ok()) {
    std::fprintf(stderr, "fedbench: %s\n", std::string(probe.status().message()).c_str());
    return 2;
  }
  auto report = fedgate::transport::RunBenchmark(opt);
  if (!report.ok()) {
    std::fprintf(stderr, "fedbench: %s\n", std::string(report.status().message()).c_str());
    return 1;
  }
  const bool judged = expect_gbps >= 0;
  const bool ok = !judged || report->gbps() >= expect_gbps;
  if (output == "json") {
    google::protobuf::util::JsonPrintOptions jo;
    jo.preserve_proto_field_names = true;
    jo.always_print_primitive_fields = true;
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(*report, &json, jo);
    std::printf("%s\n", json.c_str());
  } else {
    std::fputs(Table(*report, opt).c_str(), stdout);
    if (judged) {
      std::printf("# %s: %.4f Gbit/s %s %.4f expected\n", ok ? "OK" : "FAILED", report->gbps(),
                  ok ? ">=" : "<", expect_gbps);
    }
  }
  return ok ? 0 : 1;
}
