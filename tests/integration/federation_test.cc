// Real fedgate processes with real certificates on loopback: convergence,
// relaying through a partial mesh, expiry of dead sites, heartbeats, restarts.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

SiteOptions Site(const std::string& name, std::vector<std::string> peers,
                 std::vector<std::string> nodes = {
                     "{name: n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 8}"}) {
  SiteOptions o;
  o.site = name;
  o.peers = std::move(peers);
  o.node_lines = std::move(nodes);
  return o;
}

const v1::SiteCapacity* Find(const v1::GetCapacityResponse& cap, const std::string& site) {
  for (const auto& s : cap.sites()) {
    if (s.site() == site) return &s;
  }
  return nullptr;
}

// True if process `pid` holds a TCP socket whose remote port is `port`.
bool HasConnectionTo(pid_t pid, int port) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(fd_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char target[256] = {0};
      const std::string link = fd_dir + "/" + e->d_name;
      ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n > 0 && std::string(target).rfind("socket:[", 0) == 0) {
        std::string t(target);
        inodes.insert(t.substr(8, t.size() - 9));
      }
    }
    closedir(d);
  }
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      in >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      const int rport = std::stoi(remote.substr(remote.find(':') + 1), nullptr, 16);
      if (rport == port && inodes.contains(inode)) return true;
    }
  }
  return false;
}

class FederationTest : public ::testing::Test {
 protected:
  TestCa ca_;
  TestFederation fed_{&ca_};
};

TEST_F(FederationTest, ThreeSitesConvergeWithTheRightCounts) {
  fed_.AddSite(Site("cn-beijing", {"cn-shanghai", "cn-shenzhen"}));
  fed_.AddSite(Site("cn-shanghai", {"cn-beijing", "cn-shenzhen"},
                    {"{name: sh-1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 4}",
                     "{name: sh-2, address: 127.0.0.1, gpu_model: H100, gpus: 4}"}));
  fed_.AddSite(Site("cn-shenzhen", {"cn-beijing", "cn-shanghai"},
                    {"{name: sz-1, address: 127.0.0.1, gpu_model: H100, gpus: 8}",
                     "{name: sz-2, address: 127.0.0.1, gpu_model: H100, gpus: 8}"}));
  fed_.StartAll();
  const std::vector<std::string> all = {"cn-beijing", "cn-shanghai", "cn-shenzhen"};
  ASSERT_TRUE(Eventually([&] { return fed_.Converged(all); }, 15000)) << fed_.log("cn-beijing");

  for (const auto& viewer : all) {
    auto cap = fed_.Capacity(viewer);
    ASSERT_TRUE(cap.has_value());
    EXPECT_EQ(Find(*cap, "cn-beijing")->free_gpus(), 8u) << viewer;
    EXPECT_EQ(Find(*cap, "cn-shanghai")->free_gpus(), 8u) << viewer;
    ASSERT_EQ(Find(*cap, "cn-shanghai")->models_size(), 2) << viewer;
    EXPECT_EQ(Find(*cap, "cn-shanghai")->models(1).model(), "H100");
    EXPECT_EQ(Find(*cap, "cn-shanghai")->models(1).free_gpus(), 4u);
    EXPECT_EQ(Find(*cap, "cn-shenzhen")->free_gpus(), 16u) << viewer;
    EXPECT_EQ(Find(*cap, viewer)->state(), v1::SiteCapacity::local);
  }
  auto peers = fed_.Peers("cn-beijing");
  ASSERT_TRUE(peers.has_value());
  ASSERT_EQ(peers->peers_size(), 2);
  for (const auto& p : peers->peers()) {
    EXPECT_EQ(p.state(), v1::Peer::up) << p.site();
    EXPECT_EQ(p.source(), "config");
  }
  EXPECT_EQ(Metric(fed_.ops_port("cn-beijing"), "fedgate_peers_up"), 2);
}

