#include "gateway/api/rest_server.h"
#include "base/host_port.h"

#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <limits>
#include <optional>
#include <thread>

#include "base/str_cat.h"
#include "federation/names.h"
#include "base/text.h"
#include "gateway/security/authz.h"
#include "gateway/security/certs.h"
#include "gateway/security/identity.h"
#include "gateway/security/revocation.h"
#include "gateway/jobs/job_manager.h"
#include "gateway/jobs/participant.h"
#include "gateway/peering/core.h"
#include "gateway/ops/metrics.h"
#include "gateway/api/accept_loop.h"
#include "gateway/api/rest_routes.h"
#include "gateway/api/rest_bearer.h"
#include "gateway/api/rest_tls.h"
#include "gateway/api/rest_proxy.h"
#include "gateway/api/socket_deadlines.h"
#include "gateway/serve/service_controller.h"
#include "gateway/serve/service_proxy.h"
#include "gateway/serve/service_tokens.h"
#include "gateway/serve/service_target.h"

namespace fedgate::gateway {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out + "\n";
}


}  // namespace

struct RestServer::Impl {
  Config config;
  JobManager* jobs = nullptr;
  GatewayCore* core = nullptr;
  Participant* participant = nullptr;
  Metrics* metrics = nullptr;
  asio::io_context io;
  std::mutex tls_mu;
  std::shared_ptr<ssl::context> tls;
  std::string tls_stamp;
  std::chrono::steady_clock::time_point tls_checked;
  tcp::acceptor acceptor{io};
  std::thread accept_thread;
  std::atomic<bool> stop{false};
  std::atomic<int> active{0};
  int port = 0;
  Deadlines deadlines;
  std::unique_ptr<RevocationList> crl;
  std::unique_ptr<ServiceProxy> proxy;  // null: no services here
  // listen.serve: services only, bearer tokens, no client certificates.
  bool serve_mode = false;
  ServiceController* services = nullptr;
  ServiceTokens* tokens = nullptr;

  std::string TlsStamp() const {
    return StrCat(FileStamp(config.tls.ca), ";", FileStamp(config.tls.cert), ";",
                  FileStamp(config.tls.key), ";", FileStamp(config.tls.crl));
  }

  // The current context: rebuilt when a file changed (looked at once a
  // second), as gRPC re-reads its files; a broken new set keeps the old one.
  std::shared_ptr<ssl::context> CurrentTls() {
    std::lock_guard lock(tls_mu);
    const auto now = std::chrono::steady_clock::now();
    if (now - tls_checked >= std::chrono::seconds(1)) {
      tls_checked = now;
      std::string stamp = TlsStamp();
      if (stamp != tls_stamp) {
        auto fresh = MakeRestTlsContext(config, !serve_mode);
        if (fresh.ok()) {
          tls = std::move(*fresh);
          tls_stamp = std::move(stamp);
          spdlog::info("listen.http: TLS files reloaded");
        } else {
          spdlog::error("listen.http: keeping the old TLS files: {}",
                        std::string(fresh.status().message()));
        }
      }
    }
    return tls;
  }

  void AcceptLoop() {
    AcceptEach(io, acceptor, stop, active, kMaxConnections,
               [this](tcp::socket sock) { Serve(std::move(sock)); });
  }

