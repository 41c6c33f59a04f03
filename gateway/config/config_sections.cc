// The config file, one section at a time: each function reads its keys
// of the document into its part of Config and fails with the key and line.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "base/number.h"
#include "base/str_cat.h"
#include "federation/duration.h"
#include "federation/names.h"
#include "gateway/config/config_sections.h"

namespace fedgate::gateway::config_sections {

void ParseIdentity(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (!root.IsDefined() || root.IsNull()) w.Fail(root, "the config is empty");
  w.ExpectKeys(root, "",
               {"site", "federation", "listen", "tls", "data_dir", "inventory", "peers",
                "advertise", "bench", "executor", "jobs", "api", "health", "retention", "pricing", "queue", "tenants", "preemption", "slurm", "kubernetes", "accept_jobs_from",
                "datasets", "datasets_cache"});
  for (const char* req : {"site", "federation", "listen", "tls", "inventory"}) {
    if (!root[req]) w.Fail(root, StrCat("missing required key \"", req, "\""));
  }
  c.site = w.Str(root["site"], "site");
  if (!federation::IsValidName(c.site)) {
    w.Fail(root["site"], StrCat("\"site\": invalid site name \"", c.site,
                                      "\" (want 1-63 of [a-z0-9-])"));
  }
  c.federation = w.Str(root["federation"], "federation");
  if (!federation::IsValidName(c.federation)) {
    w.Fail(root["federation"], StrCat("\"federation\": invalid name \"", c.federation, "\""));
  }
}

void ParseListen(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  const auto& listen = root["listen"];
  w.ExpectKeys(listen, "listen", {"grpc", "http", "ops", "serve"});
  if (!listen["grpc"]) w.Fail(listen, "missing required key \"listen.grpc\"");
  c.listen.grpc = w.Endpoint(listen["grpc"], "listen.grpc", true);
  if (listen["http"]) c.listen.http = w.Endpoint(listen["http"], "listen.http", true);
  if (listen["ops"]) c.listen.ops = w.Endpoint(listen["ops"], "listen.ops", true);
  if (listen["serve"]) c.listen.serve = w.Endpoint(listen["serve"], "listen.serve", true);
}

void ParseTls(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  const auto& tls = root["tls"];
  w.ExpectKeys(tls, "tls", {"ca", "cert", "key", "reload_interval", "crl"});
  for (const char* req : {"ca", "cert", "key"}) {
    if (!tls[req]) w.Fail(tls, StrCat("missing required key \"tls.", req, "\""));
  }
  c.tls.ca = Resolve(base_dir, w.Str(tls["ca"], "tls.ca"));
  c.tls.cert = Resolve(base_dir, w.Str(tls["cert"], "tls.cert"));
  c.tls.key = Resolve(base_dir, w.Str(tls["key"], "tls.key"));
  for (const auto& [key, file] : {std::pair<const char*, std::string>{"ca", c.tls.ca},
                                  {"cert", c.tls.cert},
                                  {"key", c.tls.key}}) {
    std::ifstream f(file);
    if (!f) w.Fail(tls[key], StrCat("\"tls.", key, "\": cannot read file ", file));
  }
  if (tls["crl"]) {
    c.tls.crl = Resolve(base_dir, w.Str(tls["crl"], "tls.crl"));
    std::ifstream f(c.tls.crl);
    if (!f) w.Fail(tls["crl"], StrCat("\"tls.crl\": cannot read file ", c.tls.crl));
    std::stringstream text;
    text << f.rdbuf();
    if (text.str().find("-----BEGIN X509 CRL-----") == std::string::npos) {
      w.Fail(tls["crl"], StrCat("\"tls.crl\": ", c.tls.crl, " holds no PEM CRL"));
    }
  }
  if (tls["reload_interval"]) {
    c.tls.reload_interval_ms = w.Duration(tls["reload_interval"], "tls.reload_interval");
    if (c.tls.reload_interval_ms < 1000) {
      w.Fail(tls["reload_interval"], "\"tls.reload_interval\" must be at least 1s");
    }
  }
}

void ParseInventory(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["data_dir"]) c.data_dir = Resolve(base_dir, w.Str(root["data_dir"], "data_dir"));

