#include "gateway/kube/kube_nodes.h"

#include <algorithm>

#include "base/str_cat.h"
#include "federation/mig.h"

namespace fedgate::gateway::kube {
namespace {

const google::protobuf::RepeatedPtrField<Json>* Items(const Json* list) {
  if (!list || !list->has_list_value()) return nullptr;
  return &list->list_value().values();
}

uint32_t ContainerRequest(const Json& c, const std::string& resource) {
  auto n = QuantityCount(Find(c, {"resources", "requests", resource}));
  if (!n) n = QuantityCount(Find(c, {"resources", "limits", resource}));
  return n ? static_cast<uint32_t>(std::min<int64_t>(*n, UINT32_MAX)) : 0;
}

}  // namespace

uint32_t PodRequest(const Json& pod, const std::string& resource) {
  uint64_t sum = 0;
  uint32_t init_max = 0;
  if (const auto* cs = Items(Find(pod, {"spec", "containers"}))) {
    for (const auto& c : *cs) sum += ContainerRequest(c, resource);
  }
  if (const auto* cs = Items(Find(pod, {"spec", "initContainers"}))) {
    for (const auto& c : *cs) init_max = std::max(init_max, ContainerRequest(c, resource));
  }
  return static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(sum, init_max), UINT32_MAX));
}

bool PodHolds(const Json& pod) {
  const std::string phase = FindString(pod, {"status", "phase"});
  return phase != "Succeeded" && phase != "Failed";
}

bool MatchesSelector(const Json& obj, const std::map<std::string, std::string>& selector) {
  for (const auto& [k, v] : selector) {
    const Json* label = Find(obj, {"metadata", "labels", k});
    if (!label || label->kind_case() != Json::kStringValue || label->string_value() != v) {
      return false;
    }
  }
  return true;
}

std::vector<KubeNode> GpuNodes(const Json& node_list, const Json& pod_list,
                               const std::map<std::string, std::string>& selector,
                               const std::string& model_label) {
  std::vector<KubeNode> out;
  const auto* nodes = Items(Find(node_list, {"items"}));
  if (!nodes) return out;
  for (const auto& n : *nodes) {
    if (!MatchesSelector(n, selector)) continue;
    KubeNode k;
    k.kube_name = k.name = FindString(n, {"metadata", "name"});
    if (k.name.empty()) continue;
    k.model = FindString(n, {"metadata", "labels", model_label});
    if (k.model.empty()) k.model = "GPU";
    if (const auto* addrs = Items(Find(n, {"status", "addresses"}))) {
      for (const auto& a : *addrs) {
        const std::string addr = FindString(a, {"address"});
        if (k.address.empty() || FindString(a, {"type"}) == "InternalIP") k.address = addr;
        if (FindString(a, {"type"}) == "InternalIP") break;
      }
    }
    bool ready = false;
    if (const auto* conds = Items(Find(n, {"status", "conditions"}))) {
      for (const auto& c : *conds) {
        if (FindString(c, {"type"}) == "Ready") ready = FindString(c, {"status"}) == "True";
      }
    }
    const Json* cordon = Find(n, {"spec", "unschedulable"});
    const bool cordoned = cordon && cordon->kind_case() == Json::kBoolValue && cordon->bool_value();
    k.usable = ready && !cordoned;
    k.why_not = !ready ? "NotReady" : cordoned ? "cordoned" : "";
    // One offer per GPU resource the node has: whole GPUs, each MIG profile.
    const Json* alloc = Find(n, {"status", "allocatable"});
    if (alloc == nullptr || !alloc->has_struct_value()) continue;
    for (const auto& [resource, quantity] : alloc->struct_value().fields()) {
      KubeNode r = k;
      r.resource = resource;
      if (resource != kGpuResource) {
        if (resource.rfind(kMigResourcePrefix, 0) != 0) continue;
        r.mig_profile = resource.substr(std::string(kMigResourcePrefix).size());
        if (!federation::IsMigProfile(r.mig_profile)) continue;
        std::string suffix = r.mig_profile;
        for (char& c : suffix) c = c == '.' ? '-' : c;
        r.name = StrCat(k.name, "-mig-", suffix);
        r.model = federation::MigModel(k.model, r.mig_profile);
      }
      auto count = QuantityCount(&quantity);
      if (!count || *count <= 0) continue;
      r.gpus = static_cast<uint32_t>(std::min<int64_t>(*count, UINT32_MAX));
      out.push_back(std::move(r));
    }
  }
  // What the pods bound to each node request of each offered resource.
  std::map<std::string, std::vector<size_t>> offers;  // by the API's node name
  for (size_t i = 0; i < out.size(); ++i) offers[out[i].kube_name].push_back(i);
  if (const auto* pods = Items(Find(pod_list, {"items"}))) {
    for (const auto& p : *pods) {
      const std::string node = FindString(p, {"spec", "nodeName"});
      if (node.empty() || !PodHolds(p)) continue;
      auto it = offers.find(node);
      if (it == offers.end()) continue;
      for (size_t i : it->second) {
        auto& k = out[i];
        k.requested = static_cast<uint32_t>(
            std::min<uint64_t>(uint64_t{k.requested} + PodRequest(p, k.resource), UINT32_MAX));
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

std::string SelectorText(const std::map<std::string, std::string>& selector) {
  std::string out;
  for (const auto& [k, v] : selector) out += StrCat(out.empty() ? "" : ",", k, "=", v);
  return out;
}

}  // namespace fedgate::gateway::kube