  void Serve(tcp::socket sock) {
    int one = 1;
    ::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const int fd = sock.native_handle();
    auto tls_now = CurrentTls();  // kept alive while this connection uses it
    ssl::stream<tcp::socket> stream(std::move(sock), *tls_now);
    boost::system::error_code ec;
    // The handshake and each request (headers and body) must arrive within
    // api.read_timeout; an idle keep-alive connection is closed after it too.
    const std::chrono::milliseconds read_deadline(config.api.read_timeout_ms);
    deadlines.Arm(fd, read_deadline);
    struct Disarm {
      Deadlines& d;
      int fd;
      ~Disarm() { d.Disarm(fd); }
    } disarm{deadlines, fd};
    stream.handshake(ssl::stream_base::server, ec);
    if (ec) {
      metrics->Inc("fedgate_authz_refusals_total", {{"rpc_class", "rest"}, {"reason", "handshake"}});
      return;
    }
    // HTTP/1.1 keep-alive: one TLS handshake serves many requests, up to a
    // cap (so one client cannot hold a thread for ever) or until the client
    // closes or stays idle past the receive timeout.
    boost::beast::flat_buffer buf;
    for (int served = 0; served < kMaxRequestsPerConnection && !stop; ++served) {
      // The header first: a service's request streams its body to a
      // replica; the API's own calls read theirs whole (at most 1 MiB).
      http::request_parser<http::empty_body> head;
      head.body_limit(std::numeric_limits<std::uint64_t>::max());
      deadlines.Arm(fd, read_deadline);
      http::read_header(stream, buf, head, ec);
      // The connection's last request says so in its answer (Connection: close).
      if (!ec && served + 1 >= kMaxRequestsPerConnection) head.get().keep_alive(false);
      if (!ec && serve_mode) {
        deadlines.Arm(fd, kHandleDeadline);
        if (!ServeBearer(stream, buf, std::move(head)) || served + 1 >= kMaxRequestsPerConnection) break;
        continue;
      }
      if (!ec && proxy != nullptr &&
          IsServiceProxyTarget(std::string_view(head.get().target().data(), head.get().target().size()))) {
        deadlines.Arm(fd, kHandleDeadline);
        if (!ServeService(stream, buf, std::move(head)) || served + 1 >= kMaxRequestsPerConnection) break;
        continue;
      }
      if (!ec && head.content_length() && *head.content_length() > kMaxBodyBytes) {
        ec = http::error::body_limit;
      }
      std::optional<http::request_parser<http::string_body>> parsed;
      if (!ec) {
        parsed.emplace(std::move(head));
        parsed->body_limit(kMaxBodyBytes);
        http::read(stream, buf, *parsed, ec);
      }
      deadlines.Arm(fd, kHandleDeadline);  // the handler, then writing the reply
      if (ec == http::error::end_of_stream || ec == boost::asio::error::eof ||
          ec == boost::asio::ssl::error::stream_truncated ||
          (ec && served > 0 && buf.size() == 0)) {
        break;  // the client is done (or idle): nothing half-read to answer
      }
      http::response<http::string_body> res;
      res.set(http::field::content_type, "application/json");
      bool keep = false;
      if (ec == http::error::body_limit) {
        Respond(&res, absl::ResourceExhaustedError(StrCat("body larger than ", kMaxBodyBytes, " bytes")),
                413);
      } else if (ec) {
        Respond(&res, absl::InvalidArgumentError(StrCat("malformed HTTP request: ", ec.message())), 400);
      } else {
        Handle(stream, parsed->get(), &res);
        keep = parsed->get().keep_alive() && served + 1 < kMaxRequestsPerConnection;
      }
      res.keep_alive(keep);
      res.prepare_payload();
      http::write(stream, res, ec);
      if (ec || !keep) break;
    }
    stream.shutdown(ec);
  }

  // A request for a service: its caller must be a tenant's user (client
  // certificate); the proxy relays it to the tenant's service's replicas.
  bool ServeService(ssl::stream<tcp::socket>& stream, boost::beast::flat_buffer& buf,
                    http::request_parser<http::empty_body>&& head) {
    // A tenant's user; or an approved peer's gateway relaying a request of
    // the tenant it names (the service is coordinated here, not there).
    auto caller = Caller(stream, /*allow_peer_gateway=*/true);
    std::string tenant = caller.ok() ? caller->tenant : "";
    const bool relayed = caller.ok() && caller->role == Role::kGateway;
    if (relayed) {
      const auto named = head.get()[ServiceProxy::kTenantHeader];
      tenant.assign(named.data(), named.size());
      if (!federation::IsValidName(tenant)) {
        caller = absl::InvalidArgumentError(
            StrCat("a relayed service request must name a valid tenant in ", ServiceProxy::kTenantHeader));
      }
    } else if (caller.ok() && caller->role != Role::kUser) {
      caller = absl::PermissionDeniedError(
          StrCat(caller->ToUri(), " is not a tenant's user: services answer their tenant"));
    }
    if (!caller.ok()) {
      metrics->Inc("fedgate_authz_refusals_total", {{"rpc_class", "rest"}, {"reason", "role"}});
      http::response<http::string_body> res;
      Respond(&res, caller.status());
      res.keep_alive(false);
      res.prepare_payload();
      boost::system::error_code ec;
      http::write(stream, res, ec);
      return false;
    }
    boost::system::error_code ec;
    const auto peer = stream.next_layer().remote_endpoint(ec);
    return proxy->Serve(stream, buf, std::move(head), tenant,
                        ec ? std::string("unknown") : peer.address().to_string(), relayed,
                        relayed ? caller->site : "");
  }

  bool ServeBearer(ssl::stream<tcp::socket>& stream, boost::beast::flat_buffer& buf,
                   http::request_parser<http::empty_body>&& head) {
    return ServeWithBearerToken(stream, buf, std::move(head), proxy.get(), services, tokens);
  }

