// Approved peer sites and their liveness by heartbeat. Pure logic with an
// injected clock; the gateway serialises access.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "federation/clock.h"

namespace fedgate::federation {

enum class PeerState { kConnecting, kUp, kDown };
std::string_view PeerStateName(PeerState s);

struct PeerInfo {
  std::string site;
  std::string endpoint;
  std::string source;  // "config" or "admin"
  int64_t last_heard_ms = -1;
  double rtt_ms = 0;
  std::string last_error;
};

class PeerRegistry {
 public:
  // A peer not heard from for `down_after_ms` is down.
  PeerRegistry(std::string self_site, const Clock* clock, int64_t down_after_ms);

  // Approves a peer. Re-adding an existing site updates its endpoint; a site
  // approved by the config keeps source "config".
  absl::Status Add(std::string_view site, std::string_view endpoint, std::string_view source);
  // The checks Add makes, without changing anything.
  absl::Status Validate(std::string_view site, std::string_view endpoint) const;
  // Withdraws an admin approval; config peers are refused with
  // FAILED_PRECONDITION, unknown ones with NOT_FOUND.
  absl::Status Remove(std::string_view site);

  bool IsApproved(std::string_view site) const;
  // Any authenticated message from the peer, or a successful push to it.
  void Heard(std::string_view site);
  void RecordPush(std::string_view site, double rtt_ms);
  void RecordError(std::string_view site, std::string_view error);

  PeerState StateOf(std::string_view site) const;
  std::vector<PeerInfo> List() const;
  int CountUp() const;

 private:
  std::string self_;
  const Clock* clock_;
  int64_t down_after_ms_;
  std::map<std::string, PeerInfo, std::less<>> peers_;
};

// Checks HOST:PORT (host name, IPv4, or [IPv6]; port 1..65535; port 0 only if
// allow_zero_port).
absl::Status ValidateEndpoint(std::string_view endpoint, bool allow_zero_port = false);

}  // namespace fedgate::federation