  const auto& inv = root["inventory"];
  w.ExpectKeys(inv, "inventory", {"source", "nodes"});
  if (inv["source"]) c.inventory.source = w.Str(inv["source"], "inventory.source");
  if (c.inventory.source != "static" && c.inventory.source != "slurm" &&
      c.inventory.source != "kubernetes") {
    w.Fail(inv["source"], StrCat("\"inventory.source\": unsupported source \"",
                                       c.inventory.source, "\" (supported: static, slurm, kubernetes)"));
  }
  if (c.inventory.source != "static" && inv["nodes"]) {
    w.Fail(inv["nodes"], StrCat("\"inventory.nodes\" is not given with source ", c.inventory.source,
                                ": its API lists the nodes"));
  }
  if (c.inventory.source == "static" &&
      (!inv["nodes"] || !inv["nodes"].IsSequence() || inv["nodes"].size() == 0)) {
    w.Fail(inv, "\"inventory.nodes\" must list at least one node");
  }
  std::set<std::string> node_names;
  const size_t node_count = inv["nodes"] ? inv["nodes"].size() : 0;
  for (size_t i = 0; i < node_count; ++i) {
    const auto& n = inv["nodes"][i];
    const std::string path = StrCat("inventory.nodes[", i, "]");
    auto node = ParseNode(w, n, path);
    std::vector<federation::Node> expanded{node};
    if (n["mig"] && n["mig"].IsScalar() && n["mig"].Scalar() == "nvidia-smi") {
      // The slices this host's driver lists, read at start.
      if (!c.inventory.mig_from_nvidia_smi.empty()) {
        w.Fail(n["mig"], StrCat("\"", path, ".mig\": only one node, this host, can take its MIG slices from "
                                "nvidia-smi (", c.inventory.mig_from_nvidia_smi, " already does)"));
      }
      c.inventory.mig_from_nvidia_smi = node.name;
    } else if (n["mig"]) {  // partitioned GPUs: one node per profile besides the whole GPUs
      auto split = federation::ExpandMig(c.site, node, ParseMig(w, n["mig"], path + ".mig"));
      if (!split.ok()) w.Fail(n["mig"], StrCat("\"", path, ".mig\": ", split.status().message()));
      expanded = std::move(*split);
    }
    for (auto& e : expanded) {
      if (!node_names.insert(e.name).second) w.Fail(n, StrCat("duplicate node name \"", e.name, "\""));
      c.nodes.push_back(std::move(e));
    }
  }
}

void ParsePeers(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["peers"] && !root["peers"].IsNull()) {
    const auto& peers = root["peers"];
    if (!peers.IsSequence()) w.Fail(peers, "\"peers\" must be a list");
    std::set<std::string> seen;
    for (size_t i = 0; i < peers.size(); ++i) {
      const std::string path = StrCat("peers[", i, "]");
      const auto& p = peers[i];
      w.ExpectKeys(p, path, {"site", "endpoint"});
      if (!p["site"] || !p["endpoint"]) {
        w.Fail(p, StrCat("\"", path, "\" needs both \"site\" and \"endpoint\""));
      }
      ConfigPeer cp{w.Str(p["site"], path + ".site"),
                    w.Endpoint(p["endpoint"], path + ".endpoint", false)};
      if (!federation::IsValidName(cp.site)) {
        w.Fail(p["site"], StrCat("\"", path, ".site\": invalid site name \"", cp.site, "\""));
      }
      if (cp.site == c.site) w.Fail(p["site"], StrCat("\"", path, "\" is this site itself"));
      if (!seen.insert(cp.site).second) {
        w.Fail(p, StrCat("duplicate peer \"", cp.site, "\""));
      }
      c.peers.push_back(std::move(cp));
    }
  }
}

void ParseAdvertise(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["accept_jobs_from"]) {
    const std::string who = w.Str(root["accept_jobs_from"], "accept_jobs_from");
    if (who != "peers" && who != "federation") {
      w.Fail(root["accept_jobs_from"],
             StrCat("\"accept_jobs_from\": want peers or federation, got \"", who, "\""));
    }
    c.accept_jobs_from_federation = who == "federation";
  }
  if (root["advertise"]) {
    const auto& a = root["advertise"];
    w.ExpectKeys(a, "advertise",
                 {"interval", "ttl", "require_signed", "max_clock_skew", "endpoint", "http_endpoint"});
    if (a["interval"]) c.advertise.interval_ms = w.Duration(a["interval"], "advertise.interval");
    if (a["ttl"]) c.advertise.ttl_ms = w.Duration(a["ttl"], "advertise.ttl");
    if (a["require_signed"]) {
      c.advertise.require_signed = w.Scalar<bool>(a["require_signed"], "advertise.require_signed", "true or false");
    }
    if (a["max_clock_skew"]) {
      c.advertise.max_skew_ms = w.Duration(a["max_clock_skew"], "advertise.max_clock_skew");
    }
    if (a["endpoint"]) c.advertise.endpoint = w.Endpoint(a["endpoint"], "advertise.endpoint", false);
    if (a["http_endpoint"]) {
      c.advertise.http_endpoint = w.Endpoint(a["http_endpoint"], "advertise.http_endpoint", false);
    }
    if (c.advertise.interval_ms < 100) {
      w.Fail(a["interval"], "\"advertise.interval\" must be at least 100ms");
    }
    if (c.advertise.ttl_ms <= c.advertise.interval_ms) {
      w.Fail(a, "\"advertise.ttl\" must be longer than \"advertise.interval\"");
    }
  }
}

