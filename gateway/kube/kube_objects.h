// The objects a Kubernetes site creates, built in one place so their shape
// is tested (against the published schemas too) apart from the API calls.
//
// A slice's hold: one ConfigMap that records the slice (the owner of its
// pods: deleting it deletes them), and per node one pod bound to the node
// (spec.nodeName) with one container per GPU, each with an nvidia.com/gpu
// limit of 1. The kubelet admits the pod at once, so from Prepare on the
// GPUs are the pod's and no other pod can take them. Each container waits
// until its rank's script appears in the ConfigMap (mounted as a volume)
// and then runs it: the script is written at commit, with the rank's
// environment and the job's command. Abort = delete the ConfigMap.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gateway/kube/kube_json.h"

namespace fedgate::gateway::kube {

inline constexpr const char* kHoldLabel = "fedgate.io/hold";
inline constexpr const char* kSliceMount = "/etc/fedgate/slice";

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
// containers, owned by the ConfigMap `owner_uid`.
Json HoldPod(const HoldSpec& h, const std::string& node, size_t i, uint32_t gpus,
             const std::string& owner_uid);

// The ConfigMap key of the script of `container` in the hold's pod `i`.
std::string ScriptKey(size_t node_index, const std::string& container);

// A rank's script: its environment exported, then its command exec'd (each
// word quoted for sh).
std::string RankScript(const std::vector<std::pair<std::string, std::string>>& env,
                       const std::vector<std::string>& command);
std::string ShellQuote(const std::string& s);

}  // namespace fedgate::gateway::kube
