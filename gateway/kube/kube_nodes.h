// What a Kubernetes site can offer, from the API's node and pod lists:
// GPUs = a node's allocatable nvidia.com/gpu minus what every
// non-terminated pod bound to it requests, in any namespace, so GPUs the
// cluster's own users hold are never offered. MIG slices the device plugin
// exposes (nvidia.com/mig-<profile>, its "mixed" strategy) are offered the
// same way, each profile of a node as a node of its own (as the static
// inventory's mig: makes them, docs/services.md). Pure: no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gateway/kube/kube_json.h"

namespace fedgate::gateway::kube {

inline constexpr const char* kGpuResource = "nvidia.com/gpu";
inline constexpr const char* kMigResourcePrefix = "nvidia.com/mig-";

struct KubeNode {
  std::string name;       // as offered: the API's name, "<name>-mig-<profile>" for slices
  std::string kube_name;  // the API's node name
  std::string resource = kGpuResource;  // what a pod asks for: nvidia.com/gpu or nvidia.com/mig-…
  std::string mig_profile;              // "" for whole GPUs
  std::string address;  // InternalIP, else the first address
  std::string model;    // from the model label ("GPU" when unlabelled); "<model> MIG <profile>"
  uint32_t gpus = 0;       // allocatable (slices, for a MIG profile)
  uint32_t requested = 0;  // by non-terminated pods bound to it (anyone's)
  bool usable = true;      // Ready and schedulable
  std::string why_not;     // why not usable: "NotReady", "cordoned"
};

// The GPUs a pod asks for of `resource`: the larger of its containers' sum
// and its largest init container (as the scheduler counts); requests, else
// limits (extended resources have both equal).
uint32_t PodRequest(const Json& pod, const std::string& resource = kGpuResource);
// A pod that still holds what it asked for: not Succeeded or Failed.
bool PodHolds(const Json& pod);
bool MatchesSelector(const Json& obj, const std::map<std::string, std::string>& selector);

// Nodes of `node_list` that match `selector` and have GPUs, with what the
// pods of `pod_list` (a list of all namespaces) request on each.
std::vector<KubeNode> GpuNodes(const Json& node_list, const Json& pod_list,
                               const std::map<std::string, std::string>& selector,
                               const std::string& model_label);

// "k1=v1,k2=v2" for a labelSelector query.
std::string SelectorText(const std::map<std::string, std::string>& selector);

}  // namespace fedgate::gateway::kube
