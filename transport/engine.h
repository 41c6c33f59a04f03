// The benchmark engine: drives a session of rounds (one per message size) over
// any transport, on the client (sender) and the server (receiver, which times
// the window and counts what arrived).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "fedgate/v1/bench.pb.h"

namespace fedgate::transport {

struct RunOptions {
  std::string target;  // HOST:PORT of the server's control listener
  std::string transport = "tcp";
  uint32_t streams = 1;
  std::vector<uint64_t> sizes = {1 << 20};
  uint32_t warmup_ms = 500;
  uint32_t duration_ms = 3000;  // per size; 0 measures latency only
  // Ping-pong iterations for sizes up to kLatencyMaxSize.
  uint32_t latency_iterations = 100;
  std::string token;
  // When non-zero, a first round of this size measures latency only (no
  // bandwidth window); it is reported as the first row, with 0 Gbit/s.
  uint64_t latency_only_size = 0;
  // Called after each size with a human line (for progress on stderr).
  std::function<void(const std::string&)> progress;
};

inline constexpr uint64_t kLatencyMaxSize = 64 * 1024;
// The largest message a server accepts to receive: a client cannot make a
// server (fedbench, or the gateway's bench listener) allocate more.
inline constexpr uint64_t kMaxMessageSize = 256ull << 20;
// Ping-pong rounds echo whole messages: at most this many per round.
inline constexpr uint32_t kMaxLatencyIterations = 100000;

absl::StatusOr<v1::BenchReport> RunBenchmark(const RunOptions& options);

// What a bench server accepts of a client's round: a size within
// kMaxMessageSize (kLatencyMaxSize for ping-pong) and a bounded iteration count.
absl::Status CheckRound(const v1::BenchRound& round);

struct ServeOptions {
  // When set, a client must present it (one-time tokens from a gateway).
  std::string token;
  // Stop after this many sessions (0 = serve until Stop()).
  int max_sessions = 0;
  // Stop if no client connected within this long (0 = wait forever).
  int idle_timeout_ms = 0;
  std::function<void(const std::string&)> log;
};

class BenchServer {
 public:
  // Listens on HOST:PORT (port 0 picks one).
  static absl::StatusOr<std::unique_ptr<BenchServer>> Listen(const std::string& address,
                                                             ServeOptions options);
  ~BenchServer();
  int port() const { return port_; }
  // Serves sessions one after another until Stop(), max_sessions or idle timeout.
  void Serve();
  // Serve() on a thread.
  void ServeInBackground();
  void Stop();
  // True once Serve() returned (max_sessions reached, idle, or stopped).
  bool done() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace fedgate::transport
