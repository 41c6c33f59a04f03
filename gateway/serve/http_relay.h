// HTTP/1.1 relaying with Beast, as the service proxy does it: a TCP connect
// with a deadline, hop-by-hop headers dropped, and a message streamed from
// one stream to another through a fixed buffer (Beast's relay example), so
// that nothing is held whole.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "base/str_cat.h"

namespace fedgate::gateway {

// A connected blocking TCP socket to addr (an IP) and port within
// timeout_ms, with TCP_NODELAY; -1 and *err otherwise.
int ConnectWithin(const std::string& addr, uint32_t port, int timeout_ms, std::string* err);

// The protocol (v4 or v6) of a connected socket, to hand it to Asio.
boost::asio::ip::tcp ProtocolOf(int fd);

// Drops hop-by-hop fields, and those the Connection field names.
void StripHopByHop(boost::beast::http::fields& f);

// Appends the client to X-Forwarded-For.
template <class Message>
void AddForwardedFor(Message& m, const std::string& client_ip) {
  const auto prior = m["X-Forwarded-For"];
  m.set("X-Forwarded-For",
        prior.empty() ? client_ip : StrCat(std::string_view(prior.data(), prior.size()), ", ", client_ip));
}

// Streams a message whose header `p` holds from `in` to `out` through a
// fixed buffer (Beast's relay): nothing is held whole.
template <bool isRequest, class Out, class In>
boost::beast::error_code Relay(Out& out, In& in, boost::beast::flat_buffer& inbuf,
                        boost::beast::http::parser<isRequest, boost::beast::http::buffer_body>& p) {
  std::vector<char> chunk(64 * 1024);
  boost::beast::error_code ec;
  boost::beast::http::serializer<isRequest, boost::beast::http::buffer_body> sr{p.get()};
  p.get().body().data = nullptr;
  p.get().body().size = 0;
  p.get().body().more = !p.is_done();
  boost::beast::http::write_header(out, sr, ec);
  if (ec) return ec;
  do {
    if (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      boost::beast::http::read(in, inbuf, p, ec);
      if (ec == boost::beast::http::error::need_buffer) ec = {};
      if (ec) return ec;
      p.get().body().size = chunk.size() - p.get().body().size;
      p.get().body().data = chunk.data();
      p.get().body().more = !p.is_done();
    } else {
      p.get().body().data = nullptr;
      p.get().body().size = 0;
    }
    boost::beast::http::write(out, sr, ec);
    if (ec == boost::beast::http::error::need_buffer) ec = {};
    if (ec) return ec;
  } while (!p.is_done() || !sr.is_done());
  return ec;
}

}  // namespace fedgate::gateway
