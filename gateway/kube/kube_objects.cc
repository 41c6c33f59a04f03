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

const std::vector<std::string>& RankVariables() {
  static const std::vector<std::string> kVars = {
      "MASTER_ADDR",    "MASTER_PORT",      "WORLD_SIZE",       "RANK",
      "LOCAL_RANK",     "LOCAL_WORLD_SIZE", "GROUP_RANK",       "CUDA_VISIBLE_DEVICES",
      "FEDGATE_JOB_ID", "FEDGATE_SITE",     "FEDGATE_ATTEMPT",  "FEDGATE_NODE_ADDR",
      "FEDGATE_RESTART"};
  return kVars;
}

std::string RankAnnotation(const std::string& container, const std::string& var) {
  return StrCat("fedgate.io/", container, ".", var);
}

namespace {
Json FromAnnotation(const std::string& name, const std::string& key) {
  Json e = Obj();
  *Mutable(&e, {"name"}) = Str(name);
  *Mutable(&e, {"valueFrom", "fieldRef", "fieldPath"}) = Str(StrCat("metadata.annotations['", key, "']"));
  return e;
}

void Restricted(Json* ctr) {
  *Mutable(ctr, {"securityContext", "allowPrivilegeEscalation"}) = Bool(false);
  *Append(Mutable(ctr, {"securityContext", "capabilities", "drop"})) = Str("ALL");
}
}  // namespace

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
             const std::string& owner_uid, const std::string& resource) {
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
  // The pod's own annotations as a file: the init step waits on it.
  Json vol = Obj();
  *Mutable(&vol, {"name"}) = Str("podinfo");
  Json item = Obj();
  *Mutable(&item, {"path"}) = Str("annotations");
  *Mutable(&item, {"fieldRef", "fieldPath"}) = Str("metadata.annotations");
  *Append(Mutable(&vol, {"downwardAPI", "items"})) = item;
  *Append(Mutable(spec, {"volumes"})) = vol;
  Json hold = Obj();
  *Mutable(&hold, {"name"}) = Str("hold");
  *Mutable(&hold, {"image"}) = Str(h.image);
  Json* hold_cmd = Mutable(&hold, {"command"});
  for (const char* w : {"sh", "-c"}) *Append(hold_cmd) = Str(w);
  *Append(hold_cmd) = Str(StrCat("until grep -qs '^", kCommitted, "=\"true\"' ", kPodInfoMount,
                                 "/annotations; do sleep 1; done"));
  Json mount = Obj();
  *Mutable(&mount, {"name"}) = Str("podinfo");
  *Mutable(&mount, {"mountPath"}) = Str(kPodInfoMount);
  *Mutable(&mount, {"readOnly"}) = Bool(true);
  *Append(Mutable(&hold, {"volumeMounts"})) = mount;
  Restricted(&hold);
  *Append(Mutable(spec, {"initContainers"})) = hold;
  for (uint32_t g = 0; g < gpus; ++g) {
    const std::string c = StrCat("rank-", g);
    Json ctr = Obj();
    *Mutable(&ctr, {"name"}) = Str(c);
    *Mutable(&ctr, {"image"}) = Str(h.image);
    Json* cmd = Mutable(&ctr, {"command"});
    for (const char* w : {"sh", "-c"}) *Append(cmd) = Str(w);
    // The job's other variables, then its command (both written at the commit).
    *Append(cmd) = Str("eval \"$FEDGATE_RANK_EXPORTS\"; eval \"exec $FEDGATE_COMMAND\"");
    Json* env = Mutable(&ctr, {"env"});
    for (const auto& v : RankVariables()) *Append(env) = FromAnnotation(v, RankAnnotation(c, v));
    *Append(env) = FromAnnotation("FEDGATE_RANK_EXPORTS", RankAnnotation(c, "env"));
    *Append(env) = FromAnnotation("FEDGATE_COMMAND", kCommand);
    *Mutable(&ctr, {"resources", "limits", resource}) = Str("1");
    *Mutable(&ctr, {"resources", "requests", resource}) = Str("1");
    Restricted(&ctr);
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

std::string ExportScript(const std::vector<std::pair<std::string, std::string>>& env) {
  std::string out;
  for (const auto& [k, v] : env) {
    const bool name = !k.empty() && !std::isdigit(static_cast<unsigned char>(k[0])) &&
                      std::all_of(k.begin(), k.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                      });
    if (name) out += StrCat("export ", k, "=", ShellQuote(v), "\n");  // sh cannot name others
  }
  return out;
}

Json CommitAnnotations(const std::string& container,
                       const std::vector<std::pair<std::string, std::string>>& env,
                       const std::vector<std::string>& command) {
  const auto& fixed = RankVariables();
  Json a = Obj();
  std::vector<std::pair<std::string, std::string>> others;
  for (const auto& [k, v] : env) {
    if (std::find(fixed.begin(), fixed.end(), k) != fixed.end()) {
      *Mutable(&a, {RankAnnotation(container, k)}) = Str(v);
    } else {
      others.emplace_back(k, v);
    }
  }
  // Every variable of the list has its annotation, set or empty.
  for (const auto& v : fixed) {
    if (!Find(a, {RankAnnotation(container, v)})) *Mutable(&a, {RankAnnotation(container, v)}) = Str("");
  }
  *Mutable(&a, {RankAnnotation(container, "env")}) = Str(ExportScript(others));
  std::string line;
  for (const auto& w : command) line += (line.empty() ? "" : " ") + ShellQuote(w);
  *Mutable(&a, {kCommand}) = Str(line);
  return a;
}

bool AllRanksCommitted(const Json& pod) {
  const Json* cs = Find(pod, {"spec", "containers"});
  if (!cs || !cs->has_list_value()) return false;
  for (const auto& c : cs->list_value().values()) {
    if (!Find(pod, {"metadata", "annotations", RankAnnotation(FindString(c, {"name"}), "RANK")})) return false;
  }
  return true;
}

}  // namespace fedgate::gateway::kube
