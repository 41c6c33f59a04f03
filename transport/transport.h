// One interface per side for every data-plane transport (tcp, rdma, nccl).
// The engine drives a session: hello/welcome, then one round per message size.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fedgate/v1/bench.pb.h"

namespace fedgate::transport {

// The sending side (fedbench run / the probing gateway).
class ClientTransport {
 public:
  virtual ~ClientTransport() = default;
  // After the server's welcome; `server_host` is the host the control
  // connection reached.
  virtual absl::Status Setup(const v1::BenchWelcome& welcome, const std::string& server_host) = 0;
  // Details to send with each round (rdma: the client's queue pairs).
  virtual std::string RoundInfo() { return ""; }
  // Runs the latency ping-pong (if asked) and then sends payload until
  // `stop()` turns true. Returns round-trip samples in microseconds.
  virtual absl::StatusOr<std::vector<double>> Round(const v1::BenchRound& round,
                                                    const std::function<bool()>& stop) = 0;
};

// The receiving side, which measures (fedbench server / the probed gateway).
class ServerTransport {
 public:
  virtual ~ServerTransport() = default;
  // Accepts a session: opens whatever the transport needs, fills the welcome.
  virtual absl::Status Setup(const v1::BenchHello& hello, v1::BenchWelcome* welcome) = 0;
  // Receives one round; calls `report` once the timed window closed, then
  // drains until the client ends the round.
  virtual absl::Status Round(const v1::BenchRound& round,
                             const std::function<void(const v1::BenchRoundResult&)>& report) = 0;
};

// The transports this build has: "tcp" always, "rdma" and "nccl" when built.
std::vector<std::string> AvailableTransports();

// Nullptr plus an error that says why (unknown, not built, no device).
absl::StatusOr<std::unique_ptr<ClientTransport>> MakeClientTransport(const std::string& name,
                                                                     uint32_t streams);
absl::StatusOr<std::unique_ptr<ServerTransport>> MakeServerTransport(const std::string& name);

}  // namespace fedgate::transport
