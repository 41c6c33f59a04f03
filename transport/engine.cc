#include "transport/engine.h"
#include "base/number.h"
#include "base/host_port.h"

#include <poll.h>

#include <boost/asio.hpp>
#include <algorithm>
#include <chrono>
#include <thread>

#include "base/str_cat.h"
#include "base/text.h"
#include "transport/bandwidth.h"
#include "transport/control.h"
#include "transport/transport.h"

namespace fedgate::transport {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

}  // namespace

absl::StatusOr<v1::BenchReport> RunBenchmark(const RunOptions& opt) {
  if (opt.sizes.empty()) return absl::InvalidArgumentError("no message sizes");
  if (opt.streams == 0 || opt.streams > 128) {
    return absl::InvalidArgumentError(StrCat("--streams must be 1..128, got ", opt.streams));
  }
  auto client = MakeClientTransport(opt.transport, opt.streams);
  if (!client.ok()) return client.status();

  auto [host, port] = fedgate::SplitHostPort(opt.target);
  if (host.empty() || port.empty()) {
    return absl::InvalidArgumentError(StrCat("invalid target \"", opt.target, "\" (HOST:PORT)"));
  }
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(host, port, ec);
  if (ec) return absl::UnavailableError(StrCat("cannot resolve ", host, ": ", ec.message()));
  tcp::socket sock(io);
  asio::connect(sock, endpoints, ec);
  if (ec) return absl::UnavailableError(StrCat("cannot connect to ", opt.target, ": ", ec.message()));
  ControlChannel control(std::move(sock));

  v1::BenchHello hello;
  hello.set_token(opt.token);
  hello.set_transport(opt.transport);
  hello.set_streams(opt.streams);
  if (auto st = control.Send(hello); !st.ok()) return st;
  v1::BenchWelcome welcome;
  if (auto st = control.Recv(&welcome, 15000); !st.ok()) return st;
  if (!welcome.error().empty()) {
    return absl::PermissionDeniedError(StrCat("server refused: ", welcome.error()));
  }
  if (auto st = (*client)->Setup(welcome, host); !st.ok()) return st;

  v1::BenchReport report;
  report.set_transport(opt.transport);
  report.set_streams(opt.streams);
  report.set_target(opt.target);
  std::vector<uint64_t> sizes = opt.sizes;
  if (opt.latency_only_size > 0) sizes.insert(sizes.begin(), opt.latency_only_size);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t size = sizes[i];
    const bool latency_only = opt.latency_only_size > 0 && i == 0;
    v1::BenchRound round;
    round.set_size_bytes(static_cast<uint32_t>(size));
    round.set_latency_iterations(size <= kLatencyMaxSize ? opt.latency_iterations : 0);
    round.set_warmup_ms(latency_only ? 0 : opt.warmup_ms);
    round.set_duration_ms(latency_only ? 0 : opt.duration_ms);
    round.set_transport_info((*client)->RoundInfo());
    if (auto st = control.Send(round); !st.ok()) return st;

    // The server answers on the control connection once its window closed;
    // until then the transport keeps sending.
    std::atomic<bool> stop{false};
    absl::StatusOr<std::vector<double>> rtts = std::vector<double>{};
    std::thread sender([&] { rtts = (*client)->Round(round, [&] { return stop.load(); }); });
    v1::BenchRoundResult result;
    const int wait_ms = static_cast<int>(opt.warmup_ms + opt.duration_ms) + 60000;
    absl::Status got = control.Recv(&result, wait_ms);
    stop = true;
    sender.join();
    if (!got.ok()) return got;
    if (!rtts.ok()) return rtts.status();
    if (!result.error().empty()) {
      return absl::InternalError(StrCat("server: size ", FormatSize(size), ": ", result.error()));
    }
    auto* row = report.add_results();
    row->set_size_bytes(static_cast<uint32_t>(size));
    row->set_payload_bytes(result.payload_bytes());
    row->set_seconds(result.seconds());
    row->set_gbps(GbitPerSecond(result.payload_bytes(), result.seconds()));
    const LatencyStats lat = OneWayLatency(*rtts);
    row->set_latency_us_min(lat.min_us);
    row->set_latency_us_p50(lat.p50_us);
    row->set_latency_us_p99(lat.p99_us);
    if (opt.progress) {
      opt.progress(StrCat("size ", FormatSize(size), " (", i + 1, "/", sizes.size(), "): ",
                          row->gbps(), " Gbit/s"));
    }
  }
  report.set_gbps(report.results(report.results_size() - 1).gbps());
  v1::BenchRound done;
  done.set_done(true);
  (void)control.Send(done);
  return report;
}

