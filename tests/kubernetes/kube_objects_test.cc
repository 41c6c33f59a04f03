// The pure part of a Kubernetes site: JSON helpers, merge patches,
// quantities, and what nodes and pods leave free.
#include <gtest/gtest.h>

#include <map>

#include "gateway/kube/kube_json.h"
#include "gateway/kube/kube_nodes.h"
#include "gateway/kube/kube_objects.h"

namespace fedgate::gateway::kube {
namespace {

Json J(const std::string& text) {
  auto j = ParseJson(text);
  EXPECT_TRUE(j.ok()) << j.status() << " in " << text;
  return j.ok() ? *j : Json();
}

TEST(KubeJson, PathsReadAndMake) {
  Json o = J(R"({"metadata":{"name":"a","labels":{"x":"1"}},"spec":{"n":3}})");
  EXPECT_EQ(FindString(o, {"metadata", "name"}), "a");
  EXPECT_EQ(FindString(o, {"metadata", "missing"}), "");
  EXPECT_EQ(FindString(o, {"spec", "n"}), "");  // a number is not a string
  EXPECT_EQ(FindNumber(o, {"spec", "n"}), 3);
  EXPECT_EQ(Find(o, {"metadata", "name", "deeper"}), nullptr);
  *Mutable(&o, {"status", "phase"}) = Str("Running");
  EXPECT_EQ(FindString(o, {"status", "phase"}), "Running");
  Erase(&o, {"metadata", "labels"});
  EXPECT_EQ(Find(o, {"metadata", "labels"}), nullptr);
  EXPECT_FALSE(ParseJson("{not json").ok());
}

TEST(KubeJson, MergePatchFollowsRfc7386) {
  Json target = J(R"({"a":"b","c":{"d":"e","f":"g"},"l":[1,2]})");
  MergePatch(&target, J(R"({"a":"z","c":{"f":null},"l":[3],"n":{"m":"x"}})"));
  EXPECT_TRUE(Equal(target, J(R"({"a":"z","c":{"d":"e"},"l":[3],"n":{"m":"x"}})")))
      << ToJson(target);
}

TEST(KubeJson, QuantityCountsWholeNumbersOnly) {
  const Json four = Str("4");
  EXPECT_EQ(QuantityCount(&four), 4);
  Json n = Num(2), frac = Num(1.5), neg = Str("-1"), milli = Str("500m");
  EXPECT_EQ(QuantityCount(&n), 2);
  EXPECT_FALSE(QuantityCount(&frac));
  EXPECT_FALSE(QuantityCount(&neg));
  EXPECT_FALSE(QuantityCount(&milli));
  EXPECT_FALSE(QuantityCount(nullptr));
}

Json Node(const std::string& name, int gpus, bool ready = true, bool cordoned = false,
          const std::string& pool = "true") {
  Json n = J(R"({"metadata":{"labels":{"nvidia.com/gpu.product":"NVIDIA-A100-SXM4-80GB"}},
                 "status":{"addresses":[{"type":"Hostname","address":"h"},
                                        {"type":"InternalIP","address":"10.0.0.7"}]}})");
  *Mutable(&n, {"metadata", "name"}) = Str(name);
  *Mutable(&n, {"metadata", "labels", "fedgate.io/pool"}) = Str(pool);
  *Mutable(&n, {"status", "allocatable", kGpuResource}) = Str(std::to_string(gpus));
  Json cond = Obj();
  *Mutable(&cond, {"type"}) = Str("Ready");
  *Mutable(&cond, {"status"}) = Str(ready ? "True" : "False");
  *Append(Mutable(&n, {"status", "conditions"})) = cond;
  if (cordoned) *Mutable(&n, {"spec", "unschedulable"}) = Bool(true);
  return n;
}

Json Pod(const std::string& node, const std::string& phase, int gpus, int init_gpus = 0,
         bool requests = false) {
  Json p = Obj();
  *Mutable(&p, {"spec", "nodeName"}) = Str(node);
  *Mutable(&p, {"status", "phase"}) = Str(phase);
  Json c = Obj();
  *Mutable(&c, {"resources", requests ? "requests" : "limits", kGpuResource}) = Str(std::to_string(gpus));
  *Append(Mutable(&p, {"spec", "containers"})) = c;
  *Append(Mutable(&p, {"spec", "containers"})) = c;  // two containers: counted twice
  if (init_gpus > 0) {
    Json i = Obj();
    *Mutable(&i, {"resources", "limits", kGpuResource}) = Str(std::to_string(init_gpus));
    *Append(Mutable(&p, {"spec", "initContainers"})) = i;
  }
  return p;
}

Json ListOf(std::vector<Json> items) {
  Json l = Obj();
  Json* arr = Mutable(&l, {"items"});
  *arr = List();
  for (auto& i : items) *Append(arr) = i;
  return l;
}

TEST(KubeNodes, PodRequestIsContainersSumOrLargestInit) {
  EXPECT_EQ(PodRequest(Pod("n", "Running", 1)), 2u);
  EXPECT_EQ(PodRequest(Pod("n", "Running", 1, 3)), 3u);
  EXPECT_EQ(PodRequest(Pod("n", "Running", 2, 0, true)), 4u);
  EXPECT_EQ(PodRequest(J(R"({"spec":{"containers":[{"name":"c"}]}})")), 0u);
}

TEST(KubeNodes, FreeIsAllocatableMinusEveryLivePodOnTheNode) {
  const auto nodes = ListOf({Node("n1", 4), Node("n2", 4), Node("cpu", 0)});
  // A foreign pod holding 2 (two containers of 1) on n1; finished pods hold
  // nothing; a pending pod not yet bound holds nothing either.
  const auto pods = ListOf({Pod("n1", "Running", 1), Pod("n2", "Succeeded", 2),
                            Pod("n2", "Failed", 2), Pod("", "Pending", 1),
                            Pod("n2", "Pending", 0, 1)});
  const auto out = GpuNodes(nodes, pods, {{"fedgate.io/pool", "true"}}, "nvidia.com/gpu.product");
  ASSERT_EQ(out.size(), 2u);  // the node without GPUs is not a GPU node
  EXPECT_EQ(out[0].name, "n1");
  EXPECT_EQ(out[0].gpus, 4u);
  EXPECT_EQ(out[0].requested, 2u);
  EXPECT_EQ(out[0].address, "10.0.0.7");
  EXPECT_EQ(out[0].model, "NVIDIA-A100-SXM4-80GB");
  EXPECT_TRUE(out[0].usable);
  EXPECT_EQ(out[1].requested, 1u);  // the pending pod bound to n2 (its init container)
}

TEST(KubeNodes, NotReadyCordonedAndUnselectedNodesAreNotOffered) {
  const auto nodes = ListOf({Node("down", 4, false), Node("cordoned", 4, true, true),
                             Node("other-pool", 4, true, false, "false"), Node("ok", 2)});
  const auto out = GpuNodes(nodes, ListOf({}), {{"fedgate.io/pool", "true"}}, "x");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].name, "cordoned");
  EXPECT_FALSE(out[0].usable);
  EXPECT_EQ(out[0].why_not, "cordoned");
  EXPECT_EQ(out[1].name, "down");
  EXPECT_EQ(out[1].why_not, "NotReady");
  EXPECT_TRUE(out[2].usable);
  EXPECT_EQ(out[2].model, "GPU");  // no model label
  EXPECT_EQ(SelectorText({{"a", "1"}, {"b", "2"}}), "a=1,b=2");
}

