#include "gateway/serve/service_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "base/host_port.h"
#include "base/str_cat.h"
#include "gateway/config/config.h"
#include "gateway/peering/core.h"
#include "gateway/security/certs.h"
#include "gateway/security/identity.h"
#include "gateway/ops/metrics.h"
#include "gateway/serve/http_relay.h"
#include "gateway/serve/service_controller.h"
#include "gateway/serve/service_target.h"

namespace fedgate::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr int kConnectTimeoutMs = 2000;




template <class Message>
void PrepareUpstream(Message& m, const std::string& path, const std::string& client_ip) {
  StripHopByHop(m);
  m.erase(ServiceProxy::kTenantHeader);  // fedgate's own, not the replica's
  m.target(path);
  AddForwardedFor(m, client_ip);
  m.keep_alive(false);  // one connection per request to a replica
}

// The identity in the certificate the other end of `s` presented.
absl::StatusOr<Identity> PeerIdentity(asio::ssl::stream<tcp::socket>& s) {
  const std::string pem = PeerCertificatePem(s.native_handle());
  if (pem.empty()) return absl::UnauthenticatedError("no certificate");
  return IdentityFromCertPem(pem);
}


// The ready replica with the fewest requests in flight, this site's first
// on a tie, then any of the equals at random (so an idle service spreads
// its requests); null when none is ready (or all were tried). After a
// failure, replicas on the failed one's site come last: a site that goes
// takes all its replicas at once.
std::shared_ptr<Replica> Pick(const ServiceRoute& route, const std::set<std::string>& tried,
                              const std::string& site, const std::string& shun_site = "") {
  std::vector<std::shared_ptr<Replica>> best;
  auto key = [&](const Replica& r) {
    return std::tuple(!shun_site.empty() && r.site == shun_site ? 1 : 0, r.outstanding.load(),
                      r.site == site ? 0 : 1);
  };
  for (const auto& r : route.replicas) {
    if (!r->ready || tried.contains(r->job_id)) continue;
    if (best.empty() || key(*r) < key(*best[0])) {
      best.assign(1, r);
    } else if (key(*r) == key(*best[0])) {
      best.push_back(r);
    }
  }
  if (best.empty()) return nullptr;
  thread_local std::minstd_rand rng(std::random_device{}());
  return best[std::uniform_int_distribution<size_t>(0, best.size() - 1)(rng)];
}

struct InFlight {
  explicit InFlight(std::shared_ptr<Replica> r) : r(std::move(r)) { ++this->r->outstanding; }
  ~InFlight() { --r->outstanding; }
  std::shared_ptr<Replica> r;
};

}  // namespace

struct ServiceProxy::Call {
  Call(Downstream& d, beast::flat_buffer& b) : down(d), buf(b) {}
  Downstream& down;
  beast::flat_buffer& buf;
  Clock::time_point start = Clock::now();
  std::string service = "-";
  std::string site;
  bool head_request = false;
  bool keep = false;
};

namespace {

// The answer whose header `rp` holds, streamed from `up` to the client:
// from here on the request is the replica's (or the coordinator's).
template <class Up>
bool Answer(Metrics* metrics, ServiceProxy::Call& call, Up& up, beast::flat_buffer& ubuf,
            http::response_parser<http::buffer_body>& rp) {
  auto& res = rp.get();
  const int code = static_cast<int>(res.result_int());
  StripHopByHop(res);
  const bool bodyless = call.head_request || code == 204 || code == 304 || code / 100 == 1;
  if (!bodyless && !rp.chunked() && !rp.content_length()) res.chunked(true);  // ends at EOF upstream
  res.keep_alive(call.keep);
  beast::error_code ec = Relay(call.down, up, ubuf, rp);
  metrics->Inc("fedgate_service_requests_total",
               {{"service", call.service}, {"site", call.site}, {"code", std::to_string(code)}});
  metrics->Observe("fedgate_service_request_duration_seconds", {{"service", call.service}},
                   std::chrono::duration<double>(Clock::now() - call.start).count());
  if (ec) {
    spdlog::warn("service {}: answer cut: {}", call.service, ec.message());
    return false;
  }
  return call.keep;
}

// Stops watching a socket's deadline once the request is done with it.
struct Disarmed {
  ServiceProxy::Disarm& disarm;
  int fd;
  ~Disarmed() { disarm(fd); }
};

// An answer's parser: no size limit (answers stream through), no body
// after a HEAD.
void ExpectAnswer(http::response_parser<http::buffer_body>& rp, bool head_request) {
  rp.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (head_request) rp.skip(true);
}

// A client waiting for "100 Continue" before its body gets it here, once
// the request is known to be taken; the replica is not asked.
void Continue(ServiceProxy::Call& call, ServiceProxy::Head& head) {
  const auto expect = head.get()[http::field::expect];
  if (!beast::iequals(expect, "100-continue")) return;
  http::response<http::empty_body> cont{http::status::continue_, 11};
  beast::error_code ec;
  http::write(call.down, cont, ec);
  head.get().erase(http::field::expect);
}

}  // namespace

