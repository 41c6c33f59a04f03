#include "gateway/kube/kube_client.h"

#include <limits>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "base/host_port.h"
#include "base/str_cat.h"

namespace fedgate::gateway::kube {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

struct KubeClient::Impl {
  std::string host, port;
  ssl::context ctx{ssl::context::tls_client};
};

KubeClient::KubeClient(KubeAccess access, KubeClientOptions options, std::unique_ptr<Impl> impl)
    : access_(std::move(access)), options_(options), impl_(std::move(impl)) {}
KubeClient::~KubeClient() = default;

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::Make(KubeAccess access,
                                                             KubeClientOptions options) {
  auto impl = std::make_unique<Impl>();
  if (access.server.rfind("https://", 0) != 0) {
    return absl::InvalidArgumentError(StrCat("kubernetes server \"", access.server,
                                             "\" is not an https:// URL"));
  }
  std::string hostport = access.server.substr(8);
  if (auto slash = hostport.find('/'); slash != std::string::npos) hostport.resize(slash);
  if (hostport.find(':') == std::string::npos ||
      (hostport.front() == '[' && hostport.find("]:") == std::string::npos)) {
    hostport += ":443";
  }
  auto [host, port] = SplitHostPort(hostport);
  if (host.empty() || port.empty()) {
    return absl::InvalidArgumentError(StrCat("kubernetes server \"", access.server, "\": no host"));
  }
  impl->host = host;
  impl->port = port;
  boost::system::error_code ec;
  if (access.insecure_skip_verify) {
    impl->ctx.set_verify_mode(ssl::verify_none);
  } else {
    impl->ctx.set_verify_mode(ssl::verify_peer);
    if (access.ca_pem.empty()) {
      impl->ctx.set_default_verify_paths(ec);
    } else {
      impl->ctx.add_certificate_authority(asio::buffer(access.ca_pem), ec);
    }
    if (ec) {
      return absl::InvalidArgumentError(StrCat("kubernetes CA of ", access.source, ": ", ec.message()));
    }
  }
  if (!access.cert_pem.empty()) {
    impl->ctx.use_certificate_chain(asio::buffer(access.cert_pem), ec);
    if (!ec) impl->ctx.use_private_key(asio::buffer(access.key_pem), ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          StrCat("kubernetes client certificate of ", access.source, ": ", ec.message()));
    }
  }
  return std::unique_ptr<KubeClient>(new KubeClient(std::move(access), options, std::move(impl)));
}

namespace {

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// Runs one asynchronous operation to its end. Asynchronous because only
// those honour tcp_stream's deadline (expires_after); synchronous reads
// would wait for a hung server for ever.
// `cancel`, where given, is looked at every 100 ms and aborts the operation.
template <typename Start>
boost::system::error_code Sync(asio::io_context& io, Start start,
                               const std::atomic<bool>* cancel = nullptr,
                               beast::tcp_stream* stream = nullptr) {
  boost::system::error_code result = asio::error::would_block;
  start([&](boost::system::error_code ec, auto&&...) { result = ec; });
  io.restart();
  while (result == asio::error::would_block) {
    io.run_one_for(std::chrono::milliseconds(100));
    if (cancel != nullptr && cancel->load() && stream != nullptr &&
        result == asio::error::would_block) {
      stream->cancel();
    }
  }
  return result;
}

absl::Status Transport(const std::string& server, const char* step, const boost::system::error_code& ec) {
  const std::string msg = StrCat("kubernetes API ", server, ": ", step, ": ", ec.message());
  if (ec == beast::error::timeout) return absl::DeadlineExceededError(msg);
  return absl::UnavailableError(msg);
}

// Connects and shakes hands within the connect deadline.
absl::Status Open(asio::io_context& io, TlsStream& s, const std::string& host, const std::string& port,
                  const std::string& server, std::chrono::milliseconds connect_timeout,
                  bool verify) {
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(host, port, ec);
  if (ec) return Transport(server, "resolve", ec);
  beast::get_lowest_layer(s).expires_after(connect_timeout);
  ec = Sync(io, [&](auto h) { beast::get_lowest_layer(s).async_connect(results, h); });
  if (ec) return Transport(server, "connect", ec);
  boost::system::error_code ignored;
  asio::ip::make_address(host, ignored);
  if (ignored && !SSL_set_tlsext_host_name(s.native_handle(), host.c_str())) {
    return absl::InternalError("kubernetes API: SNI");
  }
  if (verify) s.set_verify_callback(ssl::host_name_verification(host));
  ec = Sync(io, [&](auto h) { s.async_handshake(ssl::stream_base::client, h); });
  if (ec) return Transport(server, "TLS handshake", ec);
  return absl::OkStatus();
}

// Host, user agent and the bearer token (read again: it may rotate).
template <typename Request>
void Headers(Request& req, const std::string& host, const KubeAccess& access) {
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "fedgate");
  if (auto token = CurrentToken(access); !token.empty()) {
    req.set(http::field::authorization, "Bearer " + token);
  }
}

