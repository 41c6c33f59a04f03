// fedgate --config FILE: the gateway daemon of one site.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <absl/synchronization/mutex.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gateway/config/config.h"
#include "gateway/peering/core.h"
#include "gateway/app/gateway.h"

namespace {

// Set in the environment of the gateway's second exec, so that it knows the
// tunables below are its own and takes them out of what its children inherit.
constexpr char kTunedMark[] = "FEDGATE_MALLOC_TUNED";
constexpr char kTunables[] = "glibc.malloc.tcache_count=1";

// Malloc for a long-lived server with ~26 threads; bench/soak_bench's site-a
// RSS growth over 10 000 jobs:
// - one arena unless MALLOC_ARENA_MAX is set: with glibc's default (8 per
//   core) each arena kept its own free space (growth 13.8 % -> 9.4 %);
// - one cached chunk per size and thread instead of 7 unless GLIBC_TUNABLES
//   is set: the caches of threads idle after a burst held ~0.5 MiB. glibc
//   reads that only from GLIBC_TUNABLES at exec, hence one re-exec of the
//   same binary (same pid); the variables are gone again for children.
// Returns what was set up, for the start-up log.
std::string TuneMalloc(char** argv) {
  std::string tcache = "glibc's default per-thread cache (GLIBC_TUNABLES is set)";
  if (std::getenv(kTunedMark) != nullptr) {
    unsetenv("GLIBC_TUNABLES");
    unsetenv(kTunedMark);
    tcache = "one cached chunk per size and thread";
  } else if (std::getenv("GLIBC_TUNABLES") == nullptr) {
    setenv("GLIBC_TUNABLES", kTunables, 1);
    setenv(kTunedMark, "1", 1);
    execv("/proc/self/exe", argv);
    // No /proc: run with glibc's default cache rather than not at all.
    unsetenv("GLIBC_TUNABLES");
    unsetenv(kTunedMark);
    tcache = "glibc's default per-thread cache (cannot re-exec through /proc/self/exe)";
  }
  // Before any thread starts.
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr) return "MALLOC_ARENA_MAX arenas, " + tcache;
  mallopt(M_ARENA_MAX, 1);
  return "one arena, " + tcache;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string malloc_setup = TuneMalloc(argv);
  // Debian's Abseil is built with its mutex deadlock detector on (Abseil
  // leaves it off under NDEBUG): it records the lock order of gRPC's locks
  // in mmapped blocks, 320 KiB more after a 10 000-job soak. Debug builds
  // of fedgate keep it.
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  CLI::App app{"fedgate: the federation gateway of one GPU site"};
  std::string config_path;
  app.add_option("--config,-c", config_path, "YAML config file")->required();
  app.set_version_flag("--version", fedgate::gateway::kVersion);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  auto config = fedgate::gateway::LoadConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "fedgate: config error: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  auto logger = spdlog::stderr_color_mt("fedgate");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [" + config->site + "] %v");
  spdlog::set_default_logger(logger);
  spdlog::info("malloc: {}", malloc_setup);

  // Block the stop signals in every thread; main waits for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  fedgate::gateway::Gateway gateway(*config);
  if (auto st = gateway.Start(); !st.ok()) {
    spdlog::error("cannot start: {}", std::string(st.message()));
    gateway.Stop();
    return 1;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("received {}, draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  gateway.Stop();
  return 0;
}
