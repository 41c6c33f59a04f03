#include "transport/tcp_transport.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <thread>

#include "base/str_cat.h"
#include "transport/control.h"

namespace fedgate::transport {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kMaxWriteChunk = 4 << 20;
constexpr size_t kMinReadChunk = 128 << 10;
constexpr int kAcceptTimeoutMs = 10000;
constexpr int kIoTimeoutMs = 30000;

void NoDelay(tcp::socket& s) {
  int one = 1;
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// asio::write caps each send at 64 KiB; big messages need big sends.
bool WriteAll(tcp::socket& s, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(s.native_handle(), data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

double SecondsBetween(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class TcpClient final : public ClientTransport {
 public:
  explicit TcpClient(uint32_t streams) : streams_(streams) {}

  absl::Status Setup(const v1::BenchWelcome& welcome, const std::string& host) override {
    if (welcome.data_port() == 0) return absl::InvalidArgumentError("server sent no data port");
    host_ = host;
    port_ = static_cast<uint16_t>(welcome.data_port());
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<double>> Round(const v1::BenchRound& round,
                                            const std::function<bool()>& stop) override {
    std::vector<tcp::socket> socks;
    tcp::resolver resolver(io_);
    boost::system::error_code ec;
    auto endpoints = resolver.resolve(host_, std::to_string(port_), ec);
    if (ec) return absl::UnavailableError(StrCat("cannot resolve ", host_, ": ", ec.message()));
    for (uint32_t i = 0; i < streams_; ++i) {
      tcp::socket s(io_);
      asio::connect(s, endpoints, ec);
      if (ec) {
        return absl::UnavailableError(
            StrCat("data stream ", i, " to ", host_, ":", port_, ": ", ec.message()));
      }
      if (i == 0 && round.latency_iterations() > 0) NoDelay(s);
      SetSocketTimeouts(s, kIoTimeoutMs);
      socks.push_back(std::move(s));
    }
    const size_t size = round.size_bytes();
    std::vector<double> rtts;
    if (round.latency_iterations() > 0) {
      std::vector<char> out(size, 'p'), in(size);
      for (uint32_t i = 0; i < round.latency_iterations(); ++i) {
        const auto t0 = SteadyClock::now();
        asio::write(socks[0], asio::buffer(out), ec);
        if (!ec) asio::read(socks[0], asio::buffer(in), ec);
        if (ec) return absl::UnavailableError(StrCat("latency ping-pong: ", ec.message()));
        rtts.push_back(SecondsBetween(t0, SteadyClock::now()) * 1e6);
      }
    }
    if (round.duration_ms() > 0) {
      std::atomic<bool> failed{false};
      std::vector<std::thread> writers;
      for (auto& s : socks) {
        writers.emplace_back([&, sock = &s] {
          std::vector<char> buf(std::min(size, kMaxWriteChunk), 'x');
          while (!stop()) {
            for (size_t left = size; left > 0 && !stop();) {
              const size_t n = std::min(left, buf.size());
              if (!WriteAll(*sock, buf.data(), n)) {
                failed = true;
                return;
              }
              left -= n;
            }
          }
        });
      }
      for (auto& w : writers) w.join();
      if (failed && !stop()) return absl::UnavailableError("a data stream failed while sending");
    }
    for (auto& s : socks) {
      s.shutdown(tcp::socket::shutdown_send, ec);
      s.close(ec);
    }
    return rtts;
  }

 private:
  asio::io_context io_;
  uint32_t streams_;
  std::string host_;
  uint16_t port_ = 0;
};

class TcpServer final : public ServerTransport {
 public:
  absl::Status Setup(const v1::BenchHello& hello, v1::BenchWelcome* welcome) override {
    if (hello.streams() == 0 || hello.streams() > 128) {
      return absl::InvalidArgumentError(StrCat("streams must be 1..128, got ", hello.streams()));
    }
    streams_ = hello.streams();
    boost::system::error_code ec;
    tcp::endpoint ep(asio::ip::address_v6::any(), 0);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::ip::v6_only(false), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return absl::UnavailableError(StrCat("cannot open a data listener: ", ec.message()));
    welcome->set_data_port(acceptor_.local_endpoint().port());
    return absl::OkStatus();
  }

  absl::Status Round(const v1::BenchRound& round,
                     const std::function<void(const v1::BenchRoundResult&)>& report) override {
    std::vector<tcp::socket> socks;
    for (uint32_t i = 0; i < streams_; ++i) {
      pollfd pfd{acceptor_.native_handle(), POLLIN, 0};
      if (::poll(&pfd, 1, kAcceptTimeoutMs) <= 0) {
        return absl::DeadlineExceededError(StrCat("data stream ", i, " never connected"));
      }
      boost::system::error_code ec;
      tcp::socket s(io_);
      acceptor_.accept(s, ec);
      if (ec) return absl::UnavailableError(StrCat("accept: ", ec.message()));
      // Only the latency stream needs Nagle off; bulk streams fill segments.
      if (i == 0 && round.latency_iterations() > 0) NoDelay(s);
      SetSocketTimeouts(s, kIoTimeoutMs);
      socks.push_back(std::move(s));
    }
    const size_t size = round.size_bytes();
    boost::system::error_code ec;
    if (round.latency_iterations() > 0) {
      std::vector<char> buf(size);
      for (uint32_t i = 0; i < round.latency_iterations(); ++i) {
        asio::read(socks[0], asio::buffer(buf), ec);
        if (!ec) asio::write(socks[0], asio::buffer(buf), ec);
        if (ec) return absl::UnavailableError(StrCat("latency ping-pong: ", ec.message()));
      }
    }
    v1::BenchRoundResult result;
    if (round.duration_ms() == 0) {
      report(result);
      return absl::OkStatus();
    }
    // Receivers count every payload byte; the window is timed here, at the
    // receiver, from the first byte plus the warm-up.
    std::atomic<uint64_t> bytes{0};
    std::vector<std::thread> readers;
    for (auto& s : socks) {
      readers.emplace_back([&bytes, size, sock = &s] {
        // Reads as large as the writes (like iperf3): small reads of large
        // writes cost the receiver more than the link.
        std::vector<char> buf(std::clamp(size, kMinReadChunk, kMaxWriteChunk));
        while (true) {
          const ssize_t n = ::recv(sock->native_handle(), buf.data(), buf.size(), 0);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) return;  // EOF: the client ended the round
          bytes.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
        }
      });
    }
    const auto deadline = SteadyClock::now() + std::chrono::milliseconds(kAcceptTimeoutMs);
    while (bytes.load() == 0 && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (bytes.load() == 0) {
      result.set_error("no payload arrived");
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(round.warmup_ms()));
      const uint64_t b0 = bytes.load();
      const auto t0 = SteadyClock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(round.duration_ms()));
      const uint64_t b1 = bytes.load();
      const auto t1 = SteadyClock::now();
      result.set_payload_bytes(static_cast<double>(b1 - b0));
      result.set_seconds(SecondsBetween(t0, t1));
    }
    report(result);
    for (auto& r : readers) r.join();
    return absl::OkStatus();
  }

 private:
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  uint32_t streams_ = 1;
};

}  // namespace

std::unique_ptr<ClientTransport> MakeTcpClient(uint32_t streams) {
  return std::make_unique<TcpClient>(streams);
}
std::unique_ptr<ServerTransport> MakeTcpServer() { return std::make_unique<TcpServer>(); }

}  // namespace fedgate::transport