// The device plugin's mixed strategy: whole GPUs and MIG slices of each
// profile are separate resources, each its own offer.
TEST(KubeNodes, EachMigProfileIsAnOfferOfItsOwnLessWhatPodsHoldOfIt) {
  Json n = Node("m1", 1);
  *Mutable(&n, {"status", "allocatable", "nvidia.com/mig-1g.10gb"}) = Str("7");
  *Mutable(&n, {"status", "allocatable", "nvidia.com/mig-3g.40gb"}) = Str("0");
  *Mutable(&n, {"status", "allocatable", "nvidia.com/mig-bogus"}) = Str("2");
  *Mutable(&n, {"status", "allocatable", "cpu"}) = Str("64");
  Json slices = Obj();
  *Mutable(&slices, {"spec", "nodeName"}) = Str("m1");
  *Mutable(&slices, {"status", "phase"}) = Str("Running");
  Json c = Obj();
  *Mutable(&c, {"resources", "limits", "nvidia.com/mig-1g.10gb"}) = Str("2");
  *Append(Mutable(&slices, {"spec", "containers"})) = c;
  const auto out = GpuNodes(ListOf({n}), ListOf({slices, Pod("m1", "Running", 0)}), {}, "nvidia.com/gpu.product");
  ASSERT_EQ(out.size(), 2u);  // no offer of 0 slices, none of a name that is no profile
  EXPECT_EQ(out[0].name, "m1");
  EXPECT_EQ(out[0].resource, kGpuResource);
  EXPECT_EQ(out[0].gpus, 1u);
  EXPECT_EQ(out[0].requested, 0u);  // slices held are not whole GPUs held
  EXPECT_EQ(out[1].name, "m1-mig-1g-10gb");
  EXPECT_EQ(out[1].kube_name, "m1");
  EXPECT_EQ(out[1].resource, "nvidia.com/mig-1g.10gb");
  EXPECT_EQ(out[1].mig_profile, "1g.10gb");
  EXPECT_EQ(out[1].model, "NVIDIA-A100-SXM4-80GB MIG 1g.10gb");
  EXPECT_EQ(out[1].gpus, 7u);
  EXPECT_EQ(out[1].requested, 2u);
  EXPECT_EQ(out[1].address, "10.0.0.7");
}

