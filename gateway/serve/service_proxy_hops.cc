// The service proxy's hops between gateways: a request for a service
// coordinated elsewhere goes to its coordinator, and a coordinator's request
// for a replica of this site goes on to that replica (docs/services.md).
#include <spdlog/spdlog.h>

#include <limits>

#include "absl/status/status.h"
#include "base/str_cat.h"
#include "gateway/serve/http_relay.h"
#include "gateway/serve/replica_hop.h"
#include "gateway/serve/service_proxy.h"
#include "gateway/serve/service_proxy_call.h"

namespace fedgate::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace proxy_parts;  // NOLINT: the proxy's own parts

template <class Up, class Parser>
bool ServiceProxy::Exchange(Call& call, Up& up, Parser& p, const std::string& to, bool keep) {
  beast::error_code ec = Relay(up, call.down, call.buf, p);
  if (ec) return Fail(call, 502, StrCat("sending the request to ", to, ": ", ec.message()));
  beast::flat_buffer ubuf;
  http::response_parser<http::buffer_body> rp;
  ExpectAnswer(rp, call.head_request);
  http::read_header(up, ubuf, rp, ec);
  if (ec) return Fail(call, 502, StrCat(to, ": ", ec.message()));
  call.keep = keep;
  return Answer(metrics_, call, up, ubuf, rp);
}

bool ServiceProxy::ToCoordinator(Call& call, Head&& head, const std::string& tenant,
                                 const std::string& client_ip, const std::string& site) {
  call.site = site;
  const bool client_keep = call.keep;
  call.keep = false;  // until the answer is whole
  auto fd = hop_->Connect(site, kConnectTimeoutMs);
  if (!fd.ok()) {
    return Fail(call, 503, StrCat("the service's coordinator ", site, ": ", fd.status().message()), 1);
  }
  asio::io_context io;
  ReplicaHop::Tls up(io, hop_->ctx());
  up.next_layer().assign(ProtocolOf(*fd), *fd);
  arm_(*fd, kRelayTimeout);
  const Disarmed disarmed{disarm_, *fd};
  beast::error_code ec;
  up.handshake(asio::ssl::stream_base::client, ec);
  if (ec) return Fail(call, 502, StrCat("TLS with the service's coordinator ", site, ": ", ec.message()));
  // Only the coordinator's own gateway gets the tenant's request.
  if (auto st = hop_->CheckPeer(up.native_handle(), site); !st.ok()) {
    return Fail(call, 502, std::string(st.message()));
  }
  Continue(call, head);
  http::request_parser<http::buffer_body> p(std::move(head));
  p.body_limit(std::numeric_limits<std::uint64_t>::max());  // the coordinator applies max_body
  StripHopByHop(p.get());
  p.get().erase(ReplicaHop::kReplicaHeader);
  p.get().set(kTenantHeader, tenant);
  AddForwardedFor(p.get(), client_ip);
  p.get().keep_alive(false);
  return Exchange(call, up, p, StrCat("the service's coordinator ", site), client_keep);
}

bool ServiceProxy::ToLocalReplica(Call& call, Head&& head, const std::string& from,
                                  const std::string& tenant, const std::string& job_id,
                                  const std::string& path, const std::string& client_ip) {
  call.site = site_;
  const bool coordinator_keep = call.keep;  // it pools its connections to this gateway
  call.keep = false;      // until the answer is whole
  call.unreached = true;  // until the replica has the request
  if (!local_) return Fail(call, 404, "this gateway relays no requests to replicas");
  auto where = local_(from, tenant, job_id);
  if (!where.ok()) {
    return Fail(call, absl::IsPermissionDenied(where.status()) ? 403 : 404, std::string(where.status().message()));
  }
  const auto& [addr, port] = *where;
  std::string why;
  const int fd = ConnectWithin(addr, port, kConnectTimeoutMs, &why);
  if (fd < 0) {
    spdlog::warn("service {}: replica {} (for {}): {}", call.service, job_id, from, why);
    return Fail(call, 502, StrCat("replica ", job_id, " at ", addr, ":", port, ": ", why));
  }
  asio::io_context io;
  tcp::socket up(io);
  up.assign(ProtocolOf(fd), fd);
  arm_(fd, kRelayTimeout);  // the coordinator cuts its side at the request's own timeout
  const Disarmed disarmed{disarm_, fd};
  call.unreached = false;
  http::request_parser<http::buffer_body> p(std::move(head));
  p.body_limit(std::numeric_limits<std::uint64_t>::max());  // the coordinator applied max_body
  PrepareUpstream(p.get(), path, client_ip);
  return Exchange(call, up, p, StrCat("replica ", job_id), coordinator_keep);
}

}  // namespace fedgate::gateway