struct BenchServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  ServeOptions options;
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  std::thread thread;

  void Log(const std::string& line) {
    if (options.log) options.log(line);
  }

  // True when the client was accepted (token and transport good). A client
  // gets at most `hello_ms` to say hello.
  bool Session(tcp::socket sock, int64_t hello_ms) {
    std::string peer;
    boost::system::error_code ec;
    auto remote = sock.remote_endpoint(ec);
    if (!ec) peer = StrCat(remote.address().to_string(), ":", remote.port());
    ControlChannel control(std::move(sock));
    v1::BenchHello hello;
    if (auto st = control.Recv(&hello, std::clamp<int64_t>(hello_ms, 100, 10000)); !st.ok()) {
      Log(StrCat("client ", peer, ": ", st.message()));
      return false;
    }
    v1::BenchWelcome welcome;
    std::unique_ptr<ServerTransport> transport;
    if (!options.token.empty() && !fedgate::ConstantTimeEquals(hello.token(), options.token)) {
      welcome.set_error("bad or missing token");
    } else {
      auto made = MakeServerTransport(hello.transport());
      if (!made.ok()) {
        welcome.set_error(std::string(made.status().message()));
      } else {
        transport = std::move(*made);
        if (auto st = transport->Setup(hello, &welcome); !st.ok()) {
          welcome.set_error(std::string(st.message()));
        }
      }
    }
    (void)control.Send(welcome);
    if (!welcome.error().empty()) {
      Log(StrCat("client ", peer, " refused: ", welcome.error()));
      return false;
    }
    Log(StrCat("client ", peer, ": ", hello.transport(), ", ", hello.streams(), " stream(s)"));
    while (!stop) {
      v1::BenchRound round;
      if (auto st = control.Recv(&round, 60000); !st.ok()) {
        Log(StrCat("client ", peer, ": ", st.message()));
        return true;
      }
      if (round.done()) break;
      absl::Status st = CheckRound(round);
      if (st.ok()) {
        st = transport->Round(round, [&](const v1::BenchRoundResult& r) { (void)control.Send(r); });
      }
      if (!st.ok()) {
        v1::BenchRoundResult r;
        r.set_error(std::string(st.message()));
        (void)control.Send(r);
        Log(StrCat("client ", peer, ": ", st.message()));
        return true;
      }
    }
    Log(StrCat("client ", peer, ": done"));
    return true;
  }
};

absl::Status CheckRound(const v1::BenchRound& round) {
  if (round.size_bytes() == 0 || round.size_bytes() > kMaxMessageSize ||
      (round.latency_iterations() > 0 && round.size_bytes() > kLatencyMaxSize) ||
      round.latency_iterations() > kMaxLatencyIterations) {
    return absl::InvalidArgumentError(
        StrCat("round refused: size ", round.size_bytes(), " bytes (1..", kMaxMessageSize,
               "; ping-pong up to ", kLatencyMaxSize, ") with ", round.latency_iterations(),
               " ping-pong iteration(s)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BenchServer>> BenchServer::Listen(const std::string& address,
                                                                 ServeOptions options) {
  auto server = std::unique_ptr<BenchServer>(new BenchServer());
  server->impl_ = std::make_unique<Impl>();
  server->impl_->options = std::move(options);
  auto [host, port] = fedgate::SplitHostPort(address);
  boost::system::error_code ec;
  asio::ip::address addr =
      host.empty() || host == "*" ? asio::ip::address(asio::ip::address_v6::any())
                                  : asio::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(StrCat("invalid listen address \"", address, "\""));
  const auto port_num = ParseNumber<uint16_t>(port);
  if (!port_num) return absl::InvalidArgumentError(StrCat("invalid listen address \"", address, "\""));
  tcp::endpoint ep(addr, *port_num);
  auto& acc = server->impl_->acceptor;
  acc.open(ep.protocol(), ec);
  if (!ec && addr.is_v6()) acc.set_option(asio::ip::v6_only(false), ec);
  if (!ec) acc.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(StrCat("cannot listen on ", address, ": ", ec.message()));
  server->port_ = acc.local_endpoint().port();
  return server;
}

BenchServer::~BenchServer() { Stop(); }

void BenchServer::Serve() {
  int sessions = 0;
  auto idle_since = std::chrono::steady_clock::now();
  while (!impl_->stop) {
    // Checked before every accept: a stream of refused clients must not
    // keep the listener open.
    if (impl_->options.idle_timeout_ms > 0 &&
        std::chrono::steady_clock::now() - idle_since >
            std::chrono::milliseconds(impl_->options.idle_timeout_ms)) {
      impl_->Log("no client came; closing");
      break;
    }
    pollfd pfd{impl_->acceptor.native_handle(), POLLIN, 0};
    if (::poll(&pfd, 1, 200) <= 0) continue;
    boost::system::error_code ec;
    tcp::socket sock(impl_->io);
    impl_->acceptor.accept(sock, ec);
    if (ec) continue;
    // Refused clients neither use up a one-time server nor keep it open:
    // only an authenticated session re-arms the idle timer, and a hello may
    // take no longer than the time the listener has left.
    int64_t left_ms = 10000;
    if (impl_->options.idle_timeout_ms > 0) {
      left_ms = impl_->options.idle_timeout_ms -
                std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - idle_since)
                    .count();
    }
    const bool accepted = impl_->Session(std::move(sock), left_ms);
    if (accepted) idle_since = std::chrono::steady_clock::now();
    if (accepted && impl_->options.max_sessions > 0 && ++sessions >= impl_->options.max_sessions) {
      break;
    }
  }
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  impl_->done = true;
}

bool BenchServer::done() const { return impl_->done.load(); }

void BenchServer::ServeInBackground() {
  impl_->thread = std::thread([this] { Serve(); });
}

void BenchServer::Stop() {
  if (!impl_) return;
  impl_->stop = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace fedgate::transport