TEST(KubeObjects, AHoldPodIsBoundWithOneGpuContainerPerRankAndRestricted) {
  HoldSpec h;
  h.id = 0xabcdef123456;
  h.namespace_ = "jobs";
  h.site = "cn-hangzhou";
  h.job = "j-1";
  h.attempt = "2";
  h.image = "img:1";
  const Json p = HoldPod(h, "gpu-7", 1, 3, "uid-1");
  EXPECT_EQ(FindString(p, {"metadata", "name"}), "fedgate-hold-abcdef123456-1");
  EXPECT_EQ(FindString(p, {"metadata", "namespace"}), "jobs");
  EXPECT_EQ(FindString(p, {"metadata", "labels", kHoldLabel}), "abcdef123456");
  EXPECT_EQ(FindString(p, {"metadata", "labels", "fedgate.io/job"}), "j-1");
  EXPECT_EQ(FindString(p, {"metadata", "labels", "fedgate.io/attempt"}), "2");
  const auto& owner = Find(p, {"metadata", "ownerReferences"})->list_value().values(0);
  EXPECT_EQ(FindString(owner, {"kind"}), "ConfigMap");
  EXPECT_EQ(FindString(owner, {"name"}), "fedgate-hold-abcdef123456");
  EXPECT_EQ(FindString(owner, {"uid"}), "uid-1");
  EXPECT_EQ(FindString(p, {"spec", "nodeName"}), "gpu-7");
  EXPECT_EQ(FindString(p, {"spec", "restartPolicy"}), "Never");
  EXPECT_FALSE(Find(p, {"spec", "hostNetwork"})->bool_value());
  EXPECT_FALSE(Find(p, {"spec", "automountServiceAccountToken"})->bool_value());
  EXPECT_TRUE(Find(p, {"spec", "securityContext", "runAsNonRoot"})->bool_value());
  EXPECT_EQ(FindString(p, {"spec", "securityContext", "seccompProfile", "type"}), "RuntimeDefault");
  const auto& cs = Find(p, {"spec", "containers"})->list_value().values();
  ASSERT_EQ(cs.size(), 3);
  EXPECT_EQ(PodRequest(p), 3u);
  for (int i = 0; i < 3; ++i) {
    const std::string name = "rank-" + std::to_string(i);
    EXPECT_EQ(FindString(cs[i], {"name"}), name);
    EXPECT_EQ(FindString(cs[i], {"image"}), "img:1");
    EXPECT_EQ(FindString(cs[i], {"resources", "limits", kGpuResource}), "1");
    EXPECT_FALSE(Find(cs[i], {"securityContext", "allowPrivilegeEscalation"})->bool_value());
    // The rank environment is the container's env, each variable from its
    // own annotation, read when the container starts.
    std::map<std::string, std::string> env;
    for (const auto& e : Find(cs[i], {"env"})->list_value().values()) {
      env[FindString(e, {"name"})] = FindString(e, {"valueFrom", "fieldRef", "fieldPath"});
    }
    for (const auto& v : RankVariables()) {
      EXPECT_EQ(env[v], "metadata.annotations['fedgate.io/" + name + "." + v + "']") << v;
    }
    EXPECT_EQ(env["FEDGATE_COMMAND"], "metadata.annotations['fedgate.io/command']");
  }
  // Held at the init step until the commit.
  const auto& init = Find(p, {"spec", "initContainers"})->list_value().values();
  ASSERT_EQ(init.size(), 1);
  EXPECT_EQ(Find(init[0], {"resources", "limits", kGpuResource}), nullptr);
  EXPECT_NE(init[0].struct_value().fields().at("command").list_value().values(2).string_value().find(
                "fedgate.io/committed=\"true\""),
            std::string::npos);
  const Json cm = SliceConfigMap(h);
  EXPECT_EQ(FindString(cm, {"metadata", "name"}), "fedgate-hold-abcdef123456");
  EXPECT_EQ(FindString(cm, {"metadata", "labels", kHoldLabel}), "abcdef123456");
}

