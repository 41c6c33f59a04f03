// Real fedgate processes with real certificates on loopback, for integration
// tests: configs, ports, an admin client, metrics scraping, waiting helpers.
#pragma once

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fedgate/v1/admin.grpc.pb.h"
#include "fedgate/v1/federation.grpc.pb.h"
#include "tests/support/pki.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace fedgate::testing {

std::string FedgateBin();
std::string FedctlBin();

// A port for a child process to listen on: below the kernel's ephemeral
// range (so no bind(0) or outgoing connection takes it meanwhile), free
// when picked, and reserved by a lock file for this process's lifetime so
// that tests running side by side never pick the same one. Listeners this
// process opens itself bind port 0 instead.
int FreePort();

// Kills and removes the slice cgroups (<job>-<epoch> under fedgate-<site>)
// of the jobs that have a folder in data_dir/jobs: what a gateway stopped
// for good leaves, since its ranks outlive it by design. Other gateways'
// cgroups are not touched: they may use the same site name.
void EndSliceCgroups(const std::string& site, const std::string& data_dir);

// Rank processes of a job (at one site, when given), found by their
// environment (FEDGATE_JOB_ID, FEDGATE_SITE): what a site killed -9 with
// its ranks leaves to kill.
std::vector<pid_t> JobRankPids(const std::string& job, const std::string& site = "");

// Polls `cond` every `poll_ms` until it holds or `timeout_ms` passes.
bool Eventually(const std::function<bool()>& cond, int timeout_ms, int poll_ms = 50);

// GET http://127.0.0.1:port/path; returns the body, sets *status (0 if no answer).
std::string HttpGet(int port, const std::string& path, int* status);

// The value of one Prometheus series, e.g. Metric(port, "x_total{method=\"A\"}");
// 0 when absent.
double Metric(int ops_port, const std::string& series);

std::shared_ptr<grpc::Channel> TlsChannel(const std::string& endpoint, const TlsFiles& files);

struct SiteOptions {
  std::string site;
  std::vector<std::string> node_lines;  // YAML flow mappings for inventory.nodes
  std::vector<std::string> peers;       // sites to declare in the config
  std::string interval = "300ms";
  std::string ttl = "1500ms";
  std::string tls_reload = "";  // e.g. "1s"
  std::string tls_crl = "";     // tls.crl: a PEM CRL file
  std::string probe_duration = "300ms";
  bool probe_on_peer_up = false;  // loopback floods would disturb timing tests
  std::string jobs_lease = "";    // jobs.lease; default from the interval
  std::string extra_yaml = "";    // more top-level config lines
  std::string inventory_source = "static";  // "slurm": no node_lines
  bool serve = false;                       // listen.serve on a port of its own
};

class TestFederation {
 public:
  explicit TestFederation(TestCa* ca) : ca_(ca) {}
  ~TestFederation();

  // Allocates ports and writes certificates; configs are written at Start.
  void AddSite(const SiteOptions& opts);
  // Sites that all peer with each other, one node of `gpus` A100s each,
  // advertising every 500 ms (for benchmarks over a whole federation).
  void AddMesh(const std::vector<std::string>& sites, int gpus);
  // `env`: extra NAME=VALUE for this start only (e.g. FEDGATE_CRASH_AT).
  void Start(const std::string& site, const std::vector<std::string>& env = {});
  // Waits for the site's process to exit; its exit code (128+signal).
  std::optional<int> WaitExit(const std::string& site, int timeout_ms);
  void StartAll();
  // Waits for /readyz.
  bool WaitReady(const std::string& site, int timeout_ms = 20000);
  void Kill(const std::string& site, int sig = SIGKILL);
  // SIGTERM and wait; returns the exit code.
  std::optional<int> Stop(const std::string& site, int timeout_ms = 10000);

  std::string endpoint(const std::string& site) const;
  // The ops and REST ports bind port 0: these read what the running gateway
  // bound (its data_dir/ports), waiting for it to listen; 0 if it exited.
  int ops_port(const std::string& site);
  int http_port(const std::string& site);
  int serve_port(const std::string& site);  // listen.serve; 0 when off
  pid_t pid(const std::string& site) const { return sites_.at(site).proc->pid(); }
  std::string dir(const std::string& site) const { return tmp_ / site; }
  // Where this federation's ranks get their job folders.
  std::string work_root() const;
  // A folder every rank may write to (sticky, world-writable), for tests
  // whose ranks leave files behind.
  std::string shared_dir();
  std::string log(const std::string& site) const { return ReadText(tmp_ / (site + "/fedgate.log")); }
  const TlsFiles& admin_tls(const std::string& site) const { return sites_.at(site).admin; }
  std::string admin_tls_dir(const std::string& site) const { return tmp_ / (site + "/admin"); }
  v1::AdminService::Stub* admin(const std::string& site);

  // The capacity as `site` sees it (empty on RPC failure).
  std::optional<v1::GetCapacityResponse> Capacity(const std::string& site);
  std::optional<v1::ListPeersResponse> Peers(const std::string& site);
  // Sites with state up or local in `site`'s view.
  std::vector<std::string> LiveSites(const std::string& site);
  bool Converged(const std::vector<std::string>& sites);

 private:
  struct Site {
    SiteOptions opts;
    int grpc_port = 0;  // reserved up front: peers' configs name it
    int ops_port = 0;   // 0 until read from the ports file of this start
    int http_port = 0;
    int serve_port = 0;
    TlsFiles admin;
    std::unique_ptr<Process> proc;
    std::unique_ptr<v1::AdminService::Stub> stub;
  };
  void WriteConfig(const std::string& site);
  void ReadPorts(const std::string& site);
  void ResetAdmin(const std::string& site);
  void RemoveSliceCgroups();  // of this federation's jobs, once their ranks are gone

  TestCa* ca_;
  TempDir tmp_;
  std::map<std::string, Site> sites_;
};

}  // namespace fedgate::testing
