#include "gateway/serve/service_proxy.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <set>

#include "base/str_cat.h"
#include "gateway/config/config.h"
#include "gateway/peering/core.h"
#include "gateway/ops/metrics.h"
#include "gateway/serve/http_relay.h"
#include "gateway/serve/replica_hop.h"
#include "gateway/serve/replica_pick.h"
#include "gateway/serve/service_controller.h"
#include "gateway/serve/service_proxy_call.h"
#include "gateway/serve/service_target.h"

namespace fedgate::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace proxy_parts;  // NOLINT: the proxy's own parts

struct InFlight {
  explicit InFlight(std::shared_ptr<Replica> r) : r(std::move(r)) { ++this->r->outstanding; }
  ~InFlight() { --r->outstanding; }
  std::shared_ptr<Replica> r;
};

}  // namespace

// A connection to one replica: TCP straight to it, or TLS to its site's
// gateway.
struct ServiceProxy::Link {
  asio::io_context io;
  std::optional<tcp::socket> plain;
  std::unique_ptr<ReplicaHop::Tls> tls;  // on the hop's io context (it may be pooled)
  bool reused = false;                   // taken from the pool
  int fd = -1;
  template <class F>
  auto With(F&& f) {
    return tls ? f(*tls) : f(*plain);
  }
};

