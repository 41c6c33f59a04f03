#include "gateway/serve/http_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gateway/serve/service_target.h"

namespace fedgate::gateway {

namespace http = boost::beast::http;

boost::asio::ip::tcp ProtocolOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && ss.ss_family == AF_INET6) {
    return boost::asio::ip::tcp::v6();
  }
  return boost::asio::ip::tcp::v4();
}

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

}  // namespace fedgate::gateway
