// fedbench as an operator runs it: a real server process and a real client on
// loopback; output shapes, tokens, exit codes of unavailable transports.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <atomic>
#include <chrono>
#include <thread>

#include "fedgate/v1/bench.pb.h"
#include "tests/support/harness.h"
#include "transport/engine.h"

namespace fedgate::testing {
namespace {

std::string FedbenchBin() { return FEDBENCH_BIN; }

class FedbenchTest : public ::testing::Test {
 protected:
  // The server binds port 0 and says which port it got: no port is picked
  // and released for another process to take in between.
  void StartServer(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {FedbenchBin(), "server", "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    server_ = Process::Spawn(argv, dir_ / "server.log");
    const std::string said = "serving on port ";
    ASSERT_TRUE(Eventually(
        [&] { return ReadText(dir_ / "server.log").find(said) != std::string::npos; }, 10000));
    const std::string log = ReadText(dir_ / "server.log");
    port_ = std::atoi(log.c_str() + log.find(said) + said.size());
    ASSERT_GT(port_, 0) << log;
  }
  CommandResult Run(std::vector<std::string> args) {
    std::vector<std::string> argv = {FedbenchBin(), "run", "--target",
                                     "127.0.0.1:" + std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, {}, 60000);
  }
  TempDir dir_;
  int port_ = 0;
  std::unique_ptr<Process> server_;
};

TEST_F(FedbenchTest, JsonReportHasOneRowPerSizeAndTheSummary) {
  StartServer();
  auto r = Run({"--sizes", "4K:16K", "--duration", "0.3", "--warmup", "0.1", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::BenchReport rep;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &rep).ok()) << r.out;
  ASSERT_EQ(rep.results_size(), 3);
  EXPECT_EQ(rep.transport(), "tcp");
  EXPECT_EQ(rep.results(0).size_bytes(), 4096u);
  EXPECT_EQ(rep.results(2).size_bytes(), 16384u);
  for (const auto& row : rep.results()) {
    EXPECT_GT(row.payload_bytes(), 0);
    EXPECT_NEAR(row.seconds(), 0.3, 0.1) << "the receiver's window";
    EXPECT_NEAR(row.gbps(), row.payload_bytes() * 8 / row.seconds() / 1e9, 1e-9);
    EXPECT_GT(row.latency_us_p50(), 0);
    EXPECT_GE(row.latency_us_p99(), row.latency_us_p50());
  }
  EXPECT_DOUBLE_EQ(rep.gbps(), rep.results(2).gbps());
  EXPECT_NE(r.out.find("\"size_bytes\":4096"), std::string::npos) << "numbers, not strings";
}

TEST_F(FedbenchTest, TableHasHeadersRowsSummaryAndVerdict) {
  StartServer();
  auto r = Run({"--sizes", "8K", "--duration", "0.3", "--warmup", "0.1", "--expect-gbps",
                "0.0001"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("# fedbench tcp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(Gbit/s)"), std::string::npos);
  EXPECT_NE(r.out.find("\n          8K "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# Summary:"), std::string::npos);
  EXPECT_NE(r.out.find("# OK:"), std::string::npos);
  r = Run({"--sizes", "8K", "--duration", "0.2", "--warmup", "0", "--expect-gbps", "100000"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("# FAILED:"), std::string::npos) << r.out;
}

TEST_F(FedbenchTest, ServerWithATokenRefusesOthersAndServesTheHolder) {
  StartServer({"--token", "s3cret"});
  auto r = Run({"--sizes", "4K", "--duration", "0.2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("token"), std::string::npos) << r.err;
  r = Run({"--sizes", "4K", "--duration", "0.2", "--token", "wrong"});
  EXPECT_NE(r.exit_code, 0);
  r = Run({"--sizes", "4K", "--duration", "0.2", "--token", "s3cret"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(FedbenchTest, SeveralStreamsAllCount) {
  StartServer();
  auto r = Run({"--sizes", "64K", "--streams", "4", "--duration", "0.3", "--warmup", "0.1",
                "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::BenchReport rep;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &rep).ok());
  EXPECT_EQ(rep.streams(), 4u);
  EXPECT_GT(rep.gbps(), 0);
}

TEST_F(FedbenchTest, UnavailableTransportsExitTwoWithTheReason) {
  // These machines have neither an RDMA NIC nor a GPU; where one is present
  // the transport would run instead, so the check adapts to the host.
  StartServer();
  auto rdma = Run({"--transport", "rdma", "--duration", "0.2"});
  auto nccl = Run({"--transport", "nccl", "--duration", "0.2"});
  if (rdma.exit_code == 2) {
    EXPECT_NE(rdma.err.find("no RDMA device found"), std::string::npos) << rdma.err;
  } else {
    std::printf("an RDMA device is present here: rdma exit %d\n", rdma.exit_code);
  }
  if (nccl.exit_code == 2) {
    EXPECT_TRUE(nccl.err.find("no CUDA GPU found") != std::string::npos ||
                nccl.err.find("built without CUDA") != std::string::npos)
        << nccl.err;
  } else {
    std::printf("a GPU is present here: nccl exit %d\n", nccl.exit_code);
  }
  auto bad = Run({"--transport", "carrier-pigeon"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown transport"), std::string::npos);
  bad = Run({"--sizes", "64M:4K"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--sizes"), std::string::npos);
}

TEST_F(FedbenchTest, ClientToNowhereFailsWithAReason) {
  port_ = FreePort();
  auto r = Run({"--duration", "0.2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot connect"), std::string::npos) << r.err;
}

// A one-time server with token "tok", serving in the background, and a
// short 4 KiB run against it.
struct OneTimeServer {
  explicit OneTimeServer(int idle_timeout_ms = 0) {
    transport::ServeOptions so;
    so.token = "tok";
    so.max_sessions = 1;
    if (idle_timeout_ms > 0) so.idle_timeout_ms = idle_timeout_ms;
    auto listening = transport::BenchServer::Listen("127.0.0.1:0", so);
    EXPECT_TRUE(listening.ok()) << listening.status();
    if (!listening.ok()) return;
    srv = std::move(*listening);
    srv->ServeInBackground();
    run.target = "127.0.0.1:" + std::to_string(srv->port());
    run.sizes = {4096};
    run.duration_ms = 100;
    run.warmup_ms = 0;
  }
  std::unique_ptr<transport::BenchServer> srv;
  transport::RunOptions run;
};

TEST(BenchEngine, OneTimeServerIgnoresRefusedClientsAndClosesAfterOneSession) {
  OneTimeServer one;
  ASSERT_NE(one.srv, nullptr);
  transport::RunOptions& ro = one.run;
  ro.token = "nope";
  EXPECT_FALSE(transport::RunBenchmark(ro).ok());
  ro.token = "tok";
  auto ok = transport::RunBenchmark(ro);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_GT(ok->gbps(), 0);
  EXPECT_FALSE(transport::RunBenchmark(ro).ok()) << "a one-time server serves once";
}

// Clients without the token cannot keep a one-time listener open: only an
// authenticated session re-arms its idle timer, and a client that never
// says hello is cut off when the listener's time is up.
TEST(BenchEngine, RefusedAndSilentClientsDoNotKeepTheListenerOpen) {
  OneTimeServer one(/*idle_timeout_ms=*/1500);
  ASSERT_NE(one.srv, nullptr);
  auto& srv = one.srv;
  transport::RunOptions& ro = one.run;
  ro.token = "tok-but-longer";
  const auto t0 = std::chrono::steady_clock::now();
  // A wrong token every 200 ms, and one connection that stays silent.
  std::thread silent([&] {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket s(io);
    boost::system::error_code ec;
    s.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(srv->port())}, ec);
    std::this_thread::sleep_for(std::chrono::milliseconds(4000));
  });
  std::atomic<int64_t> closed_ms{-1};
  std::thread watch([&] {
    while (!srv->done() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(6)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    closed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
  });
  while (!srv->done() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(6)) {
    EXPECT_FALSE(transport::RunBenchmark(ro).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  watch.join();
  const auto closed_after = std::chrono::milliseconds(closed_ms.load());
  silent.join();
  EXPECT_TRUE(srv->done()) << "refused clients kept the listener open";
  EXPECT_LT(closed_after, std::chrono::milliseconds(3500)) << "idle timeout 1.5 s";
}

}  // namespace
}  // namespace fedgate::testing
