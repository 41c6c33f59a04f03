#include "gateway/kube/kube_objects.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "base/str_cat.h"
#include "gateway/kube/kube_nodes.h"

namespace fedgate::gateway::kube {

std::string HoldId(uint64_t id) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%012llx", static_cast<unsigned long long>(id & 0xffffffffffffULL));
  return buf;
}

HoldNames NamesOf(uint64_t id) {
  HoldNames n;
  n.id = HoldId(id);
  n.configmap = "fedgate-hold-" + n.id;
  return n;
}

std::string HoldNames::Pod(size_t node_index) const { return StrCat(configmap, "-", node_index); }

std::string ScriptKey(size_t node_index, const std::string& container) {
  return StrCat("pod-", node_index, ".", container, ".sh");
}

namespace {
Json Labels(const HoldSpec& h) {
  Json l = Obj();
  *Mutable(&l, {"app.kubernetes.io/managed-by"}) = Str("fedgate");
  *Mutable(&l, {kHoldLabel}) = Str(HoldId(h.id));
  // Label values: at most 63 of [A-Za-z0-9._-]; job ids and sites are.
  *Mutable(&l, {"fedgate.io/job"}) = Str(h.job.substr(0, 63));
  *Mutable(&l, {"fedgate.io/attempt"}) = Str(h.attempt.substr(0, 63));
  *Mutable(&l, {"fedgate.io/site"}) = Str(h.site.substr(0, 63));
  return l;
}
}  // namespace

Json SliceConfigMap(const HoldSpec& h) {
  Json cm = Obj();
  *Mutable(&cm, {"apiVersion"}) = Str("v1");
  *Mutable(&cm, {"kind"}) = Str("ConfigMap");
  *Mutable(&cm, {"metadata", "name"}) = Str(NamesOf(h.id).configmap);
  *Mutable(&cm, {"metadata", "namespace"}) = Str(h.namespace_);
  *Mutable(&cm, {"metadata", "labels"}) = Labels(h);
  *Mutable(&cm, {"data"}) = Obj();
  return cm;
}

Json HoldPod(const HoldSpec& h, const std::string& node, size_t i, uint32_t gpus,
             const std::string& owner_uid) {
  const HoldNames names = NamesOf(h.id);
  Json p = Obj();
  *Mutable(&p, {"apiVersion"}) = Str("v1");
  *Mutable(&p, {"kind"}) = Str("Pod");
  *Mutable(&p, {"metadata", "name"}) = Str(names.Pod(i));
  *Mutable(&p, {"metadata", "namespace"}) = Str(h.namespace_);
  *Mutable(&p, {"metadata", "labels"}) = Labels(h);
  *Mutable(&p, {"metadata", "annotations", "fedgate.io/node"}) = Str(node);
  Json owner = Obj();
  *Mutable(&owner, {"apiVersion"}) = Str("v1");
  *Mutable(&owner, {"kind"}) = Str("ConfigMap");
  *Mutable(&owner, {"name"}) = Str(names.configmap);
  *Mutable(&owner, {"uid"}) = Str(owner_uid);
  *Append(Mutable(&p, {"metadata", "ownerReferences"})) = owner;
  Json* spec = Mutable(&p, {"spec"});
  *Mutable(spec, {"nodeName"}) = Str(node);  // bound: the kubelet admits it, no scheduler
  *Mutable(spec, {"restartPolicy"}) = Str("Never");
  *Mutable(spec, {"hostNetwork"}) = Bool(h.host_network);
  *Mutable(spec, {"terminationGracePeriodSeconds"}) = Num(static_cast<double>(h.grace_s));
  *Mutable(spec, {"automountServiceAccountToken"}) = Bool(false);
  *Mutable(spec, {"enableServiceLinks"}) = Bool(false);
  // The restricted Pod Security level: non-root, no escalation, no
  // capabilities, the runtime's seccomp profile.
  *Mutable(spec, {"securityContext", "runAsNonRoot"}) = Bool(true);
  *Mutable(spec, {"securityContext", "runAsUser"}) = Num(1000);
  *Mutable(spec, {"securityContext", "runAsGroup"}) = Num(1000);
  *Mutable(spec, {"securityContext", "seccompProfile", "type"}) = Str("RuntimeDefault");
  Json vol = Obj();
  *Mutable(&vol, {"name"}) = Str("slice");
  *Mutable(&vol, {"configMap", "name"}) = Str(names.configmap);
  *Append(Mutable(spec, {"volumes"})) = vol;
  for (uint32_t g = 0; g < gpus; ++g) {
    const std::string c = StrCat("rank-", g);
    Json ctr = Obj();
    *Mutable(&ctr, {"name"}) = Str(c);
    *Mutable(&ctr, {"image"}) = Str(h.image);
    Json* cmd = Mutable(&ctr, {"command"});
    *cmd = List();
    *Append(cmd) = Str("sh");
    *Append(cmd) = Str("-c");
    // Held until the commit writes this rank's script.
    const std::string script = StrCat(kSliceMount, "/", ScriptKey(i, c));
    *Append(cmd) = Str(StrCat("until [ -f ", script, " ]; do sleep 1; done; exec sh ", script));
    *Mutable(&ctr, {"resources", "limits", kGpuResource}) = Str("1");
    *Mutable(&ctr, {"resources", "requests", kGpuResource}) = Str("1");
    Json mount = Obj();
    *Mutable(&mount, {"name"}) = Str("slice");
    *Mutable(&mount, {"mountPath"}) = Str(kSliceMount);
    *Mutable(&mount, {"readOnly"}) = Bool(true);
    *Append(Mutable(&ctr, {"volumeMounts"})) = mount;
    *Mutable(&ctr, {"securityContext", "allowPrivilegeEscalation"}) = Bool(false);
    *Append(Mutable(&ctr, {"securityContext", "capabilities", "drop"})) = Str("ALL");
    *Append(Mutable(spec, {"containers"})) = ctr;
  }
  return p;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string RankScript(const std::vector<std::pair<std::string, std::string>>& env,
                       const std::vector<std::string>& command) {
  std::string out = "# written by fedgate at the commit of this rank\n";
  for (const auto& [k, v] : env) {
    const bool name = !k.empty() && !std::isdigit(static_cast<unsigned char>(k[0])) &&
                      std::all_of(k.begin(), k.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                      });
    if (name) out += StrCat("export ", k, "=", ShellQuote(v), "\n");  // sh cannot name others
  }
  out += "exec";
  for (const auto& w : command) out += " " + ShellQuote(w);
  return out + "\n";
}

}  // namespace fedgate::gateway::kube
