// The proxy behind /v1/services/<name>/<path> on the REST port: picks the
// ready replica with the fewest requests in flight (this site's first on a
// tie), relays the request and streams the answer back (docs/services.md).
// A replica that refuses or resets is taken out of rotation at once and the
// request tried once more elsewhere when that is safe: always when it never
// reached the replica, else when the service is idempotent and the body was
// small enough to keep (<= 1 MiB with a Content-Length). Larger or chunked
// bodies stream through without a copy.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

namespace fedgate::gateway {

class Metrics;
class ServiceController;

class ServiceProxy {
 public:
  using Downstream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;
  using Head = boost::beast::http::request_parser<boost::beast::http::empty_body>;
  // Cuts a socket (shutdown) at a deadline, and stops watching it.
  using Arm = std::function<void(int fd, std::chrono::milliseconds in)>;
  using Disarm = std::function<void(int fd)>;

  static constexpr size_t kReplayBytes = 1 << 20;

  ServiceProxy(ServiceController* services, Metrics* metrics, std::string site, Arm arm,
               Disarm disarm);

  // Serves one request whose header `head` was read from `down` (its body
  // not yet); `tenant` is the caller's. Returns whether the client
  // connection may serve another request.
  bool Serve(Downstream& down, boost::beast::flat_buffer& buf, Head&& head,
             const std::string& tenant, const std::string& client_ip);

 private:
  struct Call;
  bool Fail(Call& call, int status, const std::string& message, int retry_after_s = 0);

  ServiceController* services_;
  Metrics* metrics_;
  std::string site_;
  Arm arm_;
  Disarm disarm_;
};

}  // namespace fedgate::gateway
