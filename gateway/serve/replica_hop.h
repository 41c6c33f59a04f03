// The way to a replica on another site: through that site's gateway, over
// mTLS with this gateway's certificate (docs/services.md). The request keeps
// its /v1/services/<name>/<path> target and names the replica job in
// Fedgate-Replica and its tenant in Fedgate-Tenant; the replica's gateway
// checks that the caller coordinates that replica and relays it on. Readiness
// probes take the same way, so a replica is probed by its own site's
// gateway; an answer with Fedgate-Unreached says the replica was not reached.
// Connections to a site's gateway are kept open between requests (HTTP/1.1
// keep-alive): a small pool of idle ones per site.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct ssl_st;

namespace fedgate::gateway {

class GatewayCore;
struct Config;
struct Replica;

class ReplicaHop {
 public:
  using Tls = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;
  static constexpr const char* kReplicaHeader = "Fedgate-Replica";
  static constexpr const char* kUnreachedHeader = "Fedgate-Unreached";

  // `core` null, or TLS files that do not load: unusable (never hops).
  ReplicaHop(GatewayCore* core, const Config& config);
  ~ReplicaHop();
  bool usable() const { return ctx_ != nullptr; }
  boost::asio::ssl::context& ctx() { return *ctx_; }
  // What this hop's streams are made on (sync operations only: never run).
  boost::asio::io_context& io() { return io_; }

  static constexpr size_t kMaxIdlePerSite = 32;
  // Well under the other gateway's api.read_timeout (10 s by default),
  // after which it closes an idle connection.
  static constexpr std::chrono::seconds kIdleFor{4};
  // An idle connection to `site`'s gateway from an earlier request, still
  // open (nothing to read on it); null when none.
  std::unique_ptr<Tls> TakeIdle(const std::string& site);
  // A connection whose last answer ended whole and that the other gateway
  // left open, kept for the next request to `site`.
  void Keep(const std::string& site, std::unique_ptr<Tls> s);

  // A TCP connection to `site`'s gateway's REST endpoint within
  // timeout_ms (its address from that site's ad): the fd, or UNAVAILABLE.
  absl::StatusOr<int> Connect(const std::string& site, int timeout_ms);
  // After the handshake: the other end is `site`'s gateway in this
  // federation, else FAILED_PRECONDITION.
  absl::Status CheckPeer(ssl_st* ssl, const std::string& site) const;

  // GET `path` of replica `r` through its site's
  // gateway within timeout_ms: OK on a 2xx answer.
  absl::Status Probe(const Replica& r, const std::string& path, int64_t timeout_ms);

 private:
  GatewayCore* core_;
  std::string federation_;
  std::unique_ptr<boost::asio::ssl::context> ctx_;
  boost::asio::io_context io_;  // before the pool: outlives its streams
  std::mutex mu_;
  std::map<std::string, std::deque<std::pair<std::chrono::steady_clock::time_point, std::unique_ptr<Tls>>>>
      idle_;  // by site, oldest first
};

}  // namespace fedgate::gateway