http::verb Verb(const std::string& m) {
  if (m == "POST") return http::verb::post;
  if (m == "PUT") return http::verb::put;
  if (m == "PATCH") return http::verb::patch;
  if (m == "DELETE") return http::verb::delete_;
  return http::verb::get;
}

}  // namespace

absl::StatusOr<KubeResponse> KubeClient::Call(const std::string& method, const std::string& path,
                                              const std::string& body,
                                              const std::string& content_type) const {
  auto r = CallOnce(method, path, body, content_type);
  Observe(method, r.ok() ? absl::StatusOr<int>(r->status) : absl::StatusOr<int>(r.status()));
  return r;
}

void KubeClient::Observe(const std::string& method, const absl::StatusOr<int>& code) const {
  if (!observer_) return;
  if (code.ok()) {
    observer_(method, std::to_string(*code));
  } else {
    observer_(method, code.status().code() == absl::StatusCode::kDeadlineExceeded ? "timeout"
                      : code.status().code() == absl::StatusCode::kUnavailable   ? "unreachable"
                                                                                 : "error");
  }
}

absl::StatusOr<KubeResponse> KubeClient::CallOnce(const std::string& method, const std::string& path,
                                                  const std::string& body,
                                                  const std::string& content_type) const {
  asio::io_context io;
  TlsStream s(io, impl_->ctx);
  if (auto st = Open(io, s, impl_->host, impl_->port, access_.server, options_.connect_timeout,
                     !access_.insecure_skip_verify);
      !st.ok()) {
    return st;
  }
  http::request<http::string_body> req{Verb(method), path, 11};
  Headers(req, impl_->host, access_);
  req.set(http::field::accept, "application/json");
  if (!body.empty()) {
    req.set(http::field::content_type, content_type);
    req.body() = body;
  }
  req.prepare_payload();
  boost::system::error_code ec;
  beast::get_lowest_layer(s).expires_after(options_.request_timeout);
  ec = Sync(io, [&](auto h) { http::async_write(s, req, h); });
  if (ec) return Transport(access_.server, "send", ec);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 * 1024 * 1024);
  ec = Sync(io, [&](auto h) { http::async_read(s, buf, parser, h); });
  if (ec) return Transport(access_.server, StrCat(method, " ", path).c_str(), ec);
  const auto& res = parser.get();
  KubeResponse out;
  out.status = static_cast<int>(res.result_int());
  out.body = res.body();
  out.retry_after = std::string(res[http::field::retry_after]);
  out.content_type = std::string(res[http::field::content_type]);
  beast::get_lowest_layer(s).expires_after(std::chrono::seconds(1));
  (void)Sync(io, [&](auto h) { s.async_shutdown(h); });  // best effort: the answer is in
  return out;
}

absl::StatusOr<int> KubeClient::Watch(const std::string& path, std::chrono::milliseconds timeout,
                                      const std::function<bool(const Json& event)>& on_event,
                                      const std::atomic<bool>* cancel) const {
  std::string pending;
  return Stream(path, timeout, [&](std::string_view bytes) {
    pending.append(bytes);
    size_t used = 0;
    for (size_t nl; (nl = pending.find('\n', used)) != std::string::npos; used = nl + 1) {
      auto ev = ParseJson(std::string_view(pending).substr(used, nl - used));
      if (ev.ok() && !on_event(*ev)) return false;
    }
    pending.erase(0, used);
    return true;
  }, cancel);
}

