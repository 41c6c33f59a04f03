#include "gateway/serve/replica_hop.h"

#include <poll.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "base/host_port.h"
#include "base/str_cat.h"
#include "gateway/config/config.h"
#include "gateway/peering/core.h"
#include "gateway/security/certs.h"
#include "gateway/security/identity.h"
#include "gateway/serve/http_relay.h"
#include "gateway/serve/service_controller.h"
#include "gateway/serve/service_proxy.h"

namespace fedgate::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// `site`'s gateway's REST endpoint, resolved; UNAVAILABLE (saying why) if unknown.
absl::StatusOr<tcp::endpoint> Endpoint(GatewayCore* core, const std::string& site) {
  const std::string at = core->SiteHttpEndpoint(site);
  if (at.empty()) return absl::UnavailableError(StrCat("site ", site, " advertises no REST endpoint"));
  const auto [host, port_text] = SplitHostPort(at);
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::error_code ec;
  auto found = resolver.resolve(std::string(host), std::string(port_text), ec);
  if (ec || found.empty()) return absl::UnavailableError(StrCat("site ", site, ": cannot resolve ", at));
  return found.begin()->endpoint();
}

}  // namespace

ReplicaHop::ReplicaHop(GatewayCore* core, const Config& config)
    : core_(core), federation_(config.federation) {
  if (core_ == nullptr) return;
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  beast::error_code ec;
  ctx->set_options(asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                   asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  ctx->use_certificate_chain_file(config.tls.cert, ec);
  if (!ec) ctx->use_private_key_file(config.tls.key, asio::ssl::context::pem, ec);
  if (!ec) ctx->load_verify_file(config.tls.ca, ec);
  if (ec) return;
  ctx->set_verify_mode(asio::ssl::verify_peer);
  ctx_ = std::move(ctx);
}

ReplicaHop::~ReplicaHop() = default;

absl::StatusOr<int> ReplicaHop::Connect(const std::string& site, int timeout_ms) {
  auto ep = Endpoint(core_, site);
  if (!ep.ok()) return ep.status();
  std::string why;
  const int fd = ConnectWithin(ep->address().to_string(), ep->port(), timeout_ms, &why);
  if (fd < 0) return absl::UnavailableError(StrCat("the gateway of site ", site, ": ", why));
  return fd;
}

std::unique_ptr<ReplicaHop::Tls> ReplicaHop::TakeIdle(const std::string& site) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<Tls>> stale;  // closed after the lock
  std::unique_ptr<Tls> out;
  {
    std::lock_guard lock(mu_);
    auto it = idle_.find(site);
    if (it == idle_.end()) return nullptr;
    auto& q = it->second;
    while (!q.empty() && out == nullptr) {
      auto [since, s] = std::move(q.back());  // the most recent: least likely closed
      q.pop_back();
      pollfd p{s->next_layer().native_handle(), POLLIN, 0};
      // Readable while idle: the other end closed it (or broke the protocol).
      if (now - since > kIdleFor || ::poll(&p, 1, 0) != 0) {
        stale.push_back(std::move(s));
      } else {
        out = std::move(s);
      }
    }
    while (!q.empty() && now - q.front().first > kIdleFor) {
      stale.push_back(std::move(q.front().second));
      q.pop_front();
    }
  }
  return out;
}

void ReplicaHop::Keep(const std::string& site, std::unique_ptr<Tls> s) {
  std::unique_ptr<Tls> dropped;
  std::lock_guard lock(mu_);
  auto& q = idle_[site];
  if (q.size() >= kMaxIdlePerSite) {
    dropped = std::move(q.front().second);
    q.pop_front();
  }
  q.emplace_back(std::chrono::steady_clock::now(), std::move(s));
}

absl::Status ReplicaHop::CheckPeer(ssl_st* ssl, const std::string& site) const {
  const std::string pem = PeerCertificatePem(ssl);
  auto peer = pem.empty() ? absl::StatusOr<Identity>(absl::UnauthenticatedError("no certificate"))
                          : IdentityFromCertPem(pem);
  if (!peer.ok() || peer->role != Role::kGateway || peer->site != site || peer->federation != federation_) {
    return absl::FailedPreconditionError(StrCat("the endpoint site ", site, " advertises is not its gateway"));
  }
  return absl::OkStatus();
}

absl::Status ReplicaHop::Probe(const Replica& r, const std::string& path, int64_t timeout_ms) {
  if (!usable()) return absl::FailedPreconditionError("no TLS files to reach other gateways with");
  auto ep = Endpoint(core_, r.site);
  if (!ep.ok()) return ep.status();
  asio::io_context io;
  beast::ssl_stream<beast::tcp_stream> stream(io, *ctx_);
  beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(timeout_ms));
  http::request<http::empty_body> req{http::verb::get,
                                      StrCat("/v1/services/", r.service, path), 11};
  req.set(http::field::host, ep->address().to_string());
  req.set(http::field::user_agent, "fedgate-readiness");
  req.set(ServiceProxy::kTenantHeader, r.tenant);
  req.set(kReplicaHeader, r.job_id);
  http::response_parser<http::string_body> res;
  res.body_limit(1 << 20);
  beast::flat_buffer buf;
  beast::error_code ec;
  absl::Status peer_ok = absl::OkStatus();
  auto read = [&](beast::error_code e, size_t) {
    if (e) {
      ec = e;
      return;
    }
    http::async_read(stream, buf, res, [&](beast::error_code e2, size_t) { ec = e2; });
  };
  auto shaken = [&](beast::error_code e) {
    if (e) {
      ec = e;
      return;
    }
    peer_ok = CheckPeer(stream.native_handle(), r.site);
    if (peer_ok.ok()) http::async_write(stream, req, read);
  };
  beast::get_lowest_layer(stream).async_connect(*ep, [&](beast::error_code e) {
    if (e) {
      ec = e;
      return;
    }
    stream.async_handshake(asio::ssl::stream_base::client, shaken);
  });
  io.run();
  if (!peer_ok.ok()) return peer_ok;
  const std::string what = StrCat("replica ", r.job_id, " through site ", r.site, "'s gateway, ", path);
  if (ec) return absl::UnavailableError(StrCat(what, ": ", ec.message()));
  const unsigned code = res.get().result_int();
  if (code / 100 != 2) {
    const bool unreached = !res.get()[kUnreachedHeader].empty();
    return absl::UnavailableError(StrCat(what, ": HTTP ", code, unreached ? " (replica not reached)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace fedgate::gateway