void ParseBench(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["bench"]) {
    const auto& b = root["bench"];
    w.ExpectKeys(b, "bench", {"probe_interval", "probe_duration", "link_max_age", "probe_on_peer_up"});
    if (b["probe_interval"]) {
      c.bench.probe_interval_ms = w.Duration(b["probe_interval"], "bench.probe_interval");
    }
    if (b["probe_duration"]) {
      c.bench.probe_duration_ms = w.Duration(b["probe_duration"], "bench.probe_duration");
    }
    if (b["link_max_age"]) {
      c.bench.link_max_age_ms = w.Duration(b["link_max_age"], "bench.link_max_age");
    }
    if (b["probe_on_peer_up"]) {
      c.bench.probe_on_peer_up =
          w.Scalar<bool>(b["probe_on_peer_up"], "bench.probe_on_peer_up", "true or false");
    }
  }
}

void ParseJobs(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["jobs"]) {
    const auto& j = root["jobs"];
    w.ExpectKeys(j, "jobs", {"lease", "replace_timeout", "takeover_after", "takeover_stagger"});
    if (j["lease"]) c.jobs.lease_ms = w.Duration(j["lease"], "jobs.lease");
    if (j["replace_timeout"]) {
      c.jobs.replace_timeout_ms = w.Duration(j["replace_timeout"], "jobs.replace_timeout");
      if (c.jobs.replace_timeout_ms < 1000) {
        w.Fail(j["replace_timeout"], "\"jobs.replace_timeout\" must be at least 1s");
      }
    }
  }
  if (c.jobs.lease_ms == 0) c.jobs.lease_ms = std::max<int64_t>(3000, 5 * c.advertise.interval_ms);
  if (c.jobs.lease_ms < 1000) w.Fail(root["jobs"]["lease"], "\"jobs.lease\" must be at least 1s");
  const YAML::Node j = root["jobs"] ? root["jobs"] : YAML::Node();
  if (j["takeover_after"]) {
    const auto& t = j["takeover_after"];
    c.jobs.takeover_after_ms = t.IsScalar() && t.Scalar() == "off"
                                   ? 0
                                   : w.Duration(t, "jobs.takeover_after");
    if (c.jobs.takeover_after_ms != 0 && c.jobs.takeover_after_ms < 2 * c.jobs.lease_ms) {
      w.Fail(t, "\"jobs.takeover_after\" must be \"off\" or at least two leases (jobs.lease)");
    }
  }
  if (c.jobs.takeover_after_ms < 0) c.jobs.takeover_after_ms = 3 * c.jobs.lease_ms;
  if (j["takeover_stagger"]) {
    c.jobs.takeover_stagger_ms = w.Duration(j["takeover_stagger"], "jobs.takeover_stagger");
    if (c.jobs.takeover_stagger_ms < c.jobs.lease_ms / 2) {
      w.Fail(j["takeover_stagger"], "\"jobs.takeover_stagger\" must be at least half a lease");
    }
  }
  if (c.jobs.takeover_stagger_ms < 0) c.jobs.takeover_stagger_ms = c.jobs.lease_ms;
}

void ParseApi(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["api"]) {
    const auto& a = root["api"];
    w.ExpectKeys(a, "api", {"max_streams_per_caller", "read_timeout"});
    if (a["read_timeout"]) c.api.read_timeout_ms = w.Duration(a["read_timeout"], "api.read_timeout");
    if (a["max_streams_per_caller"]) {
      c.api.max_streams_per_caller = w.Scalar<int>(a["max_streams_per_caller"],
                                                   "api.max_streams_per_caller", "a number");
      if (c.api.max_streams_per_caller < 1) {
        w.Fail(a["max_streams_per_caller"], "\"api.max_streams_per_caller\" must be >= 1");
      }
    }
  }
}

void ParseHealth(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["health"]) {
    const auto& h = root["health"];
    w.ExpectKeys(h, "health", {"command", "interval"});
    if (h["command"]) c.health.command = w.Str(h["command"], "health.command");
    if (h["interval"]) c.health.interval_ms = w.Duration(h["interval"], "health.interval");
    if (c.health.interval_ms < 100) w.Fail(h["interval"], "\"health.interval\" must be at least 100ms");
  }
}

