#include "gateway/cli/console/console_server.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <sys/socket.h>

#include "base/host_port.h"
#include "gateway/api/accept_loop.h"
#include "gateway/api/rest_routes.h"
#include "base/str_cat.h"

namespace fedgate::cli {
namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

// The page's files: URL path, file name, type. Nothing else is served from
// disk, so no path can reach outside the folder.
struct StaticFile {
  const char* path;
  const char* file;
  const char* type;
};
constexpr StaticFile kStaticFiles[] = {
    {"/", "index.html", "text/html; charset=utf-8"},
    {"/index.html", "index.html", "text/html; charset=utf-8"},
    {"/console.css", "console.css", "text/css; charset=utf-8"},
    {"/console.js", "console.js", "text/javascript; charset=utf-8"},
};

std::optional<std::string> Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

struct ConsoleServer::Impl {
  ConsoleOptions opts;
  ConsoleBackend backend;
  std::unique_ptr<ConsoleGuard> guard;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread accept_thread;
  std::atomic<bool> stop{false};
  std::atomic<int> active{0};
  std::string address;
  // URL path -> (body, type), read once at start.
  std::map<std::string, std::pair<std::string, std::string>> files;
  std::mutex fds_mu;
  std::set<int> fds;  // open connections, cut at Stop
  static constexpr int kMaxConnections = 64;

  explicit Impl(ConsoleBackend b) : backend(std::move(b)) {}

  void AcceptLoop() {
    gateway::AcceptEach(io, acceptor, stop, active, kMaxConnections,
                        [this](tcp::socket sock) { Serve(std::move(sock)); });
  }

  void Serve(tcp::socket sock) {
    const int fd = sock.native_handle();
    {
      std::lock_guard lock(fds_mu);
      fds.insert(fd);
    }
    struct Forget {
      Impl* im;
      int fd;
      ~Forget() {
        std::lock_guard lock(im->fds_mu);
        im->fds.erase(fd);
      }
    } forget{this, fd};
    if (stop) return;  // Stop cut the connections before this one was listed
    boost::beast::flat_buffer buf;
    boost::system::error_code ec;
    for (int served = 0; served < 1000 && !stop; ++served) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(64 * 1024);
      http::read(sock, buf, parser, ec);
      if (ec) break;
      http::response<http::string_body> res;
      Handle(parser.get(), &res);
      for (const auto& [k, v] : ConsoleGuard::SecurityHeaders()) res.set(k, v);
      res.keep_alive(parser.get().keep_alive());
      res.prepare_payload();
      http::write(sock, res, ec);
      if (ec || !res.keep_alive()) break;
    }
    sock.shutdown(tcp::socket::shutdown_both, ec);
  }

  static void Error(http::response<http::string_body>* res, int status, const std::string& code,
                    const std::string& message) {
    res->result(status);
    res->set(http::field::content_type, "application/json");
    res->body() = gateway::RestErrorBody(code, message);
  }

  void Handle(const http::request<http::string_body>& req, http::response<http::string_body>* res) {
    ConsoleRequest cr;
    cr.method = std::string(req.method_string());
    cr.target = std::string(req.target());
    cr.host = std::string(req[http::field::host]);
    cr.cookie = std::string(req[http::field::cookie]);
    cr.origin = std::string(req[http::field::origin]);
    const GuardVerdict v = guard->Check(cr);
    if (v.status != 0) {
      Error(res, v.status, v.status == 401 ? "UNAUTHENTICATED" : v.status == 403 ? "PERMISSION_DENIED" : "METHOD_NOT_ALLOWED",
            v.message);
      return;
    }
    if (v.set_cookie) res->set(http::field::set_cookie, guard->CookieValue());
    if (!v.redirect.empty()) {
      res->result(http::status::see_other);
      res->set(http::field::location, v.redirect);
      return;
    }
    const std::string path = ConsoleGuard::PathOf(cr.target);
    if (path.starts_with("/v1/")) {
      ConsoleReply r = backend.Answer(cr.method, cr.target);
      res->result(r.status);
      res->set(http::field::content_type, r.content_type);
      for (const auto& [k, val] : r.headers) res->set(k, val);
      res->body() = std::move(r.body);
      return;
    }
    if (path == "/console/session") {
      res->result(http::status::ok);
      res->set(http::field::content_type, "application/json");
      res->body() = opts.session_json;
      return;
    }
    const auto it = files.find(path);
    if (it == files.end()) {
      return Error(res, 404, "NOT_FOUND", StrCat(path.substr(0, 100), " is not a page of the console"));
    }
    res->result(http::status::ok);
    res->set(http::field::content_type, it->second.second);
    res->body() = it->second.first;
  }
};

absl::StatusOr<std::unique_ptr<ConsoleServer>> ConsoleServer::Start(const ConsoleOptions& opts,
                                                                   ConsoleBackend backend) {
  auto srv = std::unique_ptr<ConsoleServer>(new ConsoleServer());
  srv->impl_ = std::make_unique<Impl>(std::move(backend));
  auto& im = *srv->impl_;
  im.opts = opts;
  for (const auto& f : kStaticFiles) {
    auto body = Slurp(opts.web_dir + "/" + f.file);
    if (!body) return absl::NotFoundError(StrCat("cannot read ", opts.web_dir, "/", f.file));
    im.files[f.path] = {std::move(*body), f.type};
  }
  if (!opts.chart_js.empty()) {
    // Missing or unreadable: the page is told there is no Chart.js (session).
    if (auto chart = Slurp(opts.chart_js)) {
      im.files["/vendor/chart.js"] = {std::move(*chart), "text/javascript; charset=utf-8"};
    }
  }
  const auto [host, port_text] = SplitHostPort(opts.listen);
  const auto port = ParsePort(port_text);
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (!port || ec) {
    return absl::InvalidArgumentError(
        StrCat("--listen \"", opts.listen, "\": want IP:PORT (for example 127.0.0.1:0)"));
  }
  if (addr.is_unspecified()) {
    return absl::InvalidArgumentError(StrCat(
        "--listen \"", opts.listen,
        "\": name one address, not a wildcard: the console answers only requests whose Host "
        "header is that address (DNS rebinding)"));
  }
  tcp::endpoint ep(addr, static_cast<uint16_t>(*port));
  im.acceptor.open(ep.protocol(), ec);
  if (!ec) im.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(ep, ec);
  if (!ec) im.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(StrCat("cannot listen on ", opts.listen, ": ", ec.message()));
  const int bound = im.acceptor.local_endpoint().port();
  const std::string shown = addr.is_v6() ? StrCat("[", addr.to_string(), "]") : addr.to_string();
  im.address = StrCat(shown, ":", bound);
  std::vector<std::string> hosts = {im.address};
  if (addr.is_loopback()) hosts.push_back(StrCat("localhost:", bound));
  im.guard = std::make_unique<ConsoleGuard>(opts.token, hosts);
  im.accept_thread = std::thread([p = &im] { p->AcceptLoop(); });
  return srv;
}

std::string ConsoleServer::address() const { return impl_->address; }

void ConsoleServer::Stop() {
  if (!impl_ || impl_->stop.exchange(true)) return;
  boost::system::error_code ec;
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
  impl_->acceptor.close(ec);
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  // Keep-alive connections wait in a read: cut them, then wait for their
  // threads, which use impl_.
  {
    std::lock_guard lock(impl_->fds_mu);
    for (int fd : impl_->fds) ::shutdown(fd, SHUT_RDWR);
  }
  for (int i = 0; i < 200 && impl_->active.load() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

ConsoleServer::~ConsoleServer() { Stop(); }

}  // namespace fedgate::cli
