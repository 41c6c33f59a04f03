// The proxy behind /v1/services/<name>/<path> on the REST port: picks the
// ready replica with the fewest requests in flight (ties: this site's, then
// the best measured link; replica_pick.h), relays the request and streams
// the answer back (docs/services.md).
// A replica on this site is called straight; one on another site through
// that site's gateway (ReplicaHop), which relays it on to the replica.
// A replica that refuses or resets is taken out of rotation at once and the
// request tried once more elsewhere when that is safe: always when it never
// reached the replica, else when the service is idempotent and the body was
// small enough to keep (<= 1 MiB with a Content-Length). Larger or chunked
// bodies stream through without a copy.
// A service this gateway does not coordinate is relayed, streamed the same
// way, to the gateway that does (its ad names it): over mTLS with this
// gateway's certificate to the coordinator's REST port, naming the tenant in
// Fedgate-Tenant, which the coordinator accepts from approved peers only.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

namespace fedgate::gateway {

class GatewayCore;
class Metrics;
class ReplicaHop;
class ServiceController;
struct Config;

class ServiceProxy {
 public:
  using Downstream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;
  using Head = boost::beast::http::request_parser<boost::beast::http::empty_body>;
  // Cuts a socket (shutdown) at a deadline, and stops watching it.
  using Arm = std::function<void(int fd, std::chrono::milliseconds in)>;
  using Disarm = std::function<void(int fd)>;

  static constexpr size_t kReplayBytes = 1 << 20;

  // The header that names the tenant of a relayed request.
  static constexpr const char* kTenantHeader = "Fedgate-Tenant";
  // Longest a relayed request may take at the coordinator (its own
  // request_timeout applies there).
  static constexpr std::chrono::seconds kRelayTimeout{300};

  // `core` may be null: then nothing is relayed to other gateways.
  ServiceProxy(ServiceController* services, GatewayCore* core, Metrics* metrics,
               const Config& config, Arm arm, Disarm disarm);
  ~ServiceProxy();

  // Where a replica of this site listens, for the gateway `from` that
  // coordinates it relaying a request of `tenant` (the participant's
  // ServiceReplica). Unset: this gateway relays no other's requests on.
  using LocalReplicas = std::function<absl::StatusOr<std::pair<std::string, uint32_t>>(
      const std::string& from, const std::string& tenant, const std::string& job_id)>;
  void SetLocalReplicas(LocalReplicas fn) { local_ = std::move(fn); }

  // Serves one request whose header `head` was read from `down` (its body
  // not yet); `tenant` is the caller's. `relayed`: it came from another
  // gateway, `relaying_site` (never relayed to a coordinator again; one
  // naming a replica of this site goes to that replica). Returns whether
  // the client connection may serve another request.
  bool Serve(Downstream& down, boost::beast::flat_buffer& buf, Head&& head,
             const std::string& tenant, const std::string& client_ip, bool relayed,
             const std::string& relaying_site = "");

  // Answers a request refused before the proxy (listen.serve's token
  // checks) with `status` and a JSON error, counted like the proxy's own;
  // `challenge` adds WWW-Authenticate: Bearer. Returns false (close).
  bool Refuse(Downstream& down, boost::beast::flat_buffer& buf, const std::string& service,
              int status, const std::string& message, bool challenge);

  struct Call;  // one request's state (service_proxy.cc)

 private:
  struct Link;  // an open way to one replica
  bool Fail(Call& call, int status, const std::string& message, int retry_after_s = 0,
            bool challenge = false);
  // To the replicas this gateway routes to.
  bool ToReplica(Call& call, Head&& head, const struct ServiceRoute& route, const std::string& path,
                 const std::string& client_ip);
  // A connection to replica `r`, straight or through its site's gateway,
  // its deadline armed: false (with why) when none opens.
  // `reuse`: an idle pooled connection to its site's gateway will do.
  bool Open(const struct Replica& r, std::chrono::milliseconds timeout, bool reuse, Link* link,
            std::string* why);
  // A hop's connection back to the pool once its answer ended whole.
  void KeepLink(const Replica& r, Link& link, bool left_open, const Call& call, bool done);
  // service_proxy_hops.cc: streams the request whose header `p` holds to
  // `up`, then its answer back; `to` names the other end in errors.
  template <class Up, class Parser>
  bool Exchange(Call& call, Up& up, Parser& p, const std::string& to, bool keep);
  // service_proxy_hops.cc: to the gateway that coordinates the service.
  bool ToCoordinator(Call& call, Head&& head, const std::string& tenant, const std::string& client_ip,
                     const std::string& site);
  // service_proxy_hops.cc: from the coordinator of replica `job_id` of
  // this site, on to the replica.
  bool ToLocalReplica(Call& call, Head&& head, const std::string& from, const std::string& tenant,
                      const std::string& job_id, const std::string& path, const std::string& client_ip);

  ServiceController* services_;
  GatewayCore* core_;
  Metrics* metrics_;
  std::string site_;
  std::string federation_;
  Arm arm_;
  Disarm disarm_;
  std::unique_ptr<ReplicaHop> hop_;  // to other gateways; unusable without core or TLS files
  LocalReplicas local_;
  // Measured link speed (Gbit/s) between this site and others, for ties:
  // read from the core at most every kLinksFor.
  std::map<std::string, double> LinkGbps();
  static constexpr std::chrono::seconds kLinksFor{5};
  std::mutex links_mu_;
  std::map<std::string, double> gbps_;
  std::chrono::steady_clock::time_point links_at_;
};

}  // namespace fedgate::gateway