void ParseQueue(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["queue"]) {
    const auto& q = root["queue"];
    w.ExpectKeys(q, "queue", {"fair_share_half_life"});
    if (q["fair_share_half_life"]) {
      c.queue.fair_share_half_life_ms =
          w.Duration(q["fair_share_half_life"], "queue.fair_share_half_life");
    }
  }
}

void ParsePricing(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["pricing"]) {
    const auto& pr = root["pricing"];
    if (!pr.IsMap()) w.Fail(pr, "\"pricing\" must map GPU models to {guaranteed, spot}");
    for (auto it = pr.begin(); it != pr.end(); ++it) {
      const std::string model = it->first.as<std::string>();
      const std::string path = StrCat("pricing.", model);
      w.ExpectKeys(it->second, path, {"guaranteed", "spot"});
      federation::Price p;
      if (it->second["guaranteed"]) p.guaranteed = w.Scalar<double>(it->second["guaranteed"], path + ".guaranteed", "a number");
      if (it->second["spot"]) p.spot = w.Scalar<double>(it->second["spot"], path + ".spot", "a number");
      if (p.guaranteed < 0 || p.spot < 0) w.Fail(it->second, StrCat("\"", path, "\": prices must be >= 0"));
      c.pricing[model] = p;
    }
  }
}

void ParseTenants(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["tenants"]) {
    const auto& ts = root["tenants"];
    if (!ts.IsSequence()) w.Fail(ts, "\"tenants\" must be a list of {name, gpus, models, borrow, weight}");
    std::set<std::string> seen;
    for (size_t i = 0; i < ts.size(); ++i) {
      const auto& t = ts[i];
      const std::string path = StrCat("tenants[", i, "]");
      w.ExpectKeys(t, path, {"name", "gpus", "models", "borrow", "weight"});
      federation::TenantQuota q;
      q.tenant = w.Str(t["name"], path + ".name");
      if (!federation::IsValidName(q.tenant)) {
        w.Fail(t["name"], StrCat("\"", path, ".name\": invalid tenant name \"", q.tenant, "\""));
      }
      if (!seen.insert(q.tenant).second) {
        w.Fail(t["name"], StrCat("\"", path, ".name\": tenant \"", q.tenant, "\" is listed twice"));
      }
      auto count = [&](const YAML::Node& n, const std::string& key) -> uint32_t {
        const int64_t v = w.Scalar<int64_t>(n, key, "an integer");
        if (v < 0 || v > 1'000'000) w.Fail(n, StrCat("\"", key, "\" must be between 0 and 1000000"));
        return static_cast<uint32_t>(v);
      };
      q.gpus = count(t["gpus"], path + ".gpus");
      if (t["borrow"]) q.borrow = count(t["borrow"], path + ".borrow");
      if (t["weight"]) q.weight = w.Scalar<double>(t["weight"], path + ".weight", "a number");
      if (t["models"]) {
        if (!t["models"].IsMap()) w.Fail(t["models"], StrCat("\"", path, ".models\" must map GPU models to GPU counts"));
        for (auto it = t["models"].begin(); it != t["models"].end(); ++it) {
          const std::string model = it->first.as<std::string>();
          q.models[model] = count(it->second, StrCat(path, ".models.", model));
        }
      }
      if (auto st = federation::ValidateQuota(q); !st.ok()) w.Fail(t, StrCat("\"", path, "\": ", st.message()));
      c.tenants.push_back(std::move(q));
    }
  }
}

void ParsePreemption(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["preemption"]) {
    const auto& p = root["preemption"];
    w.ExpectKeys(p, "preemption", {"grace", "min_runtime"});
    if (p["grace"]) c.preemption.grace_ms = w.Duration(p["grace"], "preemption.grace");
    if (p["min_runtime"]) {
      // 0s is the documented default, so it is allowed here.
      auto ms = federation::ParseDurationMs(w.Str(p["min_runtime"], "preemption.min_runtime"));
      if (!ms.ok() || *ms < 0) {
        w.Fail(p["min_runtime"], StrCat("\"preemption.min_runtime\": ",
                                                 ms.ok() ? "must be >= 0" : ms.status().message()));
      }
      c.preemption.min_runtime_ms = *ms;
    }
  }
}

void ParseRetention(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["retention"]) {
    const auto& r = root["retention"];
    w.ExpectKeys(r, "retention", {"logs", "jobs"});
    if (r["logs"]) c.retention.logs_ms = w.Duration(r["logs"], "retention.logs");
    if (r["jobs"]) c.retention.jobs_ms = w.Duration(r["jobs"], "retention.jobs");
  }
}

}  // namespace fedgate::gateway::config_sections
