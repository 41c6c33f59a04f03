#include "gateway/ops/ops_server.h"
#include "base/host_port.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "base/str_cat.h"
#include "gateway/ops/metrics.h"

namespace fedgate::gateway {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

struct OpsServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  Metrics* metrics = nullptr;
  std::function<std::string()> not_ready;  // "" = ready, else why not
  std::thread thread;

  void Accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket sock) {
      if (ec) return;  // acceptor closed
      Serve(std::move(sock));
      Accept();
    });
  }

  // One request per connection; requests are tiny and local, so serving them
  // inline on the loop thread is enough. A read timeout guards the loop.
  void Serve(tcp::socket sock) {
    boost::system::error_code ec;
    struct timeval tv{2, 0};
    ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    boost::beast::flat_buffer buf;
    http::request<http::string_body> req;
    http::read(sock, buf, req, ec);
    if (ec) return;
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(false);
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res.result(http::status::method_not_allowed);
      res.body() = "only GET\n";
    } else if (path == "/healthz") {
      res.result(http::status::ok);
      res.body() = "ok\n";
    } else if (path == "/readyz") {
      const std::string why = not_ready ? not_ready() : "starting";
      res.result(why.empty() ? http::status::ok : http::status::service_unavailable);
      res.body() = why.empty() ? "ready\n" : "not ready: " + why + "\n";
    } else if (path == "/metrics") {
      res.result(http::status::ok);
      res.set(http::field::content_type, "text/plain; version=0.0.4");
      res.body() = metrics->Render();
    } else {
      res.result(http::status::not_found);
      res.body() = "not found: try /healthz, /readyz, /metrics\n";
    }
    res.prepare_payload();
    http::write(sock, res, ec);
    sock.shutdown(tcp::socket::shutdown_both, ec);
  }
};

OpsServer::OpsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<OpsServer>> OpsServer::Start(const std::string& endpoint,
                                                           Metrics* metrics,
                                                           std::function<std::string()> not_ready) {
  auto impl = std::make_unique<Impl>();
  impl->metrics = metrics;
  impl->not_ready = std::move(not_ready);
  const auto [host, port_text] = SplitHostPort(endpoint);
  const auto parsed = ParsePort(port_text);
  if (!parsed) {
    return absl::InvalidArgumentError(
        fedgate::StrCat("listen.ops: \"", endpoint, "\" has no valid port (want HOST:PORT)"));
  }
  const auto port = static_cast<unsigned short>(*parsed);
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    tcp::resolver resolver(impl->io);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
      return absl::InvalidArgumentError(fedgate::StrCat("listen.ops: cannot resolve ", host));
    }
    addr = results.begin()->endpoint().address();
  }
  tcp::endpoint ep(addr, port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        fedgate::StrCat("listen.ops: cannot listen on ", endpoint, ": ", ec.message()));
  }
  std::unique_ptr<OpsServer> server(new OpsServer(std::move(impl)));
  server->port_ = server->impl_->acceptor.local_endpoint().port();
  server->impl_->Accept();
  server->impl_->thread = std::thread([s = server->impl_.get()] { s->io.run(); });
  return server;
}

void OpsServer::Stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  asio::post(impl_->io, [s = impl_.get()] {
    boost::system::error_code ec;
    s->acceptor.close(ec);
  });
  impl_->io.stop();
  impl_->thread.join();
}

OpsServer::~OpsServer() { Stop(); }

}  // namespace fedgate::gateway
