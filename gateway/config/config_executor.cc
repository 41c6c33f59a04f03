// The executor section and the resource managers behind it: executor:,
// slurm:, kubernetes:, and the work folder's default and checks.
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

void ParseExecutor(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["executor"]) {
    const auto& e = root["executor"];
    w.ExpectKeys(e, "executor", {"kind", "run_as", "work_dir", "port_range", "memory_limit", "pids_limit"});
    if (e["memory_limit"]) {
      // Bytes, or with a binary suffix: 512Mi, 64Gi.
      const std::string m = w.Str(e["memory_limit"], "executor.memory_limit");
      const size_t digits = m.find_first_of("KMGT");
      const std::string unit = digits == std::string::npos ? "" : m.substr(digits);
      const double scale = unit.empty() ? 1 : unit == "Ki" ? 1024.0 : unit == "Mi" ? 1048576.0
                         : unit == "Gi" ? 1073741824.0 : unit == "Ti" ? 1099511627776.0 : -1;
      const auto n = ParseDouble(std::string_view(m).substr(0, digits));
      if (!n || scale < 0 || *n <= 0 || *n * scale >= 9.2e18) {
        w.Fail(e["memory_limit"], StrCat("\"executor.memory_limit\": want bytes or "
                                         "N{Ki,Mi,Gi,Ti}, got \"", m, "\""));
      }
      c.executor.memory_limit = static_cast<int64_t>(*n * scale);
    }
    if (e["pids_limit"]) {
      c.executor.pids_limit = w.Scalar<int64_t>(e["pids_limit"], "executor.pids_limit", "an integer");
      if (c.executor.pids_limit <= 0) w.Fail(e["pids_limit"], "\"executor.pids_limit\" must be > 0");
    }
    if (e["port_range"]) {
      const std::string r = w.Str(e["port_range"], "executor.port_range");
      const size_t dash = r.find('-');
      const auto lo = ParseNumber<uint32_t>(std::string_view(r).substr(0, dash));
      const auto hi = dash == std::string::npos
                          ? std::nullopt
                          : ParseNumber<uint32_t>(std::string_view(r).substr(dash + 1));
      if (!lo || !hi || *lo < 1024 || *hi > 65535 || *lo > *hi) {
        w.Fail(e["port_range"], StrCat("\"executor.port_range\": want LO-HI within "
                                       "1024-65535, got \"", r, "\""));
      }
      c.executor.port_lo = *lo;
      c.executor.port_hi = *hi;
    }
    if (e["kind"]) c.executor.kind = w.Str(e["kind"], "executor.kind");
    if (e["run_as"]) c.executor.run_as = w.Str(e["run_as"], "executor.run_as");
    if (c.executor.run_as == "root" || c.executor.run_as == "0") {
      w.Fail(e["run_as"], "\"executor.run_as\": ranks never run as root");
    }
    if (e["work_dir"]) c.executor.work_dir = Resolve(base_dir, w.Str(e["work_dir"], "executor.work_dir"));
    if (c.executor.kind != "process" && c.executor.kind != "slurm" &&
        c.executor.kind != "kubernetes") {
      w.Fail(e["kind"], StrCat("\"executor.kind\": unsupported executor \"",
                                     c.executor.kind, "\" (supported: process, slurm, kubernetes)"));
    }
  }
  if ((c.executor.kind == "slurm") != (c.inventory.source == "slurm")) {
    w.Fail(root["executor"] ? root["executor"] : root,
           "\"executor.kind: slurm\" and \"inventory.source: slurm\" go together");
  }
  if ((c.executor.kind == "kubernetes") != (c.inventory.source == "kubernetes")) {
    w.Fail(root["executor"] ? root["executor"] : root,
           "\"executor.kind: kubernetes\" and \"inventory.source: kubernetes\" go together");
  }
}

