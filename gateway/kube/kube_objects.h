// The objects a Kubernetes site creates, built in one place so their shape
// is tested (against the published schemas too) apart from the API calls.
//
// A slice's hold: one ConfigMap that records the slice (the owner of its
// pods: deleting it deletes them), and per node one pod bound to the node
// (spec.nodeName) with one container per GPU, each with an nvidia.com/gpu
// limit of 1. The kubelet admits the pod at once, so from Prepare on the
// GPUs are the pod's and no other pod can take them. An init container
// holds the pod until the commit: it waits for the annotation
// fedgate.io/committed (read through a downward API volume). Each rank's
// environment is its container's env, each variable from an annotation
// (valueFrom fieldRef), which the kubelet reads when it starts the
// container, after the init step: the commit writes them first. Abort =
// delete the ConfigMap.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gateway/kube/kube_json.h"

namespace fedgate::gateway::kube {

inline constexpr const char* kHoldLabel = "fedgate.io/hold";
inline constexpr const char* kCommitted = "fedgate.io/committed";
inline constexpr const char* kCommand = "fedgate.io/command";
inline constexpr const char* kPodInfoMount = "/etc/fedgate/podinfo";

// DESIGN.md's rank environment: each its own annotation and env entry.
// Any other variable of a rank (the job's env, dataset folders) travels in
// one script of exports (annotation fedgate.io/<container>.env).
const std::vector<std::string>& RankVariables();
// The annotation holding `var` of `container` ("fedgate.io/rank-0.RANK").
std::string RankAnnotation(const std::string& container, const std::string& var);

struct HoldNames {
  std::string id;         // 12 hex digits, also the fedgate.io/hold label
  std::string configmap;  // fedgate-hold-<id>
  std::string Pod(size_t node_index) const;
};
HoldNames NamesOf(uint64_t id);
// A hold id's text (the backend id of every node of the hold).
std::string HoldId(uint64_t id);

struct HoldSpec {
  uint64_t id = 0;
  std::string namespace_;
  std::string site, job, attempt;
  std::string image;
  bool host_network = false;
  int64_t grace_s = 30;
};

Json SliceConfigMap(const HoldSpec& h);
// The pod of `node` (index `i` in the hold's node order) with `gpus` rank
// containers, each limited to one of `resource` (nvidia.com/gpu, or a MIG
// profile's nvidia.com/mig-…), owned by the ConfigMap `owner_uid`.
Json HoldPod(const HoldSpec& h, const std::string& node, size_t i, uint32_t gpus,
             const std::string& owner_uid, const std::string& resource = "nvidia.com/gpu");

// The commit of one rank: its variables, its other exports and the job's
// command, as annotations (a merge patch's metadata.annotations).
Json CommitAnnotations(const std::string& container,
                       const std::vector<std::pair<std::string, std::string>>& env,
                       const std::vector<std::string>& command);
// Every rank container of the pod has its commit written.
bool AllRanksCommitted(const Json& pod);

// `export K='V'` lines for the variables sh can name (others are left out).
std::string ExportScript(const std::vector<std::pair<std::string, std::string>>& env);
std::string ShellQuote(const std::string& s);

}  // namespace fedgate::gateway::kube
