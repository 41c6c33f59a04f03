// kube-objects-dump DIR: writes the objects a Kubernetes site creates (a
// slice's ConfigMap and hold pods, as kube_objects.cc builds them) as JSON
// files, for validation against the published schemas (schemas.sh).
#include <fstream>
#include <iostream>

#include "gateway/kube/kube_objects.h"

int main(int argc, char** argv) {
  using namespace fedgate::gateway::kube;  // NOLINT
  if (argc != 2) {
    std::cerr << "usage: kube-objects-dump DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  HoldSpec h;
  h.id = 0x5eedf00d1234;
  h.namespace_ = "fedgate-jobs";
  h.site = "cn-hangzhou";
  h.job = "j-4ba0ab88c1723ec6";
  h.attempt = "2";
  h.image = "nvcr.io/nvidia/pytorch:24.05-py3";
  std::ofstream(dir + "/configmap.json") << ToJson(SliceConfigMap(h));
  // A pod as it is once committed: its ranks' annotations written.
  Json pod = HoldPod(h, "gpu-node-1", 0, 4, "0b1c2d3e-0000-4000-8000-000000000001");
  for (int r = 0; r < 4; ++r) {
    MergePatch(Mutable(&pod, {"metadata", "annotations"}),
               CommitAnnotations("rank-" + std::to_string(r), {{"RANK", std::to_string(r)}, {"MASTER_ADDR", "10.0.0.1"}},
                                 {"python3", "train.py"}));
  }
  *Mutable(&pod, {"metadata", "annotations", kCommitted}) = Str("true");
  std::ofstream(dir + "/pod.json") << ToJson(pod);
  h.host_network = true;
  std::ofstream(dir + "/pod-host-network.json")
      << ToJson(HoldPod(h, "gpu-node-2", 1, 1, "0b1c2d3e-0000-4000-8000-000000000001"));
  std::cout << "wrote configmap.json, pod.json, pod-host-network.json to " << dir << "\n";
  return 0;
}