TEST_F(FederationTest, PartialMeshConvergesThroughRelayWithoutADirectConnection) {
  fed_.AddSite(Site("site-a", {"site-b"}));
  fed_.AddSite(Site("site-b", {"site-a", "site-c"}));
  fed_.AddSite(Site("site-c", {"site-b"}));
  const auto t0 = Clock::now();
  fed_.StartAll();
  const int c_port = std::stoi(fed_.endpoint("site-c").substr(10));
  const int a_port = std::stoi(fed_.endpoint("site-a").substr(10));
  bool direct = false;
  const std::vector<std::string> all = {"site-a", "site-b", "site-c"};
  ASSERT_TRUE(Eventually(
      [&] {
        direct = direct || HasConnectionTo(fed_.pid("site-a"), c_port) ||
                 HasConnectionTo(fed_.pid("site-c"), a_port);
        return fed_.Converged(all);
      },
      15000, 20));
  std::printf("[ measure ] partial mesh of 3 converged %.2fs after start\n", SecondsSince(t0));
  // Keep watching for a while: a and c must never dial each other.
  for (int i = 0; i < 20; ++i) {
    direct = direct || HasConnectionTo(fed_.pid("site-a"), c_port) ||
             HasConnectionTo(fed_.pid("site-c"), a_port);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(direct) << "site-a and site-c opened a connection to each other";
  auto cap = fed_.Capacity("site-a");
  ASSERT_TRUE(cap.has_value());
  EXPECT_GT(Find(*cap, "site-c")->seq(), 0u);
  EXPECT_GT(Metric(fed_.ops_port("site-a"), "fedgate_ads_received_total{result=\"accepted\"}"), 0);
  EXPECT_EQ(Metric(fed_.ops_port("site-c"), "fedgate_authz_refusals_total{rpc_class=\"peer\","
                                            "reason=\"role\"}"),
            0);
}

TEST_F(FederationTest, KilledGatewaysAdDisappearsWithinTtlPlusInterval) {
  fed_.AddSite(Site("site-a", {"site-b"}));
  fed_.AddSite(Site("site-b", {"site-a", "site-c"}));
  fed_.AddSite(Site("site-c", {"site-b"}));
  fed_.StartAll();
  const std::vector<std::string> all = {"site-a", "site-b", "site-c"};
  ASSERT_TRUE(Eventually([&] { return fed_.Converged(all); }, 15000));
  const auto killed = Clock::now();
  fed_.Kill("site-c", SIGKILL);
  auto gone = [&](const std::string& viewer) {
    auto cap = fed_.Capacity(viewer);
    return cap.has_value() && Find(*cap, "site-c") == nullptr;
  };
  ASSERT_TRUE(Eventually([&] { return gone("site-a") && gone("site-b"); }, 10000, 20));
  const double lingered = SecondsSince(killed);
  std::printf("[ measure ] dead site's ad lingered %.2fs (ttl 1.5s + interval 0.3s)\n", lingered);
  EXPECT_LE(lingered, 1.5 + 0.3);
  // Expired ads are hidden at once and swept (and counted) on the next tick.
  EXPECT_TRUE(Eventually(
      [&] { return Metric(fed_.ops_port("site-a"), "fedgate_ads_expired_total") > 0; }, 3000));
}

TEST_F(FederationTest, SigtermWithdrawsTheAdAtOnceAndExitsZero) {
  fed_.AddSite(Site("site-a", {"site-b"}));
  auto b = Site("site-b", {"site-a"});
  b.ttl = "20s";  // so only the withdrawal, not expiry, can remove it in time
  fed_.AddSite(b);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  const auto stopped = Clock::now();
  auto code = fed_.Stop("site-b");
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << fed_.log("site-b");
  ASSERT_TRUE(Eventually(
      [&] {
        auto cap = fed_.Capacity("site-a");
        return cap && Find(*cap, "site-b") == nullptr;
      },
      2000));
  EXPECT_LT(SecondsSince(stopped), 5.0);
}

TEST_F(FederationTest, FrozenGatewayIsMarkedDownByMissedHeartbeatsAndRecovers) {
  fed_.AddSite(Site("site-a", {"site-b"}));
  auto b = Site("site-b", {"site-a"});
  b.ttl = "30s";  // its ad stays unexpired: only heartbeats can tell it is gone
  fed_.AddSite(b);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  fed_.Kill("site-b", SIGSTOP);  // its TCP connections stay open
  const auto frozen = Clock::now();
  ASSERT_TRUE(Eventually(
      [&] {
        auto peers = fed_.Peers("site-a");
        return peers && peers->peers_size() == 1 && peers->peers(0).state() == v1::Peer::down;
      },
      10000, 20));
  std::printf("[ measure ] frozen peer marked down after %.2fs\n", SecondsSince(frozen));
  auto cap = fed_.Capacity("site-a");
  ASSERT_TRUE(cap.has_value());
  const auto* sb = Find(*cap, "site-b");
  ASSERT_NE(sb, nullptr) << "the ad has not expired yet";
  EXPECT_EQ(sb->state(), v1::SiteCapacity::down);
  EXPECT_EQ(sb->free_gpus(), 0u);
  EXPECT_EQ(Metric(fed_.ops_port("site-a"), "fedgate_peers_up"), 0);

  fed_.Kill("site-b", SIGCONT);
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  auto peers = fed_.Peers("site-a");
  EXPECT_EQ(peers->peers(0).state(), v1::Peer::up);
}

TEST_F(FederationTest, RestartedGatewayRejoinsWithAHigherSeq) {
  fed_.AddSite(Site("site-a", {"site-b"}));
  fed_.AddSite(Site("site-b", {"site-a"}));
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));
  auto before = fed_.Capacity("site-a");
  const uint64_t seq_before = Find(*before, "site-b")->seq();
  fed_.Kill("site-b", SIGKILL);
  fed_.Start("site-b");
  uint64_t seq_after = 0;
  ASSERT_TRUE(Eventually(
      [&] {
        auto cap = fed_.Capacity("site-a");
        const auto* sb = cap ? Find(*cap, "site-b") : nullptr;
        // Only a seq above everything seen before can be accepted at all.
        seq_after = sb ? sb->seq() : 0;
        return sb && sb->state() == v1::SiteCapacity::up && fed_.Converged({"site-a", "site-b"}) &&
               seq_after > seq_before + 1;
      },
      15000));
  EXPECT_GT(seq_after, seq_before);
  EXPECT_EQ(Metric(fed_.ops_port("site-a"), "fedgate_ads_received_total{result=\"invalid\"}"), 0);
}

