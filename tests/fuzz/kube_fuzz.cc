// What a Kubernetes API server answers (node and pod lists, watch events)
// is read into what a site offers: any bytes must give an answer or a
// parse error, never a crash, and never more GPUs than a node allocates.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gateway/kube/kube_json.h"
#include "gateway/kube/kube_nodes.h"
#include "gateway/kube/kube_objects.h"
#include "tests/fuzz/quiet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fedgate::gateway::kube;  // NOLINT
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto v = ParseJson(text);
  if (!v.ok()) return 0;
  // The same document as the node list and as the pod list.
  for (const auto& n : GpuNodes(*v, *v, {{"fedgate.io/pool", "true"}}, "nvidia.com/gpu.product")) {
    if (n.name.empty()) std::abort();
  }
  (void)PodRequest(*v);
  (void)PodHolds(*v);
  Json target = *v;
  MergePatch(&target, *v);
  if (!Equal(target, target)) std::abort();
  (void)ToJson(target);
  if (const Json* q = Find(*v, {"q"})) (void)QuantityCount(q);
  std::vector<std::pair<std::string, std::string>> env;
  if (v->has_struct_value()) {
    for (const auto& [k, val] : v->struct_value().fields()) env.emplace_back(k, val.string_value());
  }
  (void)CommitAnnotations("rank-0", env, {text.substr(0, 64)});
  (void)AllRanksCommitted(*v);
  return 0;
}