struct ServiceProxy::Tls {
  asio::ssl::context ctx{asio::ssl::context::tls_client};
};

ServiceProxy::ServiceProxy(ServiceController* services, GatewayCore* core, Metrics* metrics,
                           const Config& config, Arm arm, Disarm disarm)
    : services_(services), core_(core), metrics_(metrics), site_(config.site),
      federation_(config.federation), arm_(std::move(arm)), disarm_(std::move(disarm)) {
  metrics_->Describe("fedgate_service_requests_total", "counter",
                     "Requests to services through this gateway, by service, the replica's site "
                     "(the coordinator's for a relayed one; this one's when none was reached) and "
                     "the HTTP status answered");
  metrics_->Describe("fedgate_service_request_duration_seconds", "histogram",
                     "Time from a service request's header to the end of its answer",
                     {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  if (core_ == nullptr) return;
  auto tls = std::make_unique<Tls>();
  beast::error_code ec;
  tls->ctx.set_options(asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                       asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  tls->ctx.use_certificate_chain_file(config.tls.cert, ec);
  if (!ec) tls->ctx.use_private_key_file(config.tls.key, asio::ssl::context::pem, ec);
  if (!ec) tls->ctx.load_verify_file(config.tls.ca, ec);
  if (ec) {
    spdlog::warn("services: cannot relay to other gateways (TLS files: {})", ec.message());
    return;
  }
  tls->ctx.set_verify_mode(asio::ssl::verify_peer);
  tls_ = std::move(tls);
}

ServiceProxy::~ServiceProxy() = default;

bool ServiceProxy::Refuse(Downstream& down, beast::flat_buffer& buf, const std::string& service,
                          int status, const std::string& message, bool challenge) {
  Call call(down, buf);
  call.service = service;
  return Fail(call, status, message, 0, challenge);
}

bool ServiceProxy::Fail(Call& call, int status, const std::string& message, int retry_after_s,
                        bool challenge) {
  http::response<http::string_body> res;
  res.result(static_cast<unsigned>(status));
  res.set(http::field::content_type, "application/json");
  if (retry_after_s > 0) res.set(http::field::retry_after, std::to_string(retry_after_s));
  if (challenge) res.set(http::field::www_authenticate, "Bearer realm=\"fedgate\"");
  std::string quoted;
  for (char c : message) {
    if (c == '"' || c == '\\') quoted.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) quoted.push_back(c);
  }
  res.body() = StrCat("{\"error\":{\"code\":", status, ",\"message\":\"", quoted, "\"}}\n");
  res.keep_alive(call.keep);
  res.prepare_payload();
  beast::error_code ec;
  http::write(call.down, res, ec);
  metrics_->Inc("fedgate_service_requests_total",
                {{"service", call.service}, {"site", call.site.empty() ? site_ : call.site},
                 {"code", std::to_string(status)}});
  return call.keep && !ec;
}

bool ServiceProxy::Serve(Downstream& down, beast::flat_buffer& buf, Head&& head,
                         const std::string& tenant, const std::string& client_ip, bool relayed) {
  Call call(down, buf);
  call.head_request = head.get().method() == http::verb::head;
  call.keep = head.get().keep_alive();
  const std::string_view raw(head.get().target().data(), head.get().target().size());
  auto target = ParseServiceTarget(raw);
  if (!target.ok()) {
    call.keep = false;  // the body, if any, was not read
    return Fail(call, absl::IsNotFound(target.status()) ? 404 : 400, std::string(target.status().message()));
  }
  auto route = services_->Route(tenant, target->name);
  if (!route.ok()) {
    // Coordinated elsewhere: relayed there, once.
    if (!relayed && core_ != nullptr && tls_ != nullptr) {
      const std::string site = core_->ServiceCoordinator(tenant, target->name);
      const std::string at = site.empty() || site == site_ ? "" : core_->SiteHttpEndpoint(site);
      if (!at.empty()) {
        call.service = target->name;
        return ToCoordinator(call, std::move(head), tenant, client_ip, site, at);
      }
    }
    call.keep = false;
    return Fail(call, 404, std::string(route.status().message()));
  }
  call.service = target->name;
  services_->CountRequest(route->id);
  return ToReplica(call, std::move(head), *route, target->path, client_ip);
}

bool ServiceProxy::ToReplica(Call& call, Head&& head, const ServiceRoute& route, const std::string& path,
                             const std::string& client_ip) {
  const auto& policy = route.policy;
  const auto timeout = std::chrono::milliseconds(policy.request_timeout_ms);
  const auto length = head.content_length();
  if (length && *length > policy.max_body) {
    call.keep = false;
    return Fail(call, 413, StrCat("request body of ", *length, " bytes is over the service's max_body of ",
                                  policy.max_body));
  }
  Continue(call, head);
  std::set<std::string> tried;
  std::string failed_site;  // of the last replica that failed this request
  // Connects to the next replica; -1 (with why) when none is left.
  auto connect = [&](std::shared_ptr<Replica>* to, std::string* why) -> int {
    while (auto r = Pick(route, tried, site_, failed_site)) {
      tried.insert(r->job_id);
      const int fd = ConnectWithin(r->addr, r->port,
                                   static_cast<int>(std::min<int64_t>(kConnectTimeoutMs, policy.request_timeout_ms)), why);
      if (fd >= 0) {
        *to = r;
        return fd;
      }
      spdlog::warn("service {}: replica {}: {}", route.name, r->job_id, *why);
      services_->Failed(r);  // it never saw the request: try the next one
      failed_site = r->site;
    }
    if (why->empty()) {
      *why = StrCat("no ready replica of service \"", route.name, "\" (", route.replicas.size(),
                    " running, none passing its readiness probe)");
    }
    return -1;
  };
  const bool small = !head.chunked() && (!length || *length <= kReplayBytes);
  if (small) {
    // Read whole (at most 1 MiB), so it can go to a second replica.
    http::request_parser<http::string_body> full(std::move(head));
    full.body_limit(kReplayBytes);
    beast::error_code ec;
    http::read(call.down, call.buf, full, ec);
    if (ec) {
      call.keep = false;
      return Fail(call, 400, StrCat("reading the request body: ", ec.message()));
    }
    http::request<http::string_body> req = full.release();
    PrepareUpstream(req, path, client_ip);
    req.prepare_payload();
    std::string why;
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::shared_ptr<Replica> r;
      const int fd = connect(&r, &why);
      if (fd < 0) break;
      InFlight in_flight(r);
      call.site = r->site;
      asio::io_context io;
      tcp::socket up(io);
      up.assign(r->addr.find(':') == std::string::npos ? tcp::v4() : tcp::v6(), fd);
      arm_(fd, timeout);
      beast::flat_buffer ubuf;
      http::response_parser<http::buffer_body> rp;
      ExpectAnswer(rp, call.head_request);
      http::write(up, req, ec);
      if (!ec) http::read_header(up, ubuf, rp, ec);
      if (!ec) {
        const bool keep = Answer(metrics_, call, up, ubuf, rp);
        disarm_(fd);
        return keep;
      }
      disarm_(fd);
      const bool timed_out = Clock::now() - call.start >= timeout;
      why = StrCat("replica ", r->job_id, " at ", r->addr, ":", r->port, ": ",
                   timed_out ? "no answer within request_timeout" : ec.message());
      spdlog::warn("service {}: {}", route.name, why);
      if (timed_out) return Fail(call, 504, why);
      services_->Failed(r);
      failed_site = r->site;
      if (!policy.idempotent) return Fail(call, 502, StrCat(why, " (not retried: the service is not idempotent)"));
    }
    return Fail(call, why.find("no ready replica") != std::string::npos ? 503 : 502, why, 1);
  }
  // Large or chunked: streamed through, so tried on one replica only once sent.
  http::request_parser<http::buffer_body> p(std::move(head));
  p.body_limit(policy.max_body);
  const bool client_keep = p.get().keep_alive();
  PrepareUpstream(p.get(), path, client_ip);
  std::string why;
  std::shared_ptr<Replica> r;
  const int fd = connect(&r, &why);
  call.keep = false;  // an error mid-body leaves the client's stream unusable
  if (fd < 0) return Fail(call, 503, why, 1);
  InFlight in_flight(r);
  call.site = r->site;
  asio::io_context io;
  tcp::socket up(io);
  up.assign(r->addr.find(':') == std::string::npos ? tcp::v4() : tcp::v6(), fd);
  arm_(fd, timeout);
  const Disarmed disarmed{disarm_, fd};
  beast::error_code ec = Relay(up, call.down, call.buf, p);
  if (ec == http::error::body_limit) {
    return Fail(call, 413, StrCat("request body over the service's max_body of ", policy.max_body, " bytes"));
  }
  if (ec) return Fail(call, 502, StrCat("sending the request to replica ", r->job_id, ": ", ec.message()));
  beast::flat_buffer ubuf;
  http::response_parser<http::buffer_body> rp;
  ExpectAnswer(rp, call.head_request);
  http::read_header(up, ubuf, rp, ec);
  if (ec) {
    services_->Failed(r);
    return Fail(call, Clock::now() - call.start >= timeout ? 504 : 502,
                StrCat("replica ", r->job_id, ": ", ec.message()));
  }
  call.keep = client_keep;
  return Answer(metrics_, call, up, ubuf, rp);
}

bool ServiceProxy::ToCoordinator(Call& call, Head&& head, const std::string& tenant,
                                 const std::string& client_ip, const std::string& site,
                                 const std::string& at) {
  call.site = site;
  const bool client_keep = call.keep;
  call.keep = false;  // until the answer is whole
  const auto [host, port_text] = SplitHostPort(at);
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::error_code ec;
  auto found = resolver.resolve(std::string(host), std::string(port_text), ec);
  if (ec || found.empty()) {
    return Fail(call, 502, StrCat("the service's coordinator ", site, ": cannot resolve ", at));
  }
  const auto ep = found.begin()->endpoint();
  std::string why;
  const int fd = ConnectWithin(ep.address().to_string(), ep.port(), kConnectTimeoutMs, &why);
  if (fd < 0) return Fail(call, 503, StrCat("the service's coordinator ", site, ": ", why), 1);
  asio::ssl::stream<tcp::socket> up(io, tls_->ctx);
  up.next_layer().assign(ep.protocol(), fd);
  arm_(fd, kRelayTimeout);
  const Disarmed disarmed{disarm_, fd};
  up.handshake(asio::ssl::stream_base::client, ec);
  if (ec) return Fail(call, 502, StrCat("TLS with the service's coordinator ", site, ": ", ec.message()));
  // Only the coordinator's own gateway gets the tenant's request.
  auto peer = PeerIdentity(up);
  if (!peer.ok() || peer->role != Role::kGateway || peer->site != site || peer->federation != federation_) {
    return Fail(call, 502, StrCat(at, " is not the gateway of site ", site));
  }
  Continue(call, head);
  http::request_parser<http::buffer_body> p(std::move(head));
  p.body_limit(std::numeric_limits<std::uint64_t>::max());  // the coordinator applies max_body
  StripHopByHop(p.get());
  p.get().set(kTenantHeader, tenant);
  AddForwardedFor(p.get(), client_ip);
  p.get().keep_alive(false);
  ec = Relay(up, call.down, call.buf, p);
  if (ec) return Fail(call, 502, StrCat("relaying to the service's coordinator ", site, ": ", ec.message()));
  beast::flat_buffer ubuf;
  http::response_parser<http::buffer_body> rp;
  ExpectAnswer(rp, call.head_request);
  http::read_header(up, ubuf, rp, ec);
  if (ec) return Fail(call, 502, StrCat("the service's coordinator ", site, ": ", ec.message()));
  call.keep = client_keep;
  return Answer(metrics_, call, up, ubuf, rp);
}

}  // namespace fedgate::gateway
