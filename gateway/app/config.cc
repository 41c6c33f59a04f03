#include "gateway/app/config.h"

#include <algorithm>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/str_cat.h"
#include "federation/duration.h"
#include "federation/names.h"
#include "federation/peer_registry.h"

namespace fedgate::gateway {
namespace {

namespace fs = std::filesystem;

// Carries the error out of the nested walkers; caught once in ParseConfig.
struct ConfigError {
  std::string message;
};

class Walker {
 public:
  explicit Walker(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void Fail(const YAML::Node& at, const std::string& what) const {
    std::string where = source_;
    if (at.IsDefined() && at.Mark().line >= 0) where += fedgate::StrCat(":", at.Mark().line + 1);
    throw ConfigError{fedgate::StrCat(where, ": ", what)};
  }

  // Checks that `map` is a mapping whose keys are all in `allowed`.
  void ExpectKeys(const YAML::Node& map, const std::string& path,
                  const std::set<std::string>& allowed) const {
    if (!map.IsMap()) Fail(map, fedgate::StrCat("\"", path, "\" must be a mapping"));
    for (auto it = map.begin(); it != map.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      if (!allowed.contains(key)) {
        Fail(it->first, fedgate::StrCat("unknown key \"", Join(path, key), "\""));
      }
    }
  }

  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : fedgate::StrCat(path, ".", key);
  }

  std::string Str(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) Fail(n, fedgate::StrCat("\"", key, "\" must be a string"));
    return n.as<std::string>();
  }

  template <typename T>
  T Scalar(const YAML::Node& n, const std::string& key, const char* kind) const {
    if (!n.IsScalar()) Fail(n, fedgate::StrCat("\"", key, "\" must be ", kind));
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      Fail(n, fedgate::StrCat("\"", key, "\" must be ", kind, ", got \"", n.Scalar(), "\""));
    }
  }

  int64_t Duration(const YAML::Node& n, const std::string& key) const {
    auto ms = federation::ParseDurationMs(Str(n, key));
    if (!ms.ok()) Fail(n, fedgate::StrCat("\"", key, "\": ", ms.status().message()));
    if (*ms <= 0) Fail(n, fedgate::StrCat("\"", key, "\" must be > 0"));
    return *ms;
  }

  std::string Endpoint(const YAML::Node& n, const std::string& key, bool allow_zero) const {
    std::string v = Str(n, key);
    if (auto st = federation::ValidateEndpoint(v, allow_zero); !st.ok()) {
      Fail(n, fedgate::StrCat("\"", key, "\": ", st.message()));
    }
    return v;
  }

 private:
  std::string source_;
};

std::string Resolve(const std::string& base_dir, const std::string& p) {
  fs::path path(p);
  if (path.is_absolute() || base_dir.empty()) return path.lexically_normal().string();
  return (fs::path(base_dir) / path).lexically_normal().string();
}

federation::Node ParseNode(const Walker& w, const YAML::Node& n, const std::string& path) {
  w.ExpectKeys(n, path,
               {"name", "address", "gpu_model", "gpu_memory_gib", "gpus", "rdma", "nic_gbps",
                "labels"});
  federation::Node node;
  for (const char* req : {"name", "address", "gpu_model", "gpus"}) {
    if (!n[req]) w.Fail(n, fedgate::StrCat("missing required key \"", path, ".", req, "\""));
  }
  node.name = w.Str(n["name"], path + ".name");
  if (!federation::IsValidName(node.name)) {
    w.Fail(n["name"], fedgate::StrCat("\"", path, ".name\": invalid node name \"", node.name,
                                   "\" (want 1-63 of [a-z0-9-])"));
  }
  node.address = w.Str(n["address"], path + ".address");
  if (node.address.empty()) w.Fail(n["address"], fedgate::StrCat("\"", path, ".address\" is empty"));
  node.gpu_model = w.Str(n["gpu_model"], path + ".gpu_model");
  if (node.gpu_model.empty()) {
    w.Fail(n["gpu_model"], fedgate::StrCat("\"", path, ".gpu_model\" is empty"));
  }
  int64_t gpus = w.Scalar<int64_t>(n["gpus"], path + ".gpus", "an integer");
  if (gpus <= 0 || gpus > 4096) {
    w.Fail(n["gpus"], fedgate::StrCat("\"", path, ".gpus\" must be between 1 and 4096, got ", gpus));
  }
  node.gpus = static_cast<uint32_t>(gpus);
  if (n["gpu_memory_gib"]) {
    int64_t mem = w.Scalar<int64_t>(n["gpu_memory_gib"], path + ".gpu_memory_gib", "an integer");
    if (mem < 0) w.Fail(n["gpu_memory_gib"], fedgate::StrCat("\"", path, ".gpu_memory_gib\" < 0"));
    node.gpu_memory_gib = static_cast<uint32_t>(mem);
  }
  if (n["rdma"]) node.rdma = w.Scalar<bool>(n["rdma"], path + ".rdma", "true or false");
  if (n["nic_gbps"]) {
    node.nic_gbps = w.Scalar<double>(n["nic_gbps"], path + ".nic_gbps", "a number");
    if (node.nic_gbps < 0) w.Fail(n["nic_gbps"], fedgate::StrCat("\"", path, ".nic_gbps\" < 0"));
  }
  if (n["labels"]) {
    const auto& labels = n["labels"];
    if (!labels.IsMap()) w.Fail(labels, fedgate::StrCat("\"", path, ".labels\" must be a mapping"));
    for (auto it = labels.begin(); it != labels.end(); ++it) {
      node.labels[it->first.as<std::string>()] =
          w.Str(it->second, fedgate::StrCat(path, ".labels.", it->first.as<std::string>()));
    }
  }
  return node;
}