TEST_F(FederationTest, PeersAddedWithFedctlSurviveARestart) {
  fed_.AddSite(Site("site-a", {}));
  fed_.AddSite(Site("site-b", {}));
  fed_.StartAll();
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  ASSERT_TRUE(fed_.WaitReady("site-b"));
  auto fedctl = [&](const std::string& site, std::vector<std::string> args) {
    std::vector<std::string> argv = {FedctlBin()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--gateway", fed_.endpoint(site), "--tls-dir",
                             fed_.admin_tls_dir(site)});
    return RunCommand(argv);
  };
  auto r = fedctl("site-a", {"peers", "add", "--site", "site-b", "--endpoint",
                             fed_.endpoint("site-b")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = fedctl("site-b", {"peers", "add", "--site", "site-a", "--endpoint",
                        fed_.endpoint("site-a")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));

  ASSERT_EQ(fed_.Stop("site-a"), 0);
  fed_.Start("site-a");
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  r = fedctl("site-a", {"-o", "json", "peers", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"site\":\"site-b\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"source\":\"admin\""), std::string::npos) << r.out;
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b"}); }, 15000));

  // Removal is persisted too, and a bad add changes nothing.
  r = fedctl("site-a", {"peers", "add", "--site", "Bad_Site", "--endpoint", "h:1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("invalid site name"), std::string::npos) << r.err;
  r = fedctl("site-a", {"peers", "remove", "--site", "site-b"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(fed_.Stop("site-a"), 0);
  fed_.Start("site-a");
  ASSERT_TRUE(fed_.WaitReady("site-a"));
  auto peers = fed_.Peers("site-a");
  ASSERT_TRUE(peers.has_value());
  EXPECT_EQ(peers->peers_size(), 0);
}

}  // namespace
}  // namespace fedgate::testing
