// The three-site network-namespace federation the netns tests share: each
// pair of sites joined by its own veth pair shaped with tbf to a different
// rate, a real gateway in each namespace. Needs root (CI runs as root).
#pragma once

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "fedgate/v1/jobs.pb.h"
#include "tests/support/harness.h"
#include "transport/bandwidth.h"

namespace fedgate::testing {

inline CommandResult Sh(const std::string& cmd) { return RunCommand({"/bin/sh", "-c", cmd}, {}, 60000); }

inline void MustSh(const std::string& cmd) {
  auto r = Sh(cmd);
  if (r.exit_code != 0) throw std::runtime_error(cmd + " failed: " + r.err);
}

struct Pair {
  std::string x, y;  // site letters
  int subnet;
  int mbit;
};

class NetnsFederation : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "the netns test needs root (CI runs it as root)";
    prefix_ = "fgt" + std::to_string(getpid() % 100000);
    SweepStale();
    for (const char* s : {"a", "b", "c"}) MustSh("ip netns add " + Ns(s));
    for (const char* s : {"a", "b", "c"}) MustSh("ip -n " + Ns(s) + " link set lo up");
    for (const auto& p : pairs_) {
      const std::string vx = prefix_ + p.x + p.y, vy = prefix_ + p.y + p.x;  // <= 15 chars
      MustSh("ip link add " + vx + " type veth peer name " + vy);
      MustSh("ip link set " + vx + " netns " + Ns(p.x));
      MustSh("ip link set " + vy + " netns " + Ns(p.y));
      MustSh("ip -n " + Ns(p.x) + " addr add " + Addr(p, p.x) + "/30 dev " + vx);
      MustSh("ip -n " + Ns(p.y) + " addr add " + Addr(p, p.y) + "/30 dev " + vy);
      MustSh("ip -n " + Ns(p.x) + " link set " + vx + " up");
      MustSh("ip -n " + Ns(p.y) + " link set " + vy + " up");
      Shape(p, p.mbit, "add");
    }
    // Certificates and configs; every gateway listens on 7443 in its own stack.
    for (const char* s : {"a", "b", "c"}) {
      const std::string site = Site(s);
      WriteTlsDir(dir_ / (site + "/tls"), ca_.Gateway(site));
      WriteTlsDir(dir_ / (site + "/admin"), ca_.Admin(site));
      std::ostringstream y;
      y << "site: " << site << "\nfederation: aidc\n"
        << "listen: {grpc: 0.0.0.0:7443, ops: 127.0.0.1:9090}\n"
        << "tls: {ca: tls/ca.pem, cert: tls/cert.pem, key: tls/key.pem}\n"
        << "data_dir: data\ninventory:\n  nodes:\n"
        << "    - {name: " << s << "-1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 4}\n"
        << "peers:\n";
      for (const auto& p : pairs_) {
        if (p.x == s) y << "  - {site: " << Site(p.y) << ", endpoint: " << Addr(p, p.y) << ":7443}\n";
        if (p.y == s) y << "  - {site: " << Site(p.x) << ", endpoint: " << Addr(p, p.x) << ":7443}\n";
      }
      y << "advertise: {interval: 500ms, ttl: 5s}\n"
        << "bench: {probe_duration: 3s, probe_on_peer_up: false}\n"
        << "executor: {work_dir: " << WorkRoot() << "/" << site << "}\n"
        << "datasets_cache: {path: " << WorkRoot() << "/cache-" << site << "}\n"
        << ExtraYaml(s);
      WriteText(dir_ / (site + "/fedgate.yaml"), y.str());
      procs_[s] = Process::Spawn({"/usr/sbin/ip", "netns", "exec", Ns(s), FedgateBin(), "--config",
                                  dir_ / (site + "/fedgate.yaml")},
                                 dir_ / (site + "/fedgate.log"));
    }
  }

  void TearDown() override {
    for (auto& [s, p] : procs_) {
      p->Signal(SIGKILL);
      p->Wait(5000);
    }
    for (const char* s : {"a", "b", "c"}) Sh("ip netns del " + Ns(s) + " 2>/dev/null");
    std::error_code ec;
    std::filesystem::remove_all(WorkRoot(), ec);
  }

  // More config for site `s` (fixtures that need it say what).
  virtual std::string ExtraYaml(const std::string& s) const {
    (void)s;
    return "";
  }

  // The ranks' folders: somewhere every rank user may enter, not dir_ (0700).
  std::string WorkRoot() const { return "/var/tmp/fedgate-test-work/" + prefix_; }

  // Namespaces of runs that died without cleaning up.
  void SweepStale() {
    auto r = Sh("ip netns list | awk '{print $1}' | grep '^fgt' || true");
    std::istringstream in(r.out);
    std::string ns;
    while (std::getline(in, ns)) {
      if (!ns.empty()) Sh("ip netns del " + ns);
    }
  }

  void Shape(const Pair& p, int mbit, const std::string& verb) {
    // Burst of at least rate x 5 ms on both ends of the veth.
    const long burst = std::max<long>(32 * 1024, static_cast<long>(mbit) * 1000000 / 8 / 200);
    for (const auto& [side, other] : {std::pair{p.x, p.y}, std::pair{p.y, p.x}}) {
      MustSh("ip netns exec " + Ns(side) + " tc qdisc " + verb + " dev " + prefix_ + side + other +
             " root tbf rate " + std::to_string(mbit) + "mbit burst " + std::to_string(burst) +
             " latency 100ms");
    }
  }

  std::string Ns(const std::string& s) const { return prefix_ + "-" + s; }
  static std::string Site(const std::string& s) { return "site-" + s; }
  static std::string Addr(const Pair& p, const std::string& s) {
    return "10.201." + std::to_string(p.subnet) + "." + (s == p.x ? "1" : "2");
  }

  CommandResult Fedctl(const std::string& s, const std::string& args) {
    return Sh("ip netns exec " + Ns(s) + " " + FedctlBin() + " --gateway 127.0.0.1:7443 --tls-dir " +
              dir_ / (Site(s) + "/admin") + " " + args);
  }

  std::map<std::pair<std::string, std::string>, double> Matrix(const std::string& s) {
    std::map<std::pair<std::string, std::string>, double> out;
    auto r = Fedctl(s, "links -o json");
    v1::ListLinksResponse resp;
    if (r.exit_code != 0 || !google::protobuf::util::JsonStringToMessage(r.out, &resp).ok()) {
      return out;
    }
    for (const auto& l : resp.links()) out[{l.from(), l.to()}] = l.gbps();
    return out;
  }

  // The sites a two-site, 6-GPU job would land on, asked at site-c.
  std::vector<std::string> PlanSites() {
    WriteText(dir_ / "job.yaml", "name: two-sites\ngpus: 6\ncommand: [true]\n");
    auto r = Fedctl("c", "jobs plan -f " + dir_ / "job.yaml" + " -o json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    v1::PlanResponse plan;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &plan).ok()) << r.out;
    std::printf("[ measure ] plan: %s -> %s\n", plan.summary().c_str(),
                plan.sites_size() == 2 ? (plan.sites(0) + "+" + plan.sites(1)).c_str() : "?");
    return {plan.sites().begin(), plan.sites().end()};
  }

  double Probe(const std::string& from, const std::string& to) {
    auto r = Fedctl(from, "links probe " + Site(to) + " -o json");
    EXPECT_EQ(r.exit_code, 0) << r.err << ReadText(dir_ / (Site(from) + "/fedgate.log"));
    v1::ProbeLinkResponse resp;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &resp).ok()) << r.out;
    return resp.link().gbps();
  }

  // fedbench from site `from` to `to` over the pair's link (4 s, one stream).
  double FedbenchGbps(const Pair& p, const std::string& from, const std::string& to) {
    const std::string target = Addr(p, to) + ":7600";
    auto server = Process::Spawn({"/usr/sbin/ip", "netns", "exec", Ns(to), std::string(FEDBENCH_BIN),
                                  "server", "--listen", target},
                                 dir_ / "fedbench-server.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto bench = Sh("ip netns exec " + Ns(from) + " " + std::string(FEDBENCH_BIN) + " run --target " +
                    target + " --transport tcp --streams 1 --duration 4 -o json");
    server->Signal(SIGTERM);
    server->Wait(5000);
    EXPECT_EQ(bench.exit_code, 0) << bench.err;
    const auto at = bench.out.rfind("\"gbps\":");
    EXPECT_NE(at, std::string::npos) << bench.out;
    return at == std::string::npos ? 0 : std::atof(bench.out.c_str() + at + 7);
  }

  // alice of tenant vision, through site `s`'s gateway (-o json).
  CommandResult Alice(const std::string& s, const std::string& args) {
    if (!std::filesystem::exists(dir_ / "alice")) WriteTlsDir(dir_ / "alice", ca_.User("vision", "alice"));
    return Sh("ip netns exec " + Ns(s) + " " + FedctlBin() + " --gateway 127.0.0.1:7443 --tls-dir " +
              dir_ / "alice" + " -o json " + args);
  }
  v1::Job JobAt(const std::string& s, const std::string& id) {
    v1::GetJobResponse resp;
    google::protobuf::util::JsonParseOptions lax;
    lax.ignore_unknown_fields = true;
    (void)google::protobuf::util::JsonStringToMessage(Alice(s, "--no-follow jobs get " + id).out,
                                                      &resp, lax);
    return resp.job();
  }

  void ExpectRate(double gbps, int mbit, const std::string& what) {
    const double expected = mbit / 1000.0 * transport::TcpPayloadFraction(1500);
    std::printf("[ measure ] %s: %.4f Gbit/s, expected %.4f (tbf %d Mbit/s x 1448/1514), ratio %.3f\n",
                what.c_str(), gbps, expected, mbit, gbps / expected);
    EXPECT_NEAR(gbps, expected, 0.05 * expected) << what;
  }

  std::string prefix_;
  std::vector<Pair> pairs_ = {{"a", "b", 1, 400}, {"a", "c", 2, 100}, {"b", "c", 3, 40}};
  TestCa ca_;
  TempDir dir_;
  std::map<std::string, std::unique_ptr<Process>> procs_;
};

}  // namespace fedgate::testing