  static void Respond(http::response<http::string_body>* res, const absl::Status& st, int code = 0) {
    res->result(code != 0 ? code : RestHttpStatus(st.code()));
    res->body() = RestErrorBody(st);
  }

  absl::StatusOr<Identity> Caller(ssl::stream<tcp::socket>& stream, bool allow_peer_gateway = false) {
    return RestCaller(stream.native_handle(), *crl, config, core, allow_peer_gateway);
  }

  // The federation views: capacity and links for every caller of the job
  // API (counts, no node names), nodes for this site's admins.
  void View(const Identity& caller, RestCall::Kind kind, http::response<http::string_body>* res) {
    if (core == nullptr || participant == nullptr) {
      return Respond(res, absl::UnavailableError("this gateway serves no federation views"));
    }
    res->result(http::status::ok);
    if (kind == RestCall::Kind::kSites) {
      res->body() = ToJson(core->Capacity());
      return;
    }
    if (kind == RestCall::Kind::kLinks || kind == RestCall::Kind::kDatasets) {
      res->body() = kind == RestCall::Kind::kLinks ? ToJson(core->ListLinks())
                                                   : ToJson(core->ListDatasets());
      return;
    }
    if (auto st = Decide(caller, RpcClass::kAdmin, config.federation, config.site,
                         [](std::string_view) { return false; });
        !st.ok()) {
      return Respond(res, st);
    }
    v1::ListNodesResponse nodes;
    for (auto& n : participant->Nodes()) *nodes.add_nodes() = std::move(n);
    res->body() = ToJson(nodes);
  }

  // A call about a job coordinated by another site that is up and whose
  // ad names its REST endpoint: 307 there (method and body kept), so a
  // tenant's client that follows redirects gets the coordinator's answer,
  // not this site's copy or the row it kept when the job moved away.
  bool RedirectToCoordinator(const Identity& caller, const RestCall& call, std::string_view target,
                             http::response<http::string_body>* res) {
    if (call.job_id.empty() || !call.follow || core == nullptr) return false;
    v1::GetJobRequest get;
    get.set_id(call.job_id);
    auto got = jobs->Get(caller, get);  // the caller's own jobs only
    if (!got.ok()) return false;
    const std::string& coordinator = got->job().coordinator();
    if (!core->FollowsTo(coordinator)) return false;
    const std::string at = core->SiteHttpEndpoint(coordinator);
    if (at.empty()) return false;
    res->result(http::status::temporary_redirect);
    res->set(http::field::location, StrCat("https://", at, target));
    res->set("Fedgate-Coordinator", coordinator);
    res->set(http::field::content_type, "application/json");
    res->body() = StrCat("{\"error\":\"job ", call.job_id, " is coordinated by ", coordinator,
                         ": ask it at https://", at, " (or add follow=false for this gateway's view)\"}");
    metrics->Inc("fedgate_rest_redirects_total", {});
    return true;
  }

  void Handle(ssl::stream<tcp::socket>& stream, const http::request<http::string_body>& req,
              http::response<http::string_body>* res) {
    auto caller = Caller(stream);
    if (!caller.ok()) {
      metrics->Inc("fedgate_authz_refusals_total", {{"rpc_class", "rest"}, {"reason", "role"}});
      Respond(res, caller.status());
      return;
    }
    auto reply = [&](const auto& out) {
      if (!out.ok()) {
        Respond(res, out.status());
        return;
      }
      res->result(http::status::ok);
      res->body() = ToJson(*out);
    };
    metrics->Inc("fedgate_rest_requests_total", {{"method", std::string(req.method_string())}});
    auto call = RouteRest(std::string_view(req.method_string().data(), req.method_string().size()),
                          std::string_view(req.target().data(), req.target().size()), req.body());
    if (!call.ok()) return Respond(res, call.status());
    if (RedirectToCoordinator(*caller, *call, std::string_view(req.target().data(), req.target().size()),
                              res)) {
      return;
    }
    switch (call->kind) {
      case RestCall::Kind::kSubmit: return reply(jobs->Submit(*caller, call->submit));
      case RestCall::Kind::kList: return reply(jobs->List(*caller, call->list));
      case RestCall::Kind::kCancel: return reply(jobs->Cancel(*caller, call->cancel));
      case RestCall::Kind::kGet: return reply(jobs->Get(*caller, call->get));
      case RestCall::Kind::kUsage: return reply(jobs->Usage(*caller, call->usage));
      case RestCall::Kind::kQuotas: return reply(jobs->Quotas(*caller, call->quotas));
      case RestCall::Kind::kEvents: return reply(jobs->Events(*caller, call->events));
      case RestCall::Kind::kServices: return reply(jobs->ListServices(*caller, call->services));
      case RestCall::Kind::kVc: {
        auto got = jobs->Get(*caller, call->get);
        if (!got.ok()) return Respond(res, got.status());
        return reply(absl::StatusOr<v1::RunPlan>(got->job().run()));
      }
      case RestCall::Kind::kSites:
      case RestCall::Kind::kLinks:
      case RestCall::Kind::kNodes:
      case RestCall::Kind::kDatasets: return View(*caller, call->kind, res);
      case RestCall::Kind::kLogs: {
        auto out = jobs->Logs(*caller, call->logs);
        if (!out.ok()) return Respond(res, out.status());
        res->result(http::status::ok);
        res->set(http::field::content_type, "text/plain; charset=utf-8");
        // At most 1 MiB per reply; the next chunk starts at this offset.
        res->set("X-Fedgate-Next-Offset", std::to_string(out->offset() + out->content().size()));
        res->body() = out->content();
        return;
      }
    }
  }
};