ServiceProxy::ServiceProxy(ServiceController* services, GatewayCore* core, Metrics* metrics,
                           const Config& config, Arm arm, Disarm disarm)
    : services_(services), core_(core), metrics_(metrics), site_(config.site),
      federation_(config.federation), arm_(std::move(arm)), disarm_(std::move(disarm)),
      hop_(std::make_unique<ReplicaHop>(core, config)) {
  metrics_->Describe("fedgate_service_requests_total", "counter",
                     "Requests to services through this gateway, by service, the replica's site "
                     "(the coordinator's for a relayed one; this one's when none was reached) and "
                     "the HTTP status answered");
  metrics_->Describe("fedgate_service_request_duration_seconds", "histogram",
                     "Time from a service request's header to the end of its answer",
                     {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  metrics_->Describe("fedgate_service_hop_connections_total", "counter",
                     "Connections to other sites' gateways for their replicas, by site: new (TCP "
                     "and TLS handshakes) or reused (kept open from an earlier request)");
  if (core_ != nullptr && !hop_->usable()) {
    spdlog::warn("services: cannot reach other gateways (TLS files unusable): no relays, "
                 "replicas on other sites unreachable");
  }
}

ServiceProxy::~ServiceProxy() = default;

std::map<std::string, double> ServiceProxy::LinkGbps() {
  {
    std::lock_guard lock(links_mu_);
    if (core_ == nullptr || Clock::now() - links_at_ < kLinksFor) return gbps_;
  }
  std::map<std::string, double> fresh;  // the slower direction when both are measured
  const v1::ListLinksResponse listed = core_->ListLinks();
  for (const auto& l : listed.links()) {
    const std::string other = l.from() == site_ ? l.to() : l.to() == site_ ? l.from() : "";
    if (other.empty() || l.gbps() <= 0) continue;
    auto [it, added] = fresh.emplace(other, l.gbps());
    if (!added) it->second = std::min(it->second, l.gbps());
  }
  std::lock_guard lock(links_mu_);
  gbps_ = fresh;
  links_at_ = Clock::now();
  return fresh;
}

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
  if (call.unreached) res.set(ReplicaHop::kUnreachedHeader, "1");
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
                         const std::string& tenant, const std::string& client_ip, bool relayed,
                         const std::string& relaying_site) {
  Call call(down, buf);
  call.head_request = head.get().method() == http::verb::head;
  call.keep = head.get().keep_alive();
  const std::string_view raw(head.get().target().data(), head.get().target().size());
  auto target = ParseServiceTarget(raw);
  if (!target.ok()) {
    call.keep = false;  // the body, if any, was not read
    return Fail(call, absl::IsNotFound(target.status()) ? 404 : 400, std::string(target.status().message()));
  }
  const auto replica = head.get()[ReplicaHop::kReplicaHeader];
  if (relayed && !relaying_site.empty() && !replica.empty()) {  // a coordinator's, for a replica here
    call.service = target->name;
    return ToLocalReplica(call, std::move(head), relaying_site, tenant, std::string(replica),
                          target->path, client_ip);
  }
  auto route = services_->Route(tenant, target->name);
  if (!route.ok()) {
    // Coordinated elsewhere: relayed there, once.
    if (!relayed && core_ != nullptr && hop_->usable()) {
      const std::string site = core_->ServiceCoordinator(tenant, target->name);
      if (!site.empty() && site != site_ && !core_->SiteHttpEndpoint(site).empty()) {
        call.service = target->name;
        return ToCoordinator(call, std::move(head), tenant, client_ip, site);
      }
    }
    call.keep = false;
    return Fail(call, 404, std::string(route.status().message()));
  }
  call.service = target->name;
  services_->CountRequest(route->id);
  return ToReplica(call, std::move(head), *route, target->path, client_ip);
}

bool ServiceProxy::Open(const Replica& r, std::chrono::milliseconds timeout, bool reuse, Link* link,
                        std::string* why) {
  const int connect_ms = static_cast<int>(std::min<int64_t>(kConnectTimeoutMs, timeout.count()));
  if (r.site == site_ || !hop_->usable()) {
    const int fd = ConnectWithin(r.addr, r.port, connect_ms, why);
    if (fd < 0) return false;
    link->plain.emplace(link->io);
    link->plain->assign(ProtocolOf(fd), fd);
    link->fd = fd;
    arm_(fd, timeout);
    return true;
  }
  if (reuse) {
    if (auto idle = hop_->TakeIdle(r.site)) {
      link->tls = std::move(idle);
      link->reused = true;
      link->fd = link->tls->next_layer().native_handle();
      arm_(link->fd, timeout);
      metrics_->Inc("fedgate_service_hop_connections_total", {{"site", r.site}, {"kind", "reused"}});
      return true;
    }
  }
  metrics_->Inc("fedgate_service_hop_connections_total", {{"site", r.site}, {"kind", "new"}});
  auto fd = hop_->Connect(r.site, connect_ms);
  if (!fd.ok()) {
    *why = std::string(fd.status().message());
    return false;
  }
  link->tls = std::make_unique<ReplicaHop::Tls>(hop_->io(), hop_->ctx());
  link->tls->next_layer().assign(ProtocolOf(*fd), *fd);
  link->fd = *fd;
  arm_(*fd, timeout);
  beast::error_code ec;
  link->tls->handshake(asio::ssl::stream_base::client, ec);
  absl::Status peer = ec ? absl::UnavailableError(StrCat("TLS with site ", r.site, "'s gateway: ", ec.message()))
                         : hop_->CheckPeer(link->tls->native_handle(), r.site);
  if (!peer.ok()) {
    disarm_(*fd);
    *why = std::string(peer.message());
    return false;
  }
  return true;
}

void ServiceProxy::KeepLink(const Replica& r, Link& link, bool left_open, const Call& call, bool done) {
  if (link.tls == nullptr || !left_open || !call.answered || !done) return;
  disarm_(link.fd);  // before another request may take and arm it
  link.fd = -1;
  hop_->Keep(r.site, std::move(link.tls));
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
  // The next replica a connection opens to; null (with why) when none is left.
  bool reuse = true;  // until a pooled connection turns out closed
  auto next = [&](std::unique_ptr<Link>* link, std::string* why) -> std::shared_ptr<Replica> {
    const auto gbps = LinkGbps();
    while (auto r = PickReplica(route.replicas, tried, site_, gbps, failed_site)) {
      tried.insert(r->job_id);
      *link = std::make_unique<Link>();
      if (Open(*r, timeout, reuse, link->get(), why)) return r;
      spdlog::warn("service {}: replica {}: {}", route.name, r->job_id, *why);
      services_->Failed(r);  // it never saw the request: try the next one
      failed_site = r->site;
    }
    if (why->empty()) {
      *why = StrCat("no ready replica of service \"", route.name, "\" (", route.replicas.size(),
                    " running, none passing its readiness probe)");
    }
    return nullptr;
  };
  // Through a site's gateway the request keeps the service's address and
  // names its replica and tenant; straight to a replica, its own path.
  auto address = [&](auto& req, const Link& link, const Replica& r) {
    if (link.tls) {
      req.target(StrCat("/v1/services/", route.name, path));
      req.set(kTenantHeader, route.tenant);
      req.set(ReplicaHop::kReplicaHeader, r.job_id);
      req.keep_alive(true);  // the connection goes back to the pool
    } else {
      req.target(path);
      req.erase(kTenantHeader);
      req.erase(ReplicaHop::kReplicaHeader);
      req.keep_alive(false);
    }
  };
  auto unreached = [](const Link& link, const http::response_parser<http::buffer_body>& rp) {
    return link.tls && !rp.get()[ReplicaHop::kUnreachedHeader].empty();
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
    for (int reached = 0; reached < 2;) {
      std::unique_ptr<Link> link;
      auto r = next(&link, &why);
      if (!r) break;
      Disarmed disarmed{disarm_, link->fd};
      InFlight in_flight(r);
      call.site = r->site;
      address(req, *link, *r);
      beast::flat_buffer ubuf;
      http::response_parser<http::buffer_body> rp;
      ExpectAnswer(rp, call.head_request);
      link->With([&](auto& up) {
        http::write(up, req, ec);
        if (!ec) http::read_header(up, ubuf, rp, ec);
        return 0;
      });
      if (!ec && unreached(*link, rp)) {  // its site's gateway could not reach it
        why = StrCat("replica ", r->job_id, " not reached through site ", r->site, "'s gateway (HTTP ",
                     rp.get().result_int(), ")");
        spdlog::warn("service {}: {}", route.name, why);
        services_->Failed(r);
        failed_site = r->site;
        continue;
      }
      if (!ec) {
        const bool left_open = LeftOpen(rp);
        const bool keep = link->With([&](auto& up) { return Answer(metrics_, call, up, ubuf, rp); });
        disarmed.Now();
        KeepLink(*r, *link, left_open, call, rp.is_done());
        return keep;
      }
      const bool timed_out = Clock::now() - call.start >= timeout;
      if (link->reused && !timed_out) {
        // The other gateway closed the pooled connection first: the replica
        // never had the request. Once more on a new connection.
        spdlog::info("service {}: a kept connection to {}'s gateway was closed: {}", route.name, r->site,
                     ec.message());
        tried.erase(r->job_id);
        reuse = false;
        ec = {};
        continue;
      }
      why = StrCat("replica ", r->job_id, " at ", r->addr, ":", r->port, link->tls ? " (through its site's gateway)" : "",
                   ": ", timed_out ? "no answer within request_timeout" : ec.message());
      spdlog::warn("service {}: {}", route.name, why);
      if (timed_out) return Fail(call, 504, why);
      services_->Failed(r);
      failed_site = r->site;
      if (!policy.idempotent) return Fail(call, 502, StrCat(why, " (not retried: the service is not idempotent)"));
      ++reached;
      ec = {};
    }
    return Fail(call, why.find("no ready replica") != std::string::npos ? 503 : 502, why, 1);
  }
  // Large or chunked: streamed through, so tried on one replica only once sent.
  http::request_parser<http::buffer_body> p(std::move(head));
  p.body_limit(policy.max_body);
  const bool client_keep = p.get().keep_alive();
  PrepareUpstream(p.get(), path, client_ip);
  std::string why;
  std::unique_ptr<Link> link;
  reuse = false;  // a body sent cannot be sent again
  auto r = next(&link, &why);
  call.keep = false;  // an error mid-body leaves the client's stream unusable
  if (!r) return Fail(call, 503, why, 1);
  Disarmed disarmed{disarm_, link->fd};
  InFlight in_flight(r);
  call.site = r->site;
  address(p.get(), *link, *r);
  beast::error_code ec = link->With([&](auto& up) { return Relay(up, call.down, call.buf, p); });
  if (ec == http::error::body_limit) {
    return Fail(call, 413, StrCat("request body over the service's max_body of ", policy.max_body, " bytes"));
  }
  if (ec) return Fail(call, 502, StrCat("sending the request to replica ", r->job_id, ": ", ec.message()));
  beast::flat_buffer ubuf;
  http::response_parser<http::buffer_body> rp;
  ExpectAnswer(rp, call.head_request);
  link->With([&](auto& up) {
    http::read_header(up, ubuf, rp, ec);
    return 0;
  });
  if (ec || unreached(*link, rp)) {
    services_->Failed(r);
    return Fail(call, !ec || Clock::now() - call.start < timeout ? 502 : 504,
                StrCat("replica ", r->job_id, ": ", ec ? ec.message() : "not reached through its site's gateway"));
  }
  call.keep = client_keep;
  const bool left_open = LeftOpen(rp);
  const bool keep = link->With([&](auto& up) { return Answer(metrics_, call, up, ubuf, rp); });
  disarmed.Now();
  KeepLink(*r, *link, left_open, call, rp.is_done());
  return keep;
}

}  // namespace fedgate::gateway
