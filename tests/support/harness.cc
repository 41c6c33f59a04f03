#include "tests/support/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "gateway/exec/cgroup.h"
#include "gateway/security/tls.h"

namespace fedgate::testing {

std::string FedgateBin() { return FEDGATE_BIN; }
std::string FedctlBin() { return FEDCTL_BIN; }

namespace {

// The kernel hands out ports for bind(0) and outgoing connections from
// ip_local_port_range; a port picked there and released can be taken by any
// of them before the gateway that was told to use it binds it (seen: one of
// 64 gateways failed to start because another's ops listener got its port).
// Ports below that range are never handed out by the kernel.
std::pair<int, int> ReservablePorts() {
  int low = 32768, high = 60999;
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  f >> low >> high;
  const int top = std::max(2048, low - 1);
  return {std::max(1025, top - 12000), top};
}

bool Bindable(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

int FreePort() {
  // Test processes running side by side (ctest -j) reserve a port with a
  // lock file held until they exit, so two never pick the same one.
  static std::mutex mu;
  static std::set<int> mine;
  std::lock_guard lock(mu);
  const auto [lo, hi] = ReservablePorts();
  const std::filesystem::path dir = "/tmp/fedgate-test-ports";
  std::error_code ec;
  // Shared by every user's test runs, like /tmp itself.
  if (std::filesystem::create_directories(dir, ec)) {
    std::filesystem::permissions(
        dir, std::filesystem::perms::all | std::filesystem::perms::sticky_bit, ec);
  }
  std::mt19937 rng(static_cast<unsigned>(::getpid()) ^ std::random_device{}());
  for (int attempt = 0; attempt < 4 * (hi - lo); ++attempt) {
    const int port = lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1));
    if (mine.contains(port)) continue;
    const std::string path = (dir / std::to_string(port)).string();
    const int fd = ::open(path.c_str(), O_CREAT | O_RDONLY | O_CLOEXEC, 0666);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || !Bindable(port)) {
      ::close(fd);
      continue;
    }
    mine.insert(port);  // the fd stays open: the lock lasts as long as this process
    return port;
  }
  std::fprintf(stderr, "FreePort: no reservable port in %d-%d\n", lo, hi);
  std::abort();
}