void ParseKubernetes(const YAML::Node& root, const std::string& base_dir, const YamlWalker& w,
                     Config& c) {
  const auto& k = root["kubernetes"];
  if (!k) {
    if (c.inventory.source == "kubernetes") {
      w.Fail(root, "\"kubernetes\" (kubeconfig, namespace, node_selector) is needed with source "
                   "kubernetes");
    }
    return;
  }
  w.ExpectKeys(k, "kubernetes", {"kubeconfig", "namespace", "node_selector", "gpu_model_label",
                                 "image", "host_network", "tenant_namespaces"});
  auto& kc = c.kubernetes;
  if (k["kubeconfig"]) kc.kubeconfig = Resolve(base_dir, w.Str(k["kubeconfig"], "kubernetes.kubeconfig"));
  if (k["namespace"]) kc.namespace_ = w.Str(k["namespace"], "kubernetes.namespace");
  if (k["gpu_model_label"]) {
    kc.gpu_model_label = w.Str(k["gpu_model_label"], "kubernetes.gpu_model_label");
  }
  if (k["image"]) kc.image = w.Str(k["image"], "kubernetes.image");
  if (k["host_network"]) {
    kc.host_network = w.Scalar<bool>(k["host_network"], "kubernetes.host_network", "true or false");
  }
  // Namespaces and label values as Kubernetes accepts them (DNS-1123 labels;
  // values up to 63 of [A-Za-z0-9._-]), so a typo fails here, not at a pod.
  const auto dns_label = federation::IsValidName;
  if (!dns_label(kc.namespace_)) {
    w.Fail(k["namespace"], StrCat("\"kubernetes.namespace\": \"", kc.namespace_,
                                  "\" is not a valid namespace (want 1-63 of [a-z0-9-])"));
  }
  for (const char* key : {"node_selector", "tenant_namespaces"}) {
    if (!k[key]) continue;
    if (!k[key].IsMap()) w.Fail(k[key], StrCat("\"kubernetes.", key, "\" must be a mapping"));
    for (auto it = k[key].begin(); it != k[key].end(); ++it) {
      const std::string name = it->first.as<std::string>();
      const std::string path = StrCat("kubernetes.", key, ".", name);
      const std::string value = w.Str(it->second, path);
      if (std::string_view(key) == "tenant_namespaces") {
        if (!dns_label(value)) {
          w.Fail(it->second, StrCat("\"", path, "\": \"", value, "\" is not a valid namespace"));
        }
        kc.tenant_namespaces[name] = value;
      } else {
        const bool ok = value.size() <= 63 && std::all_of(value.begin(), value.end(), [](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
        });
        if (!ok) w.Fail(it->second, StrCat("\"", path, "\": \"", value, "\" is not a label value"));
        kc.node_selector[name] = value;
      }
    }
  }
}

void ParseSlurm(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (root["slurm"]) {
    const auto& sl = root["slurm"];
    w.ExpectKeys(sl, "slurm", {"partition", "conf", "gpu_models", "accounts"});
    if (sl["partition"]) c.slurm.partition = w.Str(sl["partition"], "slurm.partition");
    if (sl["conf"]) c.slurm.conf = Resolve(base_dir, w.Str(sl["conf"], "slurm.conf"));
    for (const char* key : {"gpu_models", "accounts"}) {
      if (!sl[key]) continue;
      if (!sl[key].IsMap()) w.Fail(sl[key], StrCat("\"slurm.", key, "\" must be a mapping"));
      for (auto it = sl[key].begin(); it != sl[key].end(); ++it) {
        const std::string k = it->first.as<std::string>();
        auto& dst = std::string_view(key) == "gpu_models" ? c.slurm.gpu_models : c.slurm.accounts;
        dst[k] = w.Str(it->second, StrCat("slurm.", key, ".", k));
      }
    }
  } else if (c.inventory.source == "slurm") {
    w.Fail(root, "\"slurm\" (partition, conf, gpu_models) is needed with source slurm");
  }
}

void CheckWorkDir(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c) {
  if (c.executor.work_dir.empty()) c.executor.work_dir = "/var/tmp/fedgate-work/" + c.site;
  {
    // Ranks must reach their folder, and must not reach data_dir.
    const std::string data = c.data_dir + "/";
    if ((c.executor.work_dir + "/").rfind(data, 0) == 0) {
      w.Fail(root["executor"] ? root["executor"]["work_dir"] : root,
             "\"executor.work_dir\" must not be inside data_dir (ranks cannot enter it)");
    }
  }
}

}  // namespace fedgate::gateway::config_sections
