// The service proxy's parts shared by its files: one request's state, and
// how an answer is streamed back (service_proxy.cc, service_proxy_hops.cc).
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include "gateway/ops/metrics.h"
#include "gateway/serve/http_relay.h"
#include "gateway/serve/replica_hop.h"
#include "gateway/serve/service_proxy.h"

namespace fedgate::gateway {

struct ServiceProxy::Call {
  Call(Downstream& d, boost::beast::flat_buffer& b) : down(d), buf(b) {}
  Downstream& down;
  boost::beast::flat_buffer& buf;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::string service = "-";
  std::string site;
  bool head_request = false;
  bool keep = false;
  bool unreached = false;  // a failure answered before the replica saw the request
  bool answered = false;   // an answer was relayed whole
};

namespace proxy_parts {

namespace http = boost::beast::http;

constexpr int kConnectTimeoutMs = 2000;

// The request as a replica receives it: its path, no hop-by-hop fields and
// none of fedgate's own, the client added to X-Forwarded-For.
template <class Message>
void PrepareUpstream(Message& m, const std::string& path, const std::string& client_ip) {
  StripHopByHop(m);
  m.erase(ServiceProxy::kTenantHeader);
  m.erase(ReplicaHop::kReplicaHeader);
  m.target(path);
  AddForwardedFor(m, client_ip);
  m.keep_alive(false);  // one connection per request to a replica
}

// The answer whose header `rp` holds, streamed from `up` to the client:
// from here on the request is the replica's (or the coordinator's).
template <class Up>
bool Answer(Metrics* metrics, ServiceProxy::Call& call, Up& up, boost::beast::flat_buffer& ubuf,
            http::response_parser<http::buffer_body>& rp) {
  auto& res = rp.get();
  const int code = static_cast<int>(res.result_int());
  StripHopByHop(res);
  const bool bodyless = call.head_request || code == 204 || code == 304 || code / 100 == 1;
  if (!bodyless && !rp.chunked() && !rp.content_length()) res.chunked(true);  // ends at EOF upstream
  res.keep_alive(call.keep);
  boost::beast::error_code ec = Relay(call.down, up, ubuf, rp);
  call.answered = !ec;
  metrics->Inc("fedgate_service_requests_total",
               {{"service", call.service}, {"site", call.site}, {"code", std::to_string(code)}});
  metrics->Observe("fedgate_service_request_duration_seconds", {{"service", call.service}},
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - call.start).count());
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
  void Now() {
    if (fd >= 0) disarm(fd);
    fd = -1;
  }
  ~Disarmed() { Now(); }
};

// Whether the other gateway left a hop's connection open after an answer
// (read before Answer rewrites the header for the client).
inline bool LeftOpen(const http::response_parser<http::buffer_body>& rp) {
  return rp.get().keep_alive() && (rp.chunked() || rp.content_length().has_value());
}

// An answer's parser: no size limit (answers stream through), no body
// after a HEAD.
inline void ExpectAnswer(http::response_parser<http::buffer_body>& rp, bool head_request) {
  rp.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (head_request) rp.skip(true);
}

// A client waiting for "100 Continue" before its body gets it here, once
// the request is known to be taken; the replica is not asked.
inline void Continue(ServiceProxy::Call& call, ServiceProxy::Head& head) {
  const auto expect = head.get()[http::field::expect];
  if (!boost::beast::iequals(expect, "100-continue")) return;
  http::response<http::empty_body> cont{http::status::continue_, 11};
  boost::beast::error_code ec;
  http::write(call.down, cont, ec);
  head.get().erase(http::field::expect);
}

}  // namespace proxy_parts
}  // namespace fedgate::gateway