void EndSliceCgroups(const std::string& site, const std::string& data_dir) {
  for (const std::string& mount : gateway::Cgroup2Mounts()) {  // the gateway used one of them
    for (const std::string& cg :
         gateway::SliceCgroupsOfJobs(mount + "/fedgate-" + site, data_dir + "/jobs")) {
      for (int i = 0; i < 200 && !gateway::RemoveCgroup(cg); ++i) {  // kills what is left
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
}

std::vector<pid_t> JobRankPids(const std::string& job, const std::string& site) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
    if (pid <= 0) continue;
    std::ifstream in(e.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    env.insert(env.begin(), '\0');
    auto has = [&](const std::string& kv) { return env.find('\0' + kv + '\0') != std::string::npos; };
    if (has("FEDGATE_JOB_ID=" + job) && (site.empty() || has("FEDGATE_SITE=" + site))) {
      out.push_back(pid);
    }
  }
  return out;
}

bool Eventually(const std::function<bool()>& cond, int timeout_ms, int poll_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
}

std::string HttpGet(int port, const std::string& path, int* status) {
  *status = 0;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  (void)::write(fd, req.data(), req.size());
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (resp.rfind("HTTP/1.1 ", 0) != 0) return "";
  *status = std::stoi(resp.substr(9, 3));
  auto body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

namespace {

// "name{a=\"x\",b=\"y\"}" -> name and its labels, in any order.
std::pair<std::string, std::map<std::string, std::string>> ParseSeries(const std::string& s) {
  std::map<std::string, std::string> labels;
  const size_t brace = s.find('{');
  if (brace == std::string::npos) return {s, labels};
  size_t at = brace + 1;
  while (at < s.size() && s[at] != '}') {
    const size_t eq = s.find('=', at);
    if (eq == std::string::npos || eq + 1 >= s.size() || s[eq + 1] != '"') break;
    std::string value;
    size_t i = eq + 2;
    for (; i < s.size() && s[i] != '"'; ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) ++i;
      value += s[i];
    }
    labels[s.substr(at, eq - at)] = value;
    at = i + 1;
    if (at < s.size() && s[at] == ',') ++at;
  }
  return {s.substr(0, brace), labels};
}

}  // namespace

double Metric(int ops_port, const std::string& series) {
  int status = 0;
  std::istringstream body(HttpGet(ops_port, "/metrics", &status));
  const auto want = ParseSeries(series);
  std::string line;
  while (std::getline(body, line)) {
    if (line.empty() || line[0] == '#') continue;
    // The value follows the label set (whose values may hold spaces).
    const size_t brace = line.rfind('}');
    const size_t space = line.find(' ', brace == std::string::npos ? 0 : brace);
    if (space == std::string::npos) continue;
    if (ParseSeries(line.substr(0, space)) == want) return std::stod(line.substr(space + 1));
  }
  return 0;
}

std::shared_ptr<grpc::Channel> TlsChannel(const std::string& endpoint, const TlsFiles& files) {
  return gateway::DialGateway(
      endpoint, gateway::MakeStaticProvider(files.ca_pem, files.cert_pem, files.key_pem),
      [](const gateway::Identity&) { return absl::OkStatus(); });
}

TestFederation::~TestFederation() {
  for (auto& [name, s] : sites_) {
    if (s.proc && s.proc->Running()) {
      s.proc->Signal(SIGCONT);
      s.proc->Signal(SIGKILL);
    }
  }
  // Ranks run under shims that outlive their gateway: end the ones of this
  // federation (their working directory is under its work root), by group.
  const std::string root = work_root();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code le;
    const std::string cwd = std::filesystem::read_symlink(e.path() / "cwd", le).string();
    if (le || cwd.rfind(root + "/", 0) != 0) continue;
    const pid_t pid = std::stoi(name);
    const pid_t group = ::getpgid(pid);
    if (group > 1) ::kill(-group, SIGKILL);
    ::kill(pid, SIGKILL);
  }
  RemoveSliceCgroups();
  std::filesystem::remove_all(root, ec);
}

void TestFederation::RemoveSliceCgroups() {
  for (const auto& [name, s] : sites_) EndSliceCgroups(name, tmp_ / (name + "/data"));
}

std::string TestFederation::work_root() const {
  return "/var/tmp/fedgate-test-work/" +
         std::filesystem::path(std::string(tmp_.path())).filename().string();
}

std::string TestFederation::shared_dir() {
  const std::string dir = work_root() + "/shared";
  std::error_code ec;
  // Shared by every user's test runs, like /tmp itself.
  if (std::filesystem::create_directories(dir, ec)) {
    std::filesystem::permissions(
        dir, std::filesystem::perms::all | std::filesystem::perms::sticky_bit, ec);
  }
  std::filesystem::permissions(dir, std::filesystem::perms::all | std::filesystem::perms::sticky_bit,
                               std::filesystem::perm_options::replace, ec);
  return dir;
}

void TestFederation::AddSite(const SiteOptions& opts) {
  Site s;
  s.opts = opts;
  s.grpc_port = FreePort();
  WriteTlsDir(tmp_ / (opts.site + "/tls"), ca_->Gateway(opts.site));
  s.admin = ca_->Admin(opts.site);
  WriteTlsDir(tmp_ / (opts.site + "/admin"), s.admin);
  sites_[opts.site] = std::move(s);
}

void TestFederation::AddMesh(const std::vector<std::string>& sites, int gpus) {
  for (const auto& s : sites) {
    SiteOptions o;
    o.site = s;
    for (const auto& p : sites) {
      if (p != s) o.peers.push_back(p);
    }
    o.interval = "500ms";
    o.ttl = "2500ms";
    o.node_lines = {"{name: " + s + "-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: " +
                    std::to_string(gpus) + "}"};
    AddSite(o);
  }
}

std::string TestFederation::endpoint(const std::string& site) const {
  return "127.0.0.1:" + std::to_string(sites_.at(site).grpc_port);
}

void TestFederation::WriteConfig(const std::string& site) {
  const Site& s = sites_.at(site);
  std::ostringstream y;
  y << "site: " << site << "\nfederation: " << ca_->federation() << "\n"
    << "listen:\n  grpc: " << endpoint(site) << "\n  ops: 127.0.0.1:0\n  http: 127.0.0.1:0\n"
    << (s.opts.serve ? "  serve: 127.0.0.1:0\n" : "")
    << "tls: {ca: tls/ca.pem, cert: tls/cert.pem, key: tls/key.pem"
    << (s.opts.tls_reload.empty() ? "" : ", reload_interval: " + s.opts.tls_reload)
    << (s.opts.tls_crl.empty() ? "" : ", crl: " + s.opts.tls_crl) << "}\n"
    << "data_dir: data\n";
  if (s.opts.inventory_source == "static") {
    y << "inventory:\n  nodes:\n";
    for (const auto& n : s.opts.node_lines) y << "    - " << n << "\n";
  } else {
    y << "inventory: {source: " << s.opts.inventory_source << "}\n";
  }
  if (!s.opts.peers.empty()) {
    y << "peers:\n";
    for (const auto& p : s.opts.peers) {
      y << "  - {site: " << p << ", endpoint: " << endpoint(p) << "}\n";
    }
  }
  y << "advertise: {interval: " << s.opts.interval << ", ttl: " << s.opts.ttl << "}\n";
  y << "bench: {probe_duration: " << s.opts.probe_duration
    << ", probe_on_peer_up: " << (s.opts.probe_on_peer_up ? "true" : "false") << "}\n";
  if (!s.opts.jobs_lease.empty()) y << "jobs: {lease: " << s.opts.jobs_lease << "}\n";
  // Ranks cannot enter the test's private temp dir: their folders live
  // under a work root of this federation (cleaned up by the destructor).
  if (s.opts.extra_yaml.find("executor:") == std::string::npos) {
    y << "executor: {work_dir: " << work_root() << "/" << site << "}\n";
  }
  y << s.opts.extra_yaml;
  WriteText(tmp_ / (site + "/fedgate.yaml"), y.str());
}

void TestFederation::Start(const std::string& site, const std::vector<std::string>& env) {
  WriteConfig(site);
  Site& s = sites_.at(site);
  std::error_code ec;
  std::filesystem::remove(tmp_ / (site + "/data/ports"), ec);  // a previous start's
  s.ops_port = s.http_port = s.serve_port = 0;
  s.proc = Process::Spawn({FedgateBin(), "--config", tmp_ / (site + "/fedgate.yaml")},
                          tmp_ / (site + "/fedgate.log"), env);
}

std::optional<int> TestFederation::WaitExit(const std::string& site, int timeout_ms) {
  return sites_.at(site).proc->Wait(timeout_ms);
}

void TestFederation::StartAll() {
  for (auto& [name, s] : sites_) Start(name);
}

void TestFederation::ReadPorts(const std::string& site) {
  Site& s = sites_.at(site);
  if (s.ops_port != 0 || !s.proc) return;
  const std::string path = tmp_ / (site + "/data/ports");
  for (int i = 0; i < 600 && !std::filesystem::exists(path) && s.proc->Running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ifstream in(path);
  std::string name;
  int port = 0;
  while (in >> name >> port) {
    if (name == "ops") s.ops_port = port;
    if (name == "http") s.http_port = port;
    if (name == "serve") s.serve_port = port;
  }
}

int TestFederation::ops_port(const std::string& site) {
  ReadPorts(site);
  return sites_.at(site).ops_port;
}

int TestFederation::http_port(const std::string& site) {
  ReadPorts(site);
  return sites_.at(site).http_port;
}

int TestFederation::serve_port(const std::string& site) {
  ReadPorts(site);
  return sites_.at(site).serve_port;
}

bool TestFederation::WaitReady(const std::string& site, int timeout_ms) {
  return Eventually(
      [&] {
        int status = 0;
        HttpGet(ops_port(site), "/readyz", &status);
        return status == 200;
      },
      timeout_ms);
}

void TestFederation::Kill(const std::string& site, int sig) {
  sites_.at(site).proc->Signal(sig);
  if (sig == SIGKILL) sites_.at(site).proc->Wait(10000);
}

std::optional<int> TestFederation::Stop(const std::string& site, int timeout_ms) {
  sites_.at(site).proc->Signal(SIGTERM);
  return sites_.at(site).proc->Wait(timeout_ms);
}

v1::AdminService::Stub* TestFederation::admin(const std::string& site) {
  Site& s = sites_.at(site);
  if (!s.stub) s.stub = v1::AdminService::NewStub(TlsChannel(endpoint(site), s.admin));
  return s.stub.get();
}

// A channel whose first attempts met a gateway that was not listening yet can
// stay stuck in TLS handshake timeouts (seen with gRPC 1.51's static
// certificate provider): start over with a new channel after any failure.
void TestFederation::ResetAdmin(const std::string& site) { sites_.at(site).stub.reset(); }

std::optional<v1::GetCapacityResponse> TestFederation::Capacity(const std::string& site) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::GetCapacityResponse resp;
  if (!admin(site)->GetCapacity(&ctx, {}, &resp).ok()) {
    ResetAdmin(site);
    return std::nullopt;
  }
  return resp;
}

std::optional<v1::ListPeersResponse> TestFederation::Peers(const std::string& site) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::ListPeersResponse resp;
  if (!admin(site)->ListPeers(&ctx, {}, &resp).ok()) {
    ResetAdmin(site);
    return std::nullopt;
  }
  return resp;
}

std::vector<std::string> TestFederation::LiveSites(const std::string& site) {
  std::vector<std::string> out;
  auto cap = Capacity(site);
  if (!cap) return out;
  for (const auto& s : cap->sites()) {
    if (s.state() == v1::SiteCapacity::up || s.state() == v1::SiteCapacity::local) {
      out.push_back(s.site());
    }
  }
  return out;
}

bool TestFederation::Converged(const std::vector<std::string>& sites) {
  for (const auto& s : sites) {
    if (LiveSites(s) != sites) return false;
  }
  return true;
}

}  // namespace fedgate::testing