TEST(KubeObjects, ACommitIsAnnotationsAndQuotesWhatShWillRead) {
  const Json a = CommitAnnotations(
      "rank-1", {{"RANK", "3"}, {"EVIL", "a'b $(rm -rf /) \"c\""}, {"9BAD", "x"}, {"A-B", "y"}},
      {"python3", "-c", "print('hi')"});
  EXPECT_EQ(FindString(a, {"fedgate.io/rank-1.RANK"}), "3");
  EXPECT_EQ(FindString(a, {"fedgate.io/rank-1.MASTER_ADDR"}), "");  // every variable, set or empty
  ASSERT_NE(Find(a, {"fedgate.io/rank-1.MASTER_ADDR"}), nullptr);
  const std::string exports = FindString(a, {"fedgate.io/rank-1.env"});
  EXPECT_EQ(exports, "export EVIL='a'\\''b $(rm -rf /) \"c\"'\n") << exports;  // no RANK, no 9BAD, no A-B
  EXPECT_EQ(FindString(a, {kCommand}), "'python3' '-c' 'print('\\''hi'\\'')'");

  HoldSpec h;
  h.id = 1;
  Json pod = HoldPod(h, "n", 0, 2, "u");
  EXPECT_FALSE(AllRanksCommitted(pod));
  MergePatch(Mutable(&pod, {"metadata", "annotations"}), CommitAnnotations("rank-0", {{"RANK", "0"}}, {"x"}));
  EXPECT_FALSE(AllRanksCommitted(pod));
  MergePatch(Mutable(&pod, {"metadata", "annotations"}), CommitAnnotations("rank-1", {{"RANK", "1"}}, {"x"}));
  EXPECT_TRUE(AllRanksCommitted(pod));
}

}  // namespace
}  // namespace fedgate::gateway::kube
