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

struct Config {
  std::string path;  // file it came from ("" when parsed from text)
  std::string site;
  std::string federation;
  std::string listen_grpc;
  std::string listen_http = "127.0.0.1:8443";
  std::string listen_ops = "127.0.0.1:9090";
  // Absolute paths (relative ones are resolved against the config's folder).
  std::string tls_ca, tls_cert, tls_key;
  std::string tls_crl;  // PEM CRL(s) of revoked certificates; "" = none
  int64_t tls_reload_interval_ms = 5000;  // how often cert files are re-read
  std::string data_dir = "/var/lib/fedgate";
  std::string inventory_source = "static";
  std::vector<federation::Node> nodes;
  std::vector<ConfigPeer> peers;
  int64_t advertise_interval_ms = 2000;
  int64_t advertise_ttl_ms = 10000;
  // Ads must be signed by their origin; false admits unsigned ones from
  // peers without the "ads.signed.v1" capability (during an upgrade).
  bool advertise_require_signed = true;
  int64_t advertise_max_skew_ms = 30000;  // ads, links, incarnations ahead of now
  std::string advertise_endpoint;         // host:port others dial; "" = listen.grpc
  // accept_jobs_from: federation: reservations from any gateway of the trust
  // domain, not only from approved peers.
  bool accept_jobs_from_federation = false;
  int64_t bench_probe_interval_ms = 10 * 60 * 1000;
  int64_t bench_probe_duration_ms = 3000;
  int64_t bench_link_max_age_ms = 30 * 60 * 1000;  // older links count as unknown
  bool bench_probe_on_peer_up = true;
  std::string executor_kind = "process";
  // Ranks run as this unprivileged user (when the gateway can switch users),
  // each job in its own folder under work_dir (default
  // /var/tmp/fedgate-work/<site>; it must not be inside data_dir).
  std::string executor_run_as = "fedgate-rank";
  std::string executor_work_dir;
  // `slurm:` (with executor.kind and inventory.source slurm).
  std::string slurm_partition = "gpu";
  std::string slurm_conf;
  std::map<std::string, std::string> slurm_gpu_models;  // GRES type -> model
  std::map<std::string, std::string> slurm_accounts;    // tenant -> account
  // Per-slice limits where the cgroup controllers exist (0 = none).
  int64_t executor_memory_limit = 0;  // bytes
  int64_t executor_pids_limit = 0;
  // MASTER_PORTs are held from this range, like GPUs (executor.port_range).
  uint32_t executor_port_lo = 29500, executor_port_hi = 29999;
  // How long a committed slice runs without hearing from its coordinator
  // (jobs.lease; default max(3s, 5 advertise intervals)).
  int64_t jobs_lease_ms = 0;
  int api_max_streams_per_caller = 16;  // Watch/Logs streams per identity
  // REST: the TLS handshake and each request must arrive within this (slowloris).
  int64_t api_read_timeout_ms = 10000;
  // GPU health probe: this command wins over NVML and nvidia-smi; a round
  // that outlives the interval is killed and changes nothing.
  std::string health_command;
  int64_t health_interval_ms = 10'000;
  // Rank logs and finished jobs' working directories are removed after these.
  int64_t retention_logs_ms = 7LL * 24 * 3600 * 1000;
  int64_t retention_jobs_ms = 30LL * 24 * 3600 * 1000;
  // Half-life of the decayed usage that breaks ties in the queue.
  int64_t queue_fair_share_half_life_ms = 7LL * 24 * 3600 * 1000;
  // Per GPU-hour, by model and class (`pricing:`), for the usage cost column.
  federation::Pricing pricing;
  // Tenants whose home (quota authority) is this site (`tenants:`); quotas
  // set with `fedctl quota set` are stored and override these.
  std::vector<federation::TenantQuota> tenants;
  // Spot and borrowed slices: SIGTERM, then SIGKILL after the grace; none
  // younger than min_runtime is chosen as a victim.
  int64_t preemption_grace_ms = 30'000;
  int64_t preemption_min_runtime_ms = 0;
};

// Parses YAML text. `base_dir` resolves relative paths; `source` names the
// text in error messages ("fedgate.yaml").
absl::StatusOr<Config> ParseConfig(const std::string& yaml_text, const std::string& base_dir,
                                   const std::string& source);

// Reads and parses a config file.
absl::StatusOr<Config> LoadConfig(const std::string& path);

}  // namespace fedgate::gateway
