#include "gateway/serve/service_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "base/str_cat.h"
#include "gateway/ops/metrics.h"
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

// A connected blocking TCP socket to addr:port within timeout_ms, or -1.
int ConnectWithin(const std::string& addr, uint32_t port, int timeout_ms, std::string* err) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    family = AF_INET6;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else {
    *err = StrCat("replica address \"", addr, "\" is not an IP");
    return -1;
  }
  const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = StrCat("socket: ", std::strerror(errno));
    return -1;
  }
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&ss), len);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, timeout_ms);
    if (rc == 0) {
      ::close(fd);
      *err = StrCat("connect to ", addr, ":", port, ": timed out");
      return -1;
    }
    int so = 0;
    socklen_t sl = sizeof(so);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
    rc = so == 0 ? 0 : -1;
    errno = so;
  }
  if (rc != 0) {
    *err = StrCat("connect to ", addr, ":", port, ": ", std::strerror(errno));
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Drops hop-by-hop fields, and those the Connection field names.
void StripHopByHop(http::fields& f) {
  std::vector<std::string> named;
  const auto [first, last] = f.equal_range(http::field::connection);
  for (auto c = first; c != last; ++c) {
    std::string v(c->value());
    size_t start = 0;
    while (start <= v.size()) {
      size_t end = v.find(',', start);
      if (end == std::string::npos) end = v.size();
      std::string tok = v.substr(start, end - start);
      tok.erase(0, tok.find_first_not_of(" \t"));
      tok.erase(tok.find_last_not_of(" \t") + 1);
      if (!tok.empty()) named.push_back(tok);
      start = end + 1;
    }
  }
  for (const auto& n : named) f.erase(n);
  for (auto it = f.begin(); it != f.end();) {
    const std::string_view name(it->name_string().data(), it->name_string().size());
    it = IsHopByHop(name) ? f.erase(it) : std::next(it);
  }
}

template <class Message>
void PrepareUpstream(Message& m, const std::string& path, const std::string& client_ip) {
  StripHopByHop(m);
  m.target(path);
  const auto prior = m["X-Forwarded-For"];
  m.set("X-Forwarded-For",
        prior.empty() ? client_ip : StrCat(std::string_view(prior.data(), prior.size()), ", ", client_ip));
  m.keep_alive(false);  // one connection per request to a replica
}

// Streams a message whose header `p` holds from `in` to `out` through a
// fixed buffer (Beast's relay): nothing is held whole.
template <bool isRequest, class Out, class In>
beast::error_code Relay(Out& out, In& in, beast::flat_buffer& inbuf,
                        http::parser<isRequest, http::buffer_body>& p) {
  std::vector<char> chunk(64 * 1024);
  beast::error_code ec;
  http::serializer<isRequest, http::buffer_body> sr{p.get()};
  p.get().body().data = nullptr;
  p.get().body().size = 0;
  p.get().body().more = !p.is_done();
  http::write_header(out, sr, ec);
  if (ec) return ec;
  do {
    if (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      http::read(in, inbuf, p, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return ec;
      p.get().body().size = chunk.size() - p.get().body().size;
      p.get().body().data = chunk.data();
      p.get().body().more = !p.is_done();
    } else {
      p.get().body().data = nullptr;
      p.get().body().size = 0;
    }
    http::write(out, sr, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return ec;
  } while (!p.is_done() || !sr.is_done());
  return ec;
}

// The ready replica with the fewest requests in flight, this site's first
// on a tie, then any of the equals at random (so an idle service spreads
// its requests); null when none is ready (or all were tried).
std::shared_ptr<Replica> Pick(const ServiceRoute& route, const std::set<std::string>& tried,
                              const std::string& site) {
  std::vector<std::shared_ptr<Replica>> best;
  auto key = [&](const Replica& r) { return std::pair(r.outstanding.load(), r.site == site ? 0 : 1); };
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

ServiceProxy::ServiceProxy(ServiceController* services, Metrics* metrics, std::string site, Arm arm,
                           Disarm disarm)
    : services_(services), metrics_(metrics), site_(std::move(site)), arm_(std::move(arm)),
      disarm_(std::move(disarm)) {
  metrics_->Describe("fedgate_service_requests_total", "counter",
                     "Requests to services through this gateway, by service, the replica's site "
                     "(this one's when none was reached) and the HTTP status answered");
  metrics_->Describe("fedgate_service_request_duration_seconds", "histogram",
                     "Time from a service request's header to the end of its answer",
                     {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
}

bool ServiceProxy::Fail(Call& call, int status, const std::string& message, int retry_after_s) {
  http::response<http::string_body> res;
  res.result(static_cast<unsigned>(status));
  res.set(http::field::content_type, "application/json");
  if (retry_after_s > 0) res.set(http::field::retry_after, std::to_string(retry_after_s));
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
                         const std::string& tenant, const std::string& client_ip) {
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
    call.keep = false;
    return Fail(call, 404, std::string(route.status().message()));
  }
  call.service = target->name;
  services_->CountRequest(route->id);
  const auto& policy = route->policy;
  const auto timeout = std::chrono::milliseconds(policy.request_timeout_ms);
  const auto length = head.content_length();
  if (length && *length > policy.max_body) {
    call.keep = false;
    return Fail(call, 413, StrCat("request body of ", *length, " bytes is over the service's max_body of ",
                                  policy.max_body));
  }
  std::set<std::string> tried;
  // Connects to the next replica; null (with why) when none is left.
  auto connect = [&](std::shared_ptr<Replica>* to, std::string* why) -> int {
    while (auto r = Pick(*route, tried, site_)) {
      tried.insert(r->job_id);
      const int fd = ConnectWithin(r->addr, r->port,
                                   static_cast<int>(std::min<int64_t>(kConnectTimeoutMs, policy.request_timeout_ms)), why);
      if (fd >= 0) {
        *to = r;
        return fd;
      }
      spdlog::warn("service {}: replica {}: {}", target->name, r->job_id, *why);
      services_->Failed(r);  // it never saw the request: try the next one
    }
    if (why->empty()) {
      size_t starting = route->replicas.size();
      *why = StrCat("no ready replica of service \"", target->name, "\" (", starting,
                    " running, none passing its readiness probe)");
    }
    return -1;
  };
  // The answer of a replica, streamed to the client: from here on the
  // request is the replica's.
  auto answer = [&](tcp::socket& up, beast::flat_buffer& ubuf,
                    http::response_parser<http::buffer_body>& rp) -> bool {
    auto& res = rp.get();
    const int code = static_cast<int>(res.result_int());
    StripHopByHop(res);
    const bool bodyless = call.head_request || code == 204 || code == 304 || code / 100 == 1;
    if (!bodyless && !rp.chunked() && !rp.content_length()) res.chunked(true);  // ends at EOF upstream
    res.keep_alive(call.keep);
    beast::error_code ec = Relay(call.down, up, ubuf, rp);
    metrics_->Inc("fedgate_service_requests_total",
                  {{"service", call.service}, {"site", call.site}, {"code", std::to_string(code)}});
    metrics_->Observe("fedgate_service_request_duration_seconds", {{"service", call.service}},
                      std::chrono::duration<double>(Clock::now() - call.start).count());
    if (ec) {
      spdlog::warn("service {}: answer cut: {}", call.service, ec.message());
      return false;
    }
    return call.keep;
  };
  const bool small = !head.chunked() && (!length || *length <= kReplayBytes);
  if (small) {
    // Read whole (at most 1 MiB), so it can go to a second replica.
    http::request_parser<http::string_body> full(std::move(head));
    full.body_limit(kReplayBytes);
    beast::error_code ec;
    http::read(down, buf, full, ec);
    if (ec) {
      call.keep = false;
      return Fail(call, 400, StrCat("reading the request body: ", ec.message()));
    }
    http::request<http::string_body> req = full.release();
    PrepareUpstream(req, target->path, client_ip);
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
      rp.body_limit(std::numeric_limits<std::uint64_t>::max());
      if (call.head_request) rp.skip(true);
      http::write(up, req, ec);
      if (!ec) http::read_header(up, ubuf, rp, ec);
      if (!ec) {
        const bool keep = answer(up, ubuf, rp);
        disarm_(fd);
        return keep;
      }
      disarm_(fd);
      const bool timed_out = Clock::now() - call.start >= timeout;
      why = StrCat("replica ", r->job_id, " at ", r->addr, ":", r->port, ": ",
                   timed_out ? "no answer within request_timeout" : ec.message());
      spdlog::warn("service {}: {}", target->name, why);
      if (timed_out) return Fail(call, 504, why);
      services_->Failed(r);
      if (!policy.idempotent) return Fail(call, 502, StrCat(why, " (not retried: the service is not idempotent)"));
    }
    return Fail(call, why.find("no ready replica") != std::string::npos ? 503 : 502, why, 1);
  }
  // Large or chunked: streamed through, so tried on one replica only once sent.
  http::request_parser<http::buffer_body> p(std::move(head));
  p.body_limit(policy.max_body);
  PrepareUpstream(p.get(), target->path, client_ip);
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
  struct Cut {
    Disarm& d;
    int fd;
    ~Cut() { d(fd); }
  } cut{disarm_, fd};
  beast::error_code ec = Relay(up, down, buf, p);
  if (ec == http::error::body_limit) {
    return Fail(call, 413, StrCat("request body over the service's max_body of ", policy.max_body, " bytes"));
  }
  if (ec) return Fail(call, 502, StrCat("sending the request to replica ", r->job_id, ": ", ec.message()));
  beast::flat_buffer ubuf;
  http::response_parser<http::buffer_body> rp;
  rp.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (call.head_request) rp.skip(true);
  http::read_header(up, ubuf, rp, ec);
  if (ec) {
    services_->Failed(r);
    return Fail(call, Clock::now() - call.start >= timeout ? 504 : 502,
                StrCat("replica ", r->job_id, ": ", ec.message()));
  }
  call.keep = p.get().keep_alive();
  return answer(up, ubuf, rp);
}

}  // namespace fedgate::gateway