absl::StatusOr<std::unique_ptr<RestServer>> RestServer::Start(const Config& config, JobManager* jobs,
                                                              GatewayCore* core,
                                                              Participant* participant,
                                                              Metrics* metrics,
                                                              ServiceController* services) {
  return Open(config, jobs, core, participant, metrics, services, nullptr);
}

absl::StatusOr<std::unique_ptr<RestServer>> RestServer::StartServe(const Config& config,
                                                                   GatewayCore* core, Metrics* metrics,
                                                                   ServiceController* services,
                                                                   ServiceTokens* tokens) {
  return Open(config, nullptr, core, nullptr, metrics, services, tokens);
}

absl::StatusOr<std::unique_ptr<RestServer>> RestServer::Open(const Config& config, JobManager* jobs,
                                                             GatewayCore* core, Participant* participant,
                                                             Metrics* metrics, ServiceController* services,
                                                             ServiceTokens* tokens) {
  auto srv = std::unique_ptr<RestServer>(new RestServer());
  srv->impl_ = std::make_unique<Impl>();
  auto& im = *srv->impl_;
  im.serve_mode = tokens != nullptr;
  im.services = services;
  im.tokens = tokens;
  const std::string key = im.serve_mode ? "listen.serve" : "listen.http";
  const std::string listen = im.serve_mode ? config.listen.serve : config.listen.http;
  im.config = config;
  im.jobs = jobs;
  im.core = core;
  im.participant = participant;
  im.metrics = metrics;
  if (services != nullptr) im.proxy = MakeRestProxy(config, services, core, metrics, participant, &im.deadlines);
  boost::system::error_code ec;
  im.crl = std::make_unique<RevocationList>(config.tls.crl);
  im.tls_stamp = im.TlsStamp();
  auto tls = MakeRestTlsContext(config, !im.serve_mode);
  if (!tls.ok()) return tls.status();
  im.tls = std::move(*tls);
  im.tls_checked = std::chrono::steady_clock::now();
  const auto [host, port_text] = SplitHostPort(listen);
  const auto port = ParsePort(port_text);
  if (!port) {
    return absl::InvalidArgumentError(
        StrCat(key, ": \"", listen, "\" has no valid port (want HOST:PORT)"));
  }
  auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    tcp::resolver resolver(im.io);
    auto results = resolver.resolve(host, "0", ec);
    if (ec || results.empty()) return absl::InvalidArgumentError(StrCat(key, ": cannot resolve ", host));
    addr = results.begin()->endpoint().address();
  }
  tcp::endpoint ep(addr, static_cast<uint16_t>(*port));
  im.acceptor.open(ep.protocol(), ec);
  if (!ec) im.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(ep, ec);
  if (!ec) im.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(StrCat(key, ": cannot listen on ", listen, ": ", ec.message()));
  }
  im.port = im.acceptor.local_endpoint().port();
  im.accept_thread = std::thread([p = &im] { p->AcceptLoop(); });
  return srv;
}

int RestServer::port() const { return impl_->port; }

void RestServer::Stop() {
  if (!impl_ || impl_->stop.exchange(true)) return;
  boost::system::error_code ec;
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
  impl_->acceptor.close(ec);
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  // Open connections are cut; wait for their threads before the job
  // manager they use goes away.
  impl_->deadlines.ExpireAll();
  for (int i = 0; i < 100 && impl_->active.load() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

RestServer::~RestServer() { Stop(); }

}  // namespace fedgate::gateway