Config Walk(const YAML::Node& root, const std::string& base_dir, const Walker& w) {
  Config c;
  if (!root.IsDefined() || root.IsNull()) w.Fail(root, "the config is empty");
  w.ExpectKeys(root, "",
               {"site", "federation", "listen", "tls", "data_dir", "inventory", "peers",
                "advertise", "bench", "executor", "jobs", "api", "health", "retention", "pricing", "queue", "tenants", "preemption", "slurm", "accept_jobs_from"});
  for (const char* req : {"site", "federation", "listen", "tls", "inventory"}) {
    if (!root[req]) w.Fail(root, fedgate::StrCat("missing required key \"", req, "\""));
  }
  c.site = w.Str(root["site"], "site");
  if (!federation::IsValidName(c.site)) {
    w.Fail(root["site"], fedgate::StrCat("\"site\": invalid site name \"", c.site,
                                      "\" (want 1-63 of [a-z0-9-])"));
  }
  c.federation = w.Str(root["federation"], "federation");
  if (!federation::IsValidName(c.federation)) {
    w.Fail(root["federation"], fedgate::StrCat("\"federation\": invalid name \"", c.federation, "\""));
  }

  const auto& listen = root["listen"];
  w.ExpectKeys(listen, "listen", {"grpc", "http", "ops"});
  if (!listen["grpc"]) w.Fail(listen, "missing required key \"listen.grpc\"");
  c.listen_grpc = w.Endpoint(listen["grpc"], "listen.grpc", true);
  if (listen["http"]) c.listen_http = w.Endpoint(listen["http"], "listen.http", true);
  if (listen["ops"]) c.listen_ops = w.Endpoint(listen["ops"], "listen.ops", true);

  const auto& tls = root["tls"];
  w.ExpectKeys(tls, "tls", {"ca", "cert", "key", "reload_interval", "crl"});
  for (const char* req : {"ca", "cert", "key"}) {
    if (!tls[req]) w.Fail(tls, fedgate::StrCat("missing required key \"tls.", req, "\""));
  }
  c.tls_ca = Resolve(base_dir, w.Str(tls["ca"], "tls.ca"));
  c.tls_cert = Resolve(base_dir, w.Str(tls["cert"], "tls.cert"));
  c.tls_key = Resolve(base_dir, w.Str(tls["key"], "tls.key"));
  for (const auto& [key, file] : {std::pair<const char*, std::string>{"ca", c.tls_ca},
                                  {"cert", c.tls_cert},
                                  {"key", c.tls_key}}) {
    std::ifstream f(file);
    if (!f) w.Fail(tls[key], fedgate::StrCat("\"tls.", key, "\": cannot read file ", file));
  }
  if (tls["crl"]) {
    c.tls_crl = Resolve(base_dir, w.Str(tls["crl"], "tls.crl"));
    std::ifstream f(c.tls_crl);
    if (!f) w.Fail(tls["crl"], fedgate::StrCat("\"tls.crl\": cannot read file ", c.tls_crl));
    std::stringstream text;
    text << f.rdbuf();
    if (text.str().find("-----BEGIN X509 CRL-----") == std::string::npos) {
      w.Fail(tls["crl"], fedgate::StrCat("\"tls.crl\": ", c.tls_crl, " holds no PEM CRL"));
    }
  }
  if (tls["reload_interval"]) {
    c.tls_reload_interval_ms = w.Duration(tls["reload_interval"], "tls.reload_interval");
    if (c.tls_reload_interval_ms < 1000) {
      w.Fail(tls["reload_interval"], "\"tls.reload_interval\" must be at least 1s");
    }
  }

  if (root["data_dir"]) c.data_dir = Resolve(base_dir, w.Str(root["data_dir"], "data_dir"));

  const auto& inv = root["inventory"];
  w.ExpectKeys(inv, "inventory", {"source", "nodes"});
  if (inv["source"]) c.inventory_source = w.Str(inv["source"], "inventory.source");
  if (c.inventory_source != "static" && c.inventory_source != "slurm") {
    w.Fail(inv["source"], fedgate::StrCat("\"inventory.source\": unsupported source \"",
                                       c.inventory_source, "\" (supported: static, slurm)"));
  }
  if (c.inventory_source == "slurm" && inv["nodes"]) {
    w.Fail(inv["nodes"], "\"inventory.nodes\" is not given with source slurm: Slurm lists the nodes");
  }
  if (c.inventory_source == "static" &&
      (!inv["nodes"] || !inv["nodes"].IsSequence() || inv["nodes"].size() == 0)) {
    w.Fail(inv, "\"inventory.nodes\" must list at least one node");
  }
  std::set<std::string> node_names;
  const size_t node_count = inv["nodes"] ? inv["nodes"].size() : 0;
  for (size_t i = 0; i < node_count; ++i) {
    const auto& n = inv["nodes"][i];
    auto node = ParseNode(w, n, fedgate::StrCat("inventory.nodes[", i, "]"));
    if (!node_names.insert(node.name).second) {
      w.Fail(n, fedgate::StrCat("duplicate node name \"", node.name, "\""));
    }
    c.nodes.push_back(std::move(node));
  }

  if (root["peers"] && !root["peers"].IsNull()) {
    const auto& peers = root["peers"];
    if (!peers.IsSequence()) w.Fail(peers, "\"peers\" must be a list");
    std::set<std::string> seen;
    for (size_t i = 0; i < peers.size(); ++i) {
      const std::string path = fedgate::StrCat("peers[", i, "]");
      const auto& p = peers[i];
      w.ExpectKeys(p, path, {"site", "endpoint"});
      if (!p["site"] || !p["endpoint"]) {
        w.Fail(p, fedgate::StrCat("\"", path, "\" needs both \"site\" and \"endpoint\""));
      }
      ConfigPeer cp{w.Str(p["site"], path + ".site"),
                    w.Endpoint(p["endpoint"], path + ".endpoint", false)};
      if (!federation::IsValidName(cp.site)) {
        w.Fail(p["site"], fedgate::StrCat("\"", path, ".site\": invalid site name \"", cp.site, "\""));
      }
      if (cp.site == c.site) w.Fail(p["site"], fedgate::StrCat("\"", path, "\" is this site itself"));
      if (!seen.insert(cp.site).second) {
        w.Fail(p, fedgate::StrCat("duplicate peer \"", cp.site, "\""));
      }
      c.peers.push_back(std::move(cp));
    }
  }

  if (root["accept_jobs_from"]) {
    const std::string who = w.Str(root["accept_jobs_from"], "accept_jobs_from");
    if (who != "peers" && who != "federation") {
      w.Fail(root["accept_jobs_from"],
             fedgate::StrCat("\"accept_jobs_from\": want peers or federation, got \"", who, "\""));
    }
    c.accept_jobs_from_federation = who == "federation";
  }
  if (root["advertise"]) {
    const auto& a = root["advertise"];
    w.ExpectKeys(a, "advertise",
                 {"interval", "ttl", "require_signed", "max_clock_skew", "endpoint"});
    if (a["interval"]) c.advertise_interval_ms = w.Duration(a["interval"], "advertise.interval");
    if (a["ttl"]) c.advertise_ttl_ms = w.Duration(a["ttl"], "advertise.ttl");
    if (a["require_signed"]) {
      c.advertise_require_signed = w.Scalar<bool>(a["require_signed"], "advertise.require_signed", "true or false");
    }
    if (a["max_clock_skew"]) {
      c.advertise_max_skew_ms = w.Duration(a["max_clock_skew"], "advertise.max_clock_skew");
    }
    if (a["endpoint"]) c.advertise_endpoint = w.Endpoint(a["endpoint"], "advertise.endpoint", false);
    if (c.advertise_interval_ms < 100) {
      w.Fail(a["interval"], "\"advertise.interval\" must be at least 100ms");
    }
    if (c.advertise_ttl_ms <= c.advertise_interval_ms) {
      w.Fail(a, "\"advertise.ttl\" must be longer than \"advertise.interval\"");
    }
  }
  if (root["bench"]) {
    const auto& b = root["bench"];
    w.ExpectKeys(b, "bench", {"probe_interval", "probe_duration", "link_max_age", "probe_on_peer_up"});
    if (b["probe_interval"]) {
      c.bench_probe_interval_ms = w.Duration(b["probe_interval"], "bench.probe_interval");
    }
    if (b["probe_duration"]) {
      c.bench_probe_duration_ms = w.Duration(b["probe_duration"], "bench.probe_duration");
    }
    if (b["link_max_age"]) {
      c.bench_link_max_age_ms = w.Duration(b["link_max_age"], "bench.link_max_age");
    }
    if (b["probe_on_peer_up"]) {
      c.bench_probe_on_peer_up =
          w.Scalar<bool>(b["probe_on_peer_up"], "bench.probe_on_peer_up", "true or false");
    }
  }
  if (root["jobs"]) {
    const auto& j = root["jobs"];
    w.ExpectKeys(j, "jobs", {"lease"});
    if (j["lease"]) c.jobs_lease_ms = w.Duration(j["lease"], "jobs.lease");
  }
  if (c.jobs_lease_ms == 0) c.jobs_lease_ms = std::max<int64_t>(3000, 5 * c.advertise_interval_ms);
  if (c.jobs_lease_ms < 1000) w.Fail(root["jobs"]["lease"], "\"jobs.lease\" must be at least 1s");
  if (root["api"]) {
    const auto& a = root["api"];
    w.ExpectKeys(a, "api", {"max_streams_per_caller", "read_timeout"});
    if (a["read_timeout"]) c.api_read_timeout_ms = w.Duration(a["read_timeout"], "api.read_timeout");
    if (a["max_streams_per_caller"]) {
      c.api_max_streams_per_caller = w.Scalar<int>(a["max_streams_per_caller"],
                                                   "api.max_streams_per_caller", "a number");
      if (c.api_max_streams_per_caller < 1) {
        w.Fail(a["max_streams_per_caller"], "\"api.max_streams_per_caller\" must be >= 1");
      }
    }
  }
  if (root["health"]) {
    const auto& h = root["health"];
    w.ExpectKeys(h, "health", {"command", "interval"});
    if (h["command"]) c.health_command = w.Str(h["command"], "health.command");
    if (h["interval"]) c.health_interval_ms = w.Duration(h["interval"], "health.interval");
    if (c.health_interval_ms < 100) w.Fail(h["interval"], "\"health.interval\" must be at least 100ms");
  }
  if (root["queue"]) {
    const auto& q = root["queue"];
    w.ExpectKeys(q, "queue", {"fair_share_half_life"});
    if (q["fair_share_half_life"]) {
      c.queue_fair_share_half_life_ms =
          w.Duration(q["fair_share_half_life"], "queue.fair_share_half_life");
    }
  }
  if (root["pricing"]) {
    const auto& pr = root["pricing"];
    if (!pr.IsMap()) w.Fail(pr, "\"pricing\" must map GPU models to {guaranteed, spot}");
    for (auto it = pr.begin(); it != pr.end(); ++it) {
      const std::string model = it->first.as<std::string>();
      const std::string path = fedgate::StrCat("pricing.", model);
      w.ExpectKeys(it->second, path, {"guaranteed", "spot"});
      federation::Price p;
      if (it->second["guaranteed"]) p.guaranteed = w.Scalar<double>(it->second["guaranteed"], path + ".guaranteed", "a number");
      if (it->second["spot"]) p.spot = w.Scalar<double>(it->second["spot"], path + ".spot", "a number");
      if (p.guaranteed < 0 || p.spot < 0) w.Fail(it->second, fedgate::StrCat("\"", path, "\": prices must be >= 0"));
      c.pricing[model] = p;
    }
  }
  if (root["tenants"]) {
    const auto& ts = root["tenants"];
    if (!ts.IsSequence()) w.Fail(ts, "\"tenants\" must be a list of {name, gpus, models, borrow, weight}");
    std::set<std::string> seen;
    for (size_t i = 0; i < ts.size(); ++i) {
      const auto& t = ts[i];
      const std::string path = fedgate::StrCat("tenants[", i, "]");
      w.ExpectKeys(t, path, {"name", "gpus", "models", "borrow", "weight"});
      federation::TenantQuota q;
      q.tenant = w.Str(t["name"], path + ".name");
      if (!federation::IsValidName(q.tenant)) {
        w.Fail(t["name"], fedgate::StrCat("\"", path, ".name\": invalid tenant name \"", q.tenant, "\""));
      }
      if (!seen.insert(q.tenant).second) {
        w.Fail(t["name"], fedgate::StrCat("\"", path, ".name\": tenant \"", q.tenant, "\" is listed twice"));
      }
      auto count = [&](const YAML::Node& n, const std::string& key) -> uint32_t {
        const int64_t v = w.Scalar<int64_t>(n, key, "an integer");
        if (v < 0 || v > 1'000'000) w.Fail(n, fedgate::StrCat("\"", key, "\" must be between 0 and 1000000"));
        return static_cast<uint32_t>(v);
      };
      q.gpus = count(t["gpus"], path + ".gpus");
      if (t["borrow"]) q.borrow = count(t["borrow"], path + ".borrow");
      if (t["weight"]) q.weight = w.Scalar<double>(t["weight"], path + ".weight", "a number");
      if (t["models"]) {
        if (!t["models"].IsMap()) w.Fail(t["models"], fedgate::StrCat("\"", path, ".models\" must map GPU models to GPU counts"));
        for (auto it = t["models"].begin(); it != t["models"].end(); ++it) {
          const std::string model = it->first.as<std::string>();
          q.models[model] = count(it->second, fedgate::StrCat(path, ".models.", model));
        }
      }
      if (auto st = federation::ValidateQuota(q); !st.ok()) w.Fail(t, fedgate::StrCat("\"", path, "\": ", st.message()));
      c.tenants.push_back(std::move(q));
    }
  }
  if (root["preemption"]) {
    const auto& p = root["preemption"];
    w.ExpectKeys(p, "preemption", {"grace", "min_runtime"});
    if (p["grace"]) c.preemption_grace_ms = w.Duration(p["grace"], "preemption.grace");
    if (p["min_runtime"]) {
      // 0s is the documented default, so it is allowed here.
      auto ms = federation::ParseDurationMs(w.Str(p["min_runtime"], "preemption.min_runtime"));
      if (!ms.ok() || *ms < 0) {
        w.Fail(p["min_runtime"], fedgate::StrCat("\"preemption.min_runtime\": ",
                                                 ms.ok() ? "must be >= 0" : ms.status().message()));
      }
      c.preemption_min_runtime_ms = *ms;
    }
  }
  if (root["retention"]) {
    const auto& r = root["retention"];
    w.ExpectKeys(r, "retention", {"logs", "jobs"});
    if (r["logs"]) c.retention_logs_ms = w.Duration(r["logs"], "retention.logs");
    if (r["jobs"]) c.retention_jobs_ms = w.Duration(r["jobs"], "retention.jobs");
  }
  if (root["executor"]) {
    const auto& e = root["executor"];
    w.ExpectKeys(e, "executor", {"kind", "run_as", "work_dir", "port_range", "memory_limit", "pids_limit"});
    if (e["memory_limit"]) {
      // Bytes, or with a binary suffix: 512Mi, 64Gi.
      const std::string m = w.Str(e["memory_limit"], "executor.memory_limit");
      char* end = nullptr;
      const double n = std::strtod(m.c_str(), &end);
      const std::string unit = end ? end : "";
      const double scale = unit.empty() ? 1 : unit == "Ki" ? 1024.0 : unit == "Mi" ? 1048576.0
                         : unit == "Gi" ? 1073741824.0 : unit == "Ti" ? 1099511627776.0 : -1;
      if (end == m.c_str() || scale < 0 || n <= 0) {
        w.Fail(e["memory_limit"], fedgate::StrCat("\"executor.memory_limit\": want bytes or "
                                                  "N{Ki,Mi,Gi,Ti}, got \"", m, "\""));
      }
      c.executor_memory_limit = static_cast<int64_t>(n * scale);
    }
    if (e["pids_limit"]) {
      c.executor_pids_limit = w.Scalar<int64_t>(e["pids_limit"], "executor.pids_limit", "an integer");
      if (c.executor_pids_limit <= 0) w.Fail(e["pids_limit"], "\"executor.pids_limit\" must be > 0");
    }
    if (e["port_range"]) {
      const std::string r = w.Str(e["port_range"], "executor.port_range");
      unsigned lo = 0, hi = 0;
      char tail = 0;
      if (std::sscanf(r.c_str(), "%u-%u%c", &lo, &hi, &tail) != 2 || lo < 1024 || hi > 65535 ||
          lo > hi) {
        w.Fail(e["port_range"], fedgate::StrCat("\"executor.port_range\": want LO-HI within "
                                                "1024-65535, got \"", r, "\""));
      }
      c.executor_port_lo = lo;
      c.executor_port_hi = hi;
    }
    if (e["kind"]) c.executor_kind = w.Str(e["kind"], "executor.kind");
    if (e["run_as"]) c.executor_run_as = w.Str(e["run_as"], "executor.run_as");
    if (c.executor_run_as == "root" || c.executor_run_as == "0") {
      w.Fail(e["run_as"], "\"executor.run_as\": ranks never run as root");
    }
    if (e["work_dir"]) c.executor_work_dir = Resolve(base_dir, w.Str(e["work_dir"], "executor.work_dir"));
    if (c.executor_kind != "process" && c.executor_kind != "slurm") {
      w.Fail(e["kind"], fedgate::StrCat("\"executor.kind\": unsupported executor \"",
                                     c.executor_kind, "\" (supported: process, slurm)"));
    }
  }
  if ((c.executor_kind == "slurm") != (c.inventory_source == "slurm")) {
    w.Fail(root["executor"] ? root["executor"] : root,
           "\"executor.kind: slurm\" and \"inventory.source: slurm\" go together");
  }
  if (root["slurm"]) {
    const auto& sl = root["slurm"];
    w.ExpectKeys(sl, "slurm", {"partition", "conf", "gpu_models", "accounts"});
    if (sl["partition"]) c.slurm_partition = w.Str(sl["partition"], "slurm.partition");
    if (sl["conf"]) c.slurm_conf = Resolve(base_dir, w.Str(sl["conf"], "slurm.conf"));
    for (const char* key : {"gpu_models", "accounts"}) {
      if (!sl[key]) continue;
      if (!sl[key].IsMap()) w.Fail(sl[key], fedgate::StrCat("\"slurm.", key, "\" must be a mapping"));
      for (auto it = sl[key].begin(); it != sl[key].end(); ++it) {
        const std::string k = it->first.as<std::string>();
        auto& dst = std::string_view(key) == "gpu_models" ? c.slurm_gpu_models : c.slurm_accounts;
        dst[k] = w.Str(it->second, fedgate::StrCat("slurm.", key, ".", k));
      }
    }
  } else if (c.inventory_source == "slurm") {
    w.Fail(root, "\"slurm\" (partition, conf, gpu_models) is needed with source slurm");
  }
  if (c.executor_work_dir.empty()) c.executor_work_dir = "/var/tmp/fedgate-work/" + c.site;
  {
    // Ranks must reach their folder, and must not reach data_dir.
    const std::string data = c.data_dir + "/";
    if ((c.executor_work_dir + "/").rfind(data, 0) == 0) {
      w.Fail(root["executor"] ? root["executor"]["work_dir"] : root,
             "\"executor.work_dir\" must not be inside data_dir (ranks cannot enter it)");
    }
  }
  return c;
}

}  // namespace

absl::StatusOr<Config> ParseConfig(const std::string& yaml_text, const std::string& base_dir,
                                   const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        fedgate::StrCat(source, ":", e.mark.line + 1, ": malformed YAML: ", e.msg));
  }
  try {
    return Walk(root, base_dir, Walker(source));
  } catch (const ConfigError& e) {
    return absl::InvalidArgumentError(e.message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        fedgate::StrCat(source, ":", e.mark.line + 1, ": ", e.msg));
  }
}

absl::StatusOr<Config> LoadConfig(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(fedgate::StrCat("cannot read config file ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string dir = fs::absolute(fs::path(path)).parent_path().string();
  auto c = ParseConfig(ss.str(), dir, path);
  if (c.ok()) c->path = path;
  return c;
}

}  // namespace fedgate::gateway
