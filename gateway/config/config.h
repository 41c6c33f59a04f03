// The gateway's YAML configuration (DESIGN.md "Configuration"), validated at
// load: an unknown key, a missing file, a bad address or a bad node is an error
// that names the key and its line.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/inventory.h"
#include "federation/quota.h"
#include "federation/usage.h"

namespace fedgate::gateway {

struct ConfigPeer {
  std::string site;
  std::string endpoint;
};

// One struct per section of the file; each room takes what it needs.
struct ListenConfig {
  std::string grpc;
  std::string http = "127.0.0.1:8443";
  std::string ops = "127.0.0.1:9090";
  // Services' endpoints for bearer-token clients (HTTPS, no client
  // certificate asked); "" = off.
  std::string serve;
};

struct TlsConfig {
  // Absolute paths (relative ones are resolved against the config's folder).
  std::string ca, cert, key;
  std::string crl;                    // PEM CRL(s) of revoked certificates; "" = none
  int64_t reload_interval_ms = 5000;  // how often cert files are re-read
};

struct InventoryConfig {
  std::string source = "static";  // or "slurm", "kubernetes"
  // The node (this host) whose MIG slices `nvidia-smi -L` lists (`mig:
  // nvidia-smi`): split at start (Gateway::DiscoverMig); "" = none.
  std::string mig_from_nvidia_smi;
};

struct AdvertiseConfig {
  int64_t interval_ms = 2000;
  int64_t ttl_ms = 10000;
  // Ads must be signed by their origin; false admits unsigned ones from
  // peers without the "ads.signed.v1" capability (during an upgrade).
  bool require_signed = true;
  int64_t max_skew_ms = 30000;  // ads, links, incarnations ahead of now
  std::string endpoint;         // host:port others dial; "" = listen.grpc
  // host:port where tenants reach this site's REST API from elsewhere;
  // "" = listen.http with the port it bound (its host, or advertise.endpoint's
  // when listen.http is a wildcard).
  std::string http_endpoint;
};

struct BenchConfig {
  int64_t probe_interval_ms = 10 * 60 * 1000;
  int64_t probe_duration_ms = 3000;
  int64_t link_max_age_ms = 30 * 60 * 1000;  // older links count as unknown
  bool probe_on_peer_up = true;
};

struct ExecutorConfig {
  std::string kind = "process";
  // Ranks run as this unprivileged user (when the gateway can switch users),
  // each job in its own folder under work_dir (default
  // /var/tmp/fedgate-work/<site>; it must not be inside data_dir).
  std::string run_as = "fedgate-rank";
  std::string work_dir;
  // Per-slice limits where the cgroup controllers exist (0 = none).
  int64_t memory_limit = 0;  // bytes
  int64_t pids_limit = 0;
  // MASTER_PORTs are held from this range, like GPUs (executor.port_range).
  uint32_t port_lo = 29500, port_hi = 29999;
};

// `slurm:` (with executor.kind and inventory.source slurm).
struct SlurmConfig {
  std::string partition = "gpu";
  std::string conf;                               // slurm.conf ("" = Slurm's default)
  std::map<std::string, std::string> gpu_models;  // GRES type -> GPU model
  std::map<std::string, std::string> accounts;    // tenant -> Slurm account
};

// `kubernetes:` (with executor.kind and inventory.source kubernetes).
struct KubernetesConfig {
  std::string kubeconfig;  // "" = in-cluster (the service account's token and CA)
  std::string namespace_ = "fedgate-jobs";
  std::map<std::string, std::string> node_selector;  // the nodes lent to the federation
  std::string gpu_model_label = "nvidia.com/gpu.product";
  std::string image = "nvcr.io/nvidia/pytorch:24.05-py3";
  bool host_network = false;
  std::map<std::string, std::string> tenant_namespaces;  // tenant -> namespace
};

struct JobsConfig {
  // How long a committed slice runs without hearing from its coordinator
  // (jobs.lease; default max(3s, 5 advertise intervals)).
  int64_t lease_ms = 0;
  // recovery: replace: how long a lost slice may wait for a replacement
  // before the job falls back to a new attempt (jobs.replace_timeout).
  int64_t replace_timeout_ms = 5 * 60 * 1000;
  // Coordinator takeover: a job's first successor asks after this long
  // without hearing the coordinator (jobs.takeover_after; default 3 leases;
  // "off" = 0: no takeover), each next one a stagger later
  // (jobs.takeover_stagger; default one lease).
  int64_t takeover_after_ms = -1;
  int64_t takeover_stagger_ms = -1;
};

struct ApiConfig {
  int max_streams_per_caller = 16;  // Watch/Logs streams per identity
  // REST: the TLS handshake and each request must arrive within this (slowloris).
  int64_t read_timeout_ms = 10000;
};

// GPU health probe: this command wins over NVML and nvidia-smi; a round
// that outlives the interval is killed and changes nothing.
struct HealthConfig {
  std::string command;
  int64_t interval_ms = 10'000;
};

// Rank logs and finished jobs' working directories are removed after these.
struct RetentionConfig {
  int64_t logs_ms = 7LL * 24 * 3600 * 1000;
  int64_t jobs_ms = 30LL * 24 * 3600 * 1000;
};

struct QueueConfig {
  // Half-life of the decayed usage that breaks ties in the queue.
  int64_t fair_share_half_life_ms = 7LL * 24 * 3600 * 1000;
};

// Spot and borrowed slices: SIGTERM, then SIGKILL after the grace; none
// younger than min_runtime is chosen as a victim.
struct PreemptionConfig {
  int64_t grace_ms = 30'000;
  int64_t min_runtime_ms = 0;
};

// A dataset this site holds (`datasets:`), read-only to ranks.
struct DatasetConfig {
  std::string name;
  std::string path;     // absolute
  std::string version;  // "" = unversioned
};

// Where staged copies of other sites' datasets are kept (`datasets_cache:`).
struct DatasetsCacheConfig {
  std::string path;          // "" = <data_dir>-datasets (outside data_dir: ranks read it)
  uint64_t max_bytes = 0;    // 0 = no bound
};

struct Config {
  std::string path;  // file it came from ("" when parsed from text)
  std::string site;
  std::string federation;
  ListenConfig listen;
  TlsConfig tls;
  std::string data_dir = "/var/lib/fedgate";
  InventoryConfig inventory;
  std::vector<federation::Node> nodes;
  std::vector<ConfigPeer> peers;
  AdvertiseConfig advertise;
  // accept_jobs_from: federation: reservations from any gateway of the trust
  // domain, not only from approved peers.
  bool accept_jobs_from_federation = false;
  BenchConfig bench;
  ExecutorConfig executor;
  SlurmConfig slurm;
  KubernetesConfig kubernetes;
  JobsConfig jobs;
  ApiConfig api;
  HealthConfig health;
  RetentionConfig retention;
  QueueConfig queue;
  // Per GPU-hour, by model and class (`pricing:`), for the usage cost column.
  federation::Pricing pricing;
  // Tenants whose home (quota authority) is this site (`tenants:`); quotas
  // set with `fedctl quota set` are stored and override these.
  std::vector<federation::TenantQuota> tenants;
  PreemptionConfig preemption;
  std::vector<DatasetConfig> datasets;
  DatasetsCacheConfig datasets_cache;
};

// Parses YAML text. `base_dir` resolves relative paths; `source` names the
// text in error messages ("fedgate.yaml").
absl::StatusOr<Config> ParseConfig(const std::string& yaml_text, const std::string& base_dir,
                                   const std::string& source);

// Reads and parses a config file.
absl::StatusOr<Config> LoadConfig(const std::string& path);

}  // namespace fedgate::gateway