absl::StatusOr<int> KubeClient::Stream(const std::string& path, std::chrono::milliseconds timeout,
                                       const std::function<bool(std::string_view bytes)>& on_bytes,
                                       const std::atomic<bool>* cancel) const {
  int status = 0;  // the answer's HTTP code, once its header is in
  auto r = StreamOnce(path, timeout, on_bytes, cancel, &status);
  Observe("GET", status != 0 ? absl::StatusOr<int>(status) : r);
  return r;
}

absl::StatusOr<int> KubeClient::StreamOnce(const std::string& path, std::chrono::milliseconds timeout,
                                           const std::function<bool(std::string_view bytes)>& on_bytes,
                                           const std::atomic<bool>* cancel, int* http_status) const {
  asio::io_context io;
  TlsStream s(io, impl_->ctx);
  if (auto st = Open(io, s, impl_->host, impl_->port, access_.server, options_.connect_timeout,
                     !access_.insecure_skip_verify);
      !st.ok()) {
    return st;
  }
  http::request<http::empty_body> req{http::verb::get, path, 11};
  Headers(req, impl_->host, access_);
  boost::system::error_code ec;
  auto& low = beast::get_lowest_layer(s);
  low.expires_after(timeout);
  ec = Sync(io, [&](auto h) { http::async_write(s, req, h); });
  if (ec) return Transport(access_.server, "send", ec);
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // not boost::none: Beast 1.74 compares a Content-Length with it and refuses every one
  ec = Sync(io, [&](auto h) { http::async_read_header(s, buf, parser, h); });
  if (ec) return Transport(access_.server, StrCat("GET ", path).c_str(), ec);
  const int status = static_cast<int>(parser.get().result_int());
  *http_status = status;
  std::string error_body;
  char chunk[64 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    ec = Sync(io, [&](auto h) { http::async_read_some(s, buf, parser, h); }, cancel, &low);
    if (ec == http::error::need_buffer) ec = {};
    if (ec == beast::error::timeout || (cancel && cancel->load())) break;  // its time is up
    if (ec) {
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::ssl::error::stream_truncated) {
        break;
      }
      return Transport(access_.server, StrCat("GET ", path).c_str(), ec);
    }
    const size_t n = sizeof(chunk) - parser.get().body().size;
    if (status != 200) {
      if (error_body.size() < 64 * 1024) error_body.append(chunk, n);
    } else if (n > 0 && !on_bytes(std::string_view(chunk, n))) {
      break;
    }
  }
  if (status != 200) {
    KubeResponse r;
    r.status = status;
    r.body = error_body;
    r.retry_after = std::string(parser.get()[http::field::retry_after]);
    return ApiError(r, StrCat("GET ", path));
  }
  return 200;
}

absl::Status ApiError(const KubeResponse& r, const std::string& what) {
  std::string reason, message;
  if (auto j = ParseJson(r.body); j.ok()) {
    reason = FindString(*j, {"reason"});
    message = FindString(*j, {"message"});
  }
  if (message.empty()) message = r.body.substr(0, 200);
  std::string text = StrCat(what, ": HTTP ", r.status, reason.empty() ? "" : StrCat(" ", reason),
                            message.empty() ? "" : StrCat(": ", message));
  if (!r.retry_after.empty()) text += StrCat(" (retry after ", r.retry_after, "s)");
  switch (r.status) {
    case 400: case 422: return absl::InvalidArgumentError(text);
    case 401: return absl::UnauthenticatedError(text);
    case 403: return absl::PermissionDeniedError(text);
    case 404: return absl::NotFoundError(text);
    case 409: return reason == "AlreadyExists" ? absl::AlreadyExistsError(text) : absl::AbortedError(text);
    case 410: return absl::OutOfRangeError(text);
    case 429: return absl::ResourceExhaustedError(text);
    default: return r.status >= 500 ? absl::UnavailableError(text) : absl::UnknownError(text);
  }
}

absl::StatusOr<Json> JsonOf(const absl::StatusOr<KubeResponse>& r, const std::string& what) {
  if (!r.ok()) return r.status();
  if (r->status < 200 || r->status >= 300) return ApiError(*r, what);
  auto j = ParseJson(r->body);
  if (!j.ok()) return absl::UnavailableError(StrCat(what, ": answer is ", j.status().message()));
  return j;
}

std::string QueryEscape(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace fedgate::gateway::kube
