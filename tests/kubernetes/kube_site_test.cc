// A Kubernetes site's inventory: what the cluster has free on the nodes lent
// to the federation, read from fake-kube-apiserver (no real API server can
// run here), in process (KubeCluster) and through a real gateway beside a
// process site.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "gateway/exec/kube_site.h"
#include "tests/support/fake_kube/fake_kube_server.h"
#include "tests/support/jobs_fixture.h"
#include "tests/support/process.h"

namespace fedgate::testing {
namespace {

using gateway::KubeCluster;
using gateway::kube::JsonOf;
using gateway::kube::KubeAccess;
using gateway::kube::KubeClient;
using fakekube::FakeKubeServer;

std::string NodeJson(const std::string& name, int gpus, bool pool = true) {
  return R"({"metadata":{"name":")" + name + R"(","labels":{"fedgate.io/pool":")" +
         (pool ? "true" : "false") + R"(","nvidia.com/gpu.product":"NVIDIA-A100-SXM4-80GB"}},
     "status":{"allocatable":{"nvidia.com/gpu":")" + std::to_string(gpus) + R"("},
     "addresses":[{"type":"InternalIP","address":"127.0.0.1"}],
     "conditions":[{"type":"Ready","status":"True"}]}})";
}

// The cluster of the issue: two nodes of 4 GPUs lent to the federation, one
// GPU already held by a pod of the cluster's own users, and a node of
// 8 GPUs that is not lent.
void Populate(KubeClient& c) {
  for (const auto& body : {NodeJson("kn-1", 4), NodeJson("kn-2", 4), NodeJson("kn-private", 8, false)}) {
    auto r = c.Call("POST", "/api/v1/nodes", body);
    ASSERT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
  }
  for (const char* name : {"team-x", "fedgate-jobs"}) {
    auto ns = c.Call("POST", "/api/v1/namespaces", std::string(R"({"metadata":{"name":")") + name + "\"}}");
    ASSERT_TRUE(ns.ok() && ns->status == 201);
  }
  auto pod = c.Call("POST", "/api/v1/namespaces/team-x/pods",
                    R"({"metadata":{"name":"foreign"},"spec":{"nodeName":"kn-2","containers":[
                        {"name":"c","image":"i","command":["sleep","600"],
                         "resources":{"limits":{"nvidia.com/gpu":"1"}}}]}})");
  ASSERT_TRUE(pod.ok() && pod->status == 201) << (pod.ok() ? pod->body : "");
}

// A fake API server in this process, populated, and how to reach it.
struct InProcessApi {
  TempDir dir;
  std::unique_ptr<FakeKubeServer> server;
  KubeAccess access;
  std::unique_ptr<KubeClient> client;
  InProcessApi() {
    auto s = FakeKubeServer::Start({"127.0.0.1:0", "tok", dir / "logs"});
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
    access.server = "https://127.0.0.1:" + std::to_string(server->port());
    access.token = "tok";
    access.ca_pem = server->ca_pem();
    client = std::move(*KubeClient::Make(access));
    Populate(*client);
  }
  std::unique_ptr<KubeClient> NewClient() const { return std::move(*KubeClient::Make(access)); }
};

uint32_t FreeOf(const KubeCluster& k) {
  uint32_t free = 0;
  for (const auto& n : k.nodes()) free += n.usable ? n.gpus - std::min(n.gpus, n.requested) : 0;
  return free;
}

TEST(KubeSite, OffersTheSelectedNodesLessWhatTheClustersOwnPodsHold) {
  InProcessApi api;
  gateway::KubernetesConfig cfg;
  cfg.node_selector = {{"fedgate.io/pool", "true"}};
  KubeCluster k(cfg, api.NewClient());
  ASSERT_TRUE(k.Refresh().ok()) << k.last_error();
  ASSERT_EQ(k.InventoryNodes().size(), 2u);  // kn-private is not lent
  EXPECT_EQ(k.InventoryNodes()[0].gpu_model, "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(FreeOf(k), 7u);

  // Cordoning a node takes it out of the offer.
  auto& c = api.client;
  ASSERT_EQ(c->Call("PATCH", "/api/v1/nodes/kn-1", R"({"spec":{"unschedulable":true}})",
                    "application/merge-patch+json")->status, 200);
  ASSERT_TRUE(k.Refresh().ok());
  EXPECT_EQ(k.InventoryNodes().size(), 1u);
  EXPECT_EQ(FreeOf(k), 3u);
}

TEST(KubeSite, AFailingServerIsRetriedWithBackoffAndTheSiteOffersNothingMeanwhile) {
  InProcessApi api;
  auto& c = api.client;
  KubeCluster k({}, api.NewClient());
  ASSERT_TRUE(k.Refresh().ok());
  EXPECT_EQ(k.InventoryNodes().size(), 3u);  // no selector: every GPU node
  const auto listed = [&] {
    auto j = JsonOf(c->Call("GET", "/fake/requests"), "requests");
    return j.ok() ? gateway::kube::FindNumber(*j, {"GET /api/v1/nodes"}).value_or(0) : -1;
  };
  const double before = listed();
  ASSERT_TRUE(c->Call("POST", "/fake/faults", R"({"path":"/api/v1/nodes","status":500,"times":1})").ok());
  auto st = k.Refresh();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(k.last_error().find("HTTP 500"), std::string::npos) << k.last_error();
  EXPECT_TRUE(k.InventoryNodes().empty());
  // Backing off: the next refresh right away does not ask the server.
  EXPECT_FALSE(k.Refresh().ok());
  EXPECT_EQ(listed(), before + 1);
  // After the backoff the site offers its GPUs again.
  EXPECT_TRUE(Eventually([&] { return k.Refresh().ok(); }, 5000, 200));
  EXPECT_EQ(k.InventoryNodes().size(), 3u);
  EXPECT_TRUE(k.last_error().empty());

  ASSERT_TRUE(c->Call("POST", "/fake/faults", R"({"path":"/api/v1/pods","status":429,"retryAfter":3})").ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(k.Refresh().ok());
  EXPECT_TRUE(Eventually([&] { return k.Refresh().ok(); }, 8000, 100));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2900));
}

// A process site and Kubernetes sites on fake-kube-apiserver (run as its
// own program, pods as fedgate-rank).
// Watches tell of changes at once (a foreign pod, a cordon) and relist when
// the server says 410 Gone.
TEST(KubeSite, WatchesTellOfChangesAndRelistAfter410) {
  InProcessApi api;
  auto& c = api.client;
  KubeCluster k({}, api.NewClient());
  ASSERT_TRUE(k.Refresh().ok());
  std::atomic<int> told{0};
  k.StartWatching([&] {
    (void)k.Refresh();
    ++told;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watches are open
  const int before = told;
  auto pod = c->Call("POST", "/api/v1/namespaces/team-x/pods",
                     R"({"metadata":{"name":"late"},"spec":{"nodeName":"kn-1","containers":[
                         {"name":"c","image":"i","command":["sleep","60"],
                          "resources":{"limits":{"nvidia.com/gpu":"2"}}}]}})");
  ASSERT_EQ(pod->status, 201);
  EXPECT_TRUE(Eventually([&] { return told > before && FreeOf(k) == 16 - 1 - 2; }, 3000))
      << "told " << told << " free " << FreeOf(k);
  ASSERT_EQ(k.Relists(), 0);
  ASSERT_TRUE(c->Call("POST", "/fake/compact").ok());
  EXPECT_TRUE(Eventually([&] { return k.Relists() >= 1; }, 8000));
  EXPECT_EQ((k.ApiCounts()[{"WATCH", "410"}]), k.Relists());
  // Watching again from the relisted version: changes are still told.
  const int after = told;
  ASSERT_EQ(c->Call("DELETE", "/api/v1/namespaces/team-x/pods/late?gracePeriodSeconds=0")->status, 200);
  EXPECT_TRUE(Eventually([&] { return told > after && FreeOf(k) == 16 - 1; }, 8000));
  k.StopWatching();
  EXPECT_GT((k.ApiCounts()[{"GET", "200"}]), 0);
}

class KubeFederationTest : public JobsTest {
 protected:
  void StartApi() {
    api_ = Process::Spawn({FAKE_KUBE_BIN, "--listen", "127.0.0.1:0", "--token", "fed-token",
                           "--log-dir", fed_.shared_dir() + "/pods", "--run-as", "fedgate-rank"},
                          dir_ / "api.log");
    ASSERT_TRUE(Eventually(
        [&] { return ReadText(dir_ / "api.log").find("listening on") != std::string::npos; }, 10000));
    const std::string out = ReadText(dir_ / "api.log");
    const auto at = out.find("https://");
    url_ = out.substr(at, out.find('\n', at) - at);
    KubeAccess a;
    a.server = url_;
    a.token = "fed-token";
    a.insecure_skip_verify = true;
    api_client_ = std::move(*KubeClient::Make(a));
    Populate(*api_client_);
  }
  std::string Kubeconfig(const std::string& file, const std::string& token) {
    WriteText(dir_ / file, "apiVersion: v1\nkind: Config\ncurrent-context: fake\ncontexts:\n"
                           "- name: fake\n  context: {cluster: fake, user: gw}\nclusters:\n"
                           "- name: fake\n  cluster: {server: \"" + url_ + "\", insecure-skip-tls-verify: true}\n"
                           "users:\n- name: gw\n  user: {token: " + token + "}\n");
    return dir_ / file;
  }
  void AddKubeSite(const std::string& site, const std::string& token, std::vector<std::string> peers) {
    SiteOptions k;
    k.site = site;
    k.peers = std::move(peers);
    k.inventory_source = "kubernetes";
    k.jobs_lease = "10s";  // Prepare and Commit make pods
    k.extra_yaml = "executor: {kind: kubernetes, work_dir: " + fed_.work_root() + "/" + site +
                   "}\nkubernetes: {kubeconfig: " + Kubeconfig(site + ".kubeconfig", token) +
                   ", node_selector: {fedgate.io/pool: \"true\"}, image: busybox}\n";
    fed_.AddSite(k);
  }
  // The job's pods in fedgate-jobs.
  std::vector<gateway::kube::Json> Pods(const std::string& job) {
    auto l = JsonOf(api_client_->Call("GET", "/api/v1/namespaces/fedgate-jobs/pods?labelSelector=fedgate.io%2Fjob%3D" + job),
                    "pods");
    std::vector<gateway::kube::Json> out;
    if (!l.ok()) return out;
    for (const auto& p : gateway::kube::Find(*l, {"items"})->list_value().values()) out.push_back(p);
    return out;
  }
  // Each pod of the job: its phase and each container's state, for failures.
  std::string PodStates(const std::string& job) {
    std::string out;
    for (const auto& p : Pods(job)) {
      out += gateway::kube::FindString(p, {"metadata", "name"}) + " " +
             gateway::kube::FindString(p, {"status", "phase"}) + ":";
      for (const char* f : {"initContainerStatuses", "containerStatuses"}) {
        if (const auto* cs = gateway::kube::Find(p, {"status", f}); cs && cs->has_list_value()) {
          for (const auto& c : cs->list_value().values()) {
            out += " " + gateway::kube::FindString(c, {"name"}) + "=" +
                   (gateway::kube::Find(c, {"state", "terminated"}) ? "terminated" : "running");
          }
        }
      }
      out += "\n";
    }
    return out;
  }
  TempDir dir_;
  std::unique_ptr<Process> api_;
  std::string url_;
  std::unique_ptr<KubeClient> api_client_;
};

// The judged inventory: a process site and a Kubernetes site (two nodes of
// 4 GPUs, one already held by a foreign pod) in one federation; the process
// site sees 7 free GPUs there. A site whose API server refuses it keeps
// running, offers nothing, and says why in its log and /readyz.
TEST_F(KubeFederationTest, AKubernetesSiteAdvertisesWhatItsClusterHasFree) {
  StartApi();
  AddSite("site-a", {"site-k", "site-r"}, 2);
  AddKubeSite("site-k", "fed-token", {"site-a"});
  AddKubeSite("site-r", "wrong-token", {"site-a"});
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return Free("site-a", "site-k") == 7; }, 15000))
      << "free at site-k: " << Free("site-a", "site-k") << "\n" << fed_.log("site-k");
  // The refused site: up, offering nothing, saying why where an operator looks.
  ASSERT_TRUE(Eventually([&] {
    const auto live = fed_.LiveSites("site-a");
    return std::find(live.begin(), live.end(), "site-r") != live.end();
  }, 15000)) << fed_.log("site-r");
  EXPECT_EQ(Free("site-a", "site-r"), 0u);
  int status = 0;
  const std::string ready = HttpGet(fed_.ops_port("site-r"), "/readyz", &status);
  EXPECT_EQ(status, 503);
  EXPECT_NE(ready.find(url_), std::string::npos) << ready;
  EXPECT_NE(ready.find("HTTP 401"), std::string::npos) << ready;
  EXPECT_NE(fed_.log("site-r").find("kubernetes: API server " + url_), std::string::npos);
  EXPECT_TRUE(fed_.WaitReady("site-k", 5000));
  // Counted: every answer by method and code; up or not.
  EXPECT_GT(Metric(fed_.ops_port("site-r"), "fedgate_kubernetes_api_requests_total{code=\"401\",method=\"GET\"}"), 0);
  EXPECT_EQ(Metric(fed_.ops_port("site-r"), "fedgate_kubernetes_api_up"), 0);
  EXPECT_GT(Metric(fed_.ops_port("site-k"), "fedgate_kubernetes_api_requests_total{code=\"200\",method=\"GET\"}"), 0);
  EXPECT_EQ(Metric(fed_.ops_port("site-k"), "fedgate_kubernetes_api_up"), 1);
}

// A job asking for a MIG slice runs on a Kubernetes site's partitioned node
// as a pod that asks the device plugin for one slice of that profile.
TEST_F(KubeFederationTest, AMigJobRunsAsAPodAskingForOneSlice) {
  StartApi();
  auto node = api_client_->Call("POST", "/api/v1/nodes", R"({"metadata":{"name":"kn-m","labels":{"fedgate.io/pool":"true",
      "nvidia.com/gpu.product":"NVIDIA-A100-SXM4-80GB"}},
      "status":{"allocatable":{"nvidia.com/mig-1g.10gb":"7"},
      "addresses":[{"type":"InternalIP","address":"127.0.0.1"}],"conditions":[{"type":"Ready","status":"True"}]}})");
  ASSERT_TRUE(node.ok() && node->status == 201);
  AddSite("site-a", {"site-k"}, 1);
  AddKubeSite("site-k", "fed-token", {"site-a"});
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return Free("site-a", "site-k") == 14; }, 15000))  // 7 GPUs + 7 slices
      << Free("site-a", "site-k") << fed_.log("site-k");
  const std::string id = Submit("site-a", "name: mig\nmig: 1g.10gb\ncommand: [sh, -c, 'echo slice $CUDA_VISIBLE_DEVICES; sleep 3']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 30000)) << Get("site-a", id).reason() << fed_.log("site-k");
  const auto pods = Pods(id);
  ASSERT_EQ(pods.size(), 1u) << PodStates(id);
  EXPECT_EQ(gateway::kube::FindString(pods[0], {"spec", "nodeName"}), "kn-m");
  const auto* ctr = &gateway::kube::Find(pods[0], {"spec", "containers"})->list_value().values(0);
  EXPECT_EQ(gateway::kube::FindString(*ctr, {"resources", "limits", "nvidia.com/mig-1g.10gb"}), "1");
  EXPECT_EQ(gateway::kube::Find(*ctr, {"resources", "limits", "nvidia.com/gpu"}), nullptr);
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 30000)) << Get("site-a", id).reason();
  EXPECT_EQ(Get("site-a", id).run().sites(0).site(), "site-k");
  auto log = RunCommand({FedctlBin(), "--gateway", fed_.endpoint("site-a"), "--tls-dir", tmp_ / "alice",
                         "jobs", "logs", id, "--rank", "0"});
  EXPECT_NE(log.out.find("slice 0"), std::string::npos) << log.out << log.err;
}

// One federation for the rest, in order: a 10-GPU job stitched across the
// process site (3) and the Kubernetes site (7) as one world; then kill -9 of
// the Kubernetes site's gateway mid-job; then cancel.
TEST_F(KubeFederationTest, JobsRunAsPodsAcrossSitesSurviveAGatewayRestartAndCancelDeletesThem) {
  StartApi();
  AddSite("site-a", {"site-k"}, 3);
  AddKubeSite("site-k", "fed-token", {"site-a"});
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return Free("site-a", "site-k") == 7; }, 15000)) << fed_.log("site-k");
  {
    SCOPED_TRACE("a 10-GPU world across a process site and a Kubernetes site");
    const std::string id = Submit("site-a", "name: ar\ngpus: 10\ncommand: [" + std::string(FEDGATE_ALLREDUCE_BIN) + "]\n");
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 60000))
        << Get("site-a", id).reason() << fed_.log("site-k") << ReadText(dir_ / "api.log");
    const v1::Job job = Get("site-a", id);
    EXPECT_EQ(job.run().sites_size(), 2);
    // Every rank is in one world of 10 and reduced the same sum; the ranks of
    // site-k ran in its pods and their logs come through fedctl.
    int on_k = 0;
    for (int r = 0; r < 10; ++r) {
      auto log = RunCommand({FedctlBin(), "--gateway", fed_.endpoint("site-a"), "--tls-dir", tmp_ / "alice",
                             "jobs", "logs", id, "--rank", std::to_string(r)});
      ASSERT_EQ(log.exit_code, 0) << log.err;
      EXPECT_NE(log.out.find("rank " + std::to_string(r) + "/10: site "), std::string::npos) << log.out;
      EXPECT_NE(log.out.find("allreduce of 65536 doubles OK"), std::string::npos) << log.out;
      on_k += log.out.find("site site-k") != std::string::npos;
    }
    EXPECT_EQ(on_k, 7);
    EXPECT_TRUE(Eventually([&] { return Pods(id).empty(); }, 10000)) << "a slice's pods go when it ended";
  }
  {
    SCOPED_TRACE("kill -9 of the Kubernetes site's gateway mid-job: the pods are re-attached");
    const std::string id = Submit("site-a", "name: long\ngpus: 10\ncommand: [sh, -c, 'echo start $RANK; "
                                            "sleep 6; echo done $RANK']\n");
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 30000)) << Get("site-a", id).reason();
    // One pod per node, one container of one GPU per rank, the labels, the
    // restricted security context; each rank's environment in the ConfigMap.
    ASSERT_TRUE(Eventually([&] { return Pods(id).size() == 2; }, 10000));
    std::multiset<size_t> containers;
    for (const auto& p : Pods(id)) {
      using gateway::kube::Find;
      using gateway::kube::FindString;
      EXPECT_EQ(FindString(p, {"metadata", "labels", "fedgate.io/attempt"}), "1");
      EXPECT_EQ(FindString(p, {"spec", "restartPolicy"}), "Never");
      EXPECT_TRUE(Find(p, {"spec", "securityContext", "runAsNonRoot"})->bool_value());
      ASSERT_NE(Find(p, {"metadata", "ownerReferences"}), nullptr);
      const auto& cs = Find(p, {"spec", "containers"})->list_value().values();
      containers.insert(cs.size());
      for (const auto& c : cs) {
        EXPECT_EQ(FindString(c, {"resources", "limits", "nvidia.com/gpu"}), "1");
        EXPECT_EQ(FindString(c, {"image"}), "busybox");
      }
    }
    EXPECT_EQ(containers, (std::multiset<size_t>{3, 4}));
    // The pods as the API server has them pass the published schemas.
    std::vector<std::string> cmd = {"/bin/sh", "-c", std::string(KUBE_SCHEMAS) + " \"$@\"", "schemas"};
    int i = 0;
    for (const auto& p : Pods(id)) {
      const std::string file = dir_ / ("pod-" + std::to_string(i++) + ".json");
      WriteText(file, gateway::kube::ToJson(p));
      cmd.push_back(file);
    }
    auto valid = RunCommand(cmd, {}, 120000);
    EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;
    EXPECT_NE(valid.out.find(": valid"), std::string::npos) << valid.out;
    // Each rank's environment is its container's env, from the annotations
    // its fedgate-kube-rank wrote at the commit; then the init step let go.
    std::map<std::string, std::string> annotations;
    ASSERT_TRUE(Eventually([&] {
      annotations.clear();
      for (const auto& p : Pods(id)) {
        if (const auto* a = gateway::kube::Find(p, {"metadata", "annotations"}); a && a->has_struct_value()) {
          for (const auto& [k, v] : a->struct_value().fields()) annotations[k + "@" + gateway::kube::FindString(p, {"metadata", "name"})] = v.string_value();
        }
      }
      return std::count_if(annotations.begin(), annotations.end(),
                           [](const auto& kv) { return kv.first.rfind("fedgate.io/committed@", 0) == 0; }) == 2;
    }, 10000));
    std::set<std::string> ranks, worlds, visible;
    for (const auto& [k, v] : annotations) {
      if (k.find(".RANK@") != std::string::npos) ranks.insert(v);
      if (k.find(".WORLD_SIZE@") != std::string::npos) worlds.insert(v);
      if (k.find(".CUDA_VISIBLE_DEVICES@") != std::string::npos) visible.insert(v);
      EXPECT_EQ(v.find("fed-token"), std::string::npos) << "the API token stays out of the pods: " << k;
    }
    EXPECT_EQ(ranks, (std::set<std::string>{"3", "4", "5", "6", "7", "8", "9"}));
    EXPECT_EQ(worlds, (std::set<std::string>{"10"}));
    EXPECT_EQ(visible, (std::set<std::string>{"0"}));

    fed_.Kill("site-k");
    std::this_thread::sleep_for(std::chrono::seconds(1));
    fed_.Start("site-k");
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 60000))
        << Get("site-a", id).reason() << "\npods:\n" << PodStates(id) << fed_.log("site-k");
    EXPECT_EQ(Get("site-a", id).attempt(), 1u);
    auto log = RunCommand({FedctlBin(), "--gateway", fed_.endpoint("site-a"), "--tls-dir", tmp_ / "alice",
                           "jobs", "logs", id, "--rank", "9"});
    EXPECT_NE(log.out.find("start 9\ndone 9"), std::string::npos) << log.out << log.err;
  }
  {
    SCOPED_TRACE("cancel deletes every pod of the job");
    const std::string id = Submit("site-a", "name: cancelled\ngpus: 10\nimage: registry.example/team/trainer:1.2\n"
                                            "command: [sleep, '300']\n");
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 30000)) << Get("site-a", id).reason();
    ASSERT_TRUE(Eventually([&] { return Pods(id).size() == 2; }, 10000));
    // The job's own image, not the site's default.
    for (const auto& p : Pods(id)) {
      for (const auto& c : gateway::kube::Find(p, {"spec", "containers"})->list_value().values()) {
        EXPECT_EQ(gateway::kube::FindString(c, {"image"}), "registry.example/team/trainer:1.2");
      }
    }
    auto r = Alice("site-a", {"jobs", "cancel", id});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(WaitState("site-a", id, v1::Job::CANCELLED, 30000));
    EXPECT_TRUE(Eventually([&] { return Pods(id).empty(); }, 30000)) << Pods(id).size() << " pods left";
    EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-k") == 7; }, 15000));
  }
  {
    SCOPED_TRACE("a ResourceQuota's refusal reaches the job's reason, and leaves no pod");
    ASSERT_EQ(api_client_->Call("POST", "/api/v1/namespaces/fedgate-jobs/resourcequotas",
                                R"({"metadata":{"name":"gpus"},"spec":{"hard":{"requests.nvidia.com/gpu":"2"}}})")
                  ->status,
              201);
    const std::string id = Submit("site-a", "name: over-quota\ngpus: 4\nallowed_sites: [site-k]\n"
                                            "command: [sleep, '1']\n");
    EXPECT_TRUE(Eventually([&] { return Get("site-a", id).reason().find("exceeded quota: gpus") != std::string::npos; },
                           30000, 200))
        << Get("site-a", id).reason();
    EXPECT_TRUE(Pods(id).empty());
    auto r = Alice("site-a", {"jobs", "cancel", id});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

// The hold the cluster respects: from Prepare on, the held GPUs are the
// hold's pods', so a pod created on the node before the commit is refused by
// the kubelet; a quota refusal leaves nothing behind and says why.
// A pod of the cluster's own users on `node` asking for one of `resource`:
// its phase once its kubelet decided (Failed: refused; Running: admitted).
std::string ForeignPod(KubeClient& c, const std::string& name, const std::string& node,
                       const std::string& resource) {
  auto r = c.Call("POST", "/api/v1/namespaces/default/pods",
                  R"({"metadata":{"name":")" + name + R"("},"spec":{"nodeName":")" + node + R"(","containers":[
                      {"name":"c","image":"i","command":["sleep","30"],
                       "resources":{"limits":{")" + resource + R"(":"1"}}}]}})");
  EXPECT_TRUE(r.ok() && r->status == 201);
  std::string phase;
  Eventually([&] {
    auto p = JsonOf(c.Call("GET", "/api/v1/namespaces/default/pods/" + name), "pod");
    phase = p.ok() ? gateway::kube::FindString(*p, {"status", "phase"}) : "";
    return phase == "Failed" || phase == "Running";
  }, 5000);
  return phase;
}

TEST(KubeHold, AForeignPodCannotTakeHeldGpusAndARefusedHoldLeavesNothing) {
  InProcessApi api;
  auto& c = api.client;
  gateway::KubernetesConfig cfg;
  cfg.tenant_namespaces = {{"vision", "team-x"}};
  KubeCluster k(cfg, api.NewClient(), "site-k");
  auto id = k.ReserveHold("fedgate-j-1-1", {{"kn-1", 4}}, "other", std::chrono::seconds(3));
  ASSERT_TRUE(id.ok()) << id.status();
  const auto foreign = [&](const std::string& name) { return ForeignPod(*c, name, "kn-1", "nvidia.com/gpu"); };
  EXPECT_EQ(foreign("between-prepare-and-commit"), "Failed");
  ASSERT_TRUE(k.ReleaseHold(*id).ok());
  EXPECT_TRUE(Eventually([&] {
    auto l = JsonOf(c->Call("GET", "/api/v1/pods?labelSelector=fedgate.io%2Fhold"), "pods");
    return l.ok() && gateway::kube::Find(*l, {"items"})->list_value().values_size() == 0;
  }, 10000));
  EXPECT_EQ(foreign("after-release"), "Running");

  // A tenant namespace whose quota refuses: the error names it; no pod or
  // ConfigMap of the hold is left.
  ASSERT_EQ(c->Call("POST", "/api/v1/namespaces/team-x/resourcequotas",
                    R"({"metadata":{"name":"gpus"},"spec":{"hard":{"requests.nvidia.com/gpu":"2"}}})")->status,
            201);
  auto refused = k.ReserveHold("fedgate-j-2-1", {{"kn-1", 3}}, "vision", std::chrono::seconds(3));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("exceeded quota: gpus"), std::string::npos)
      << refused.status();
  const auto left = [&](const std::string& ns, const std::string& what) {
    auto l = JsonOf(c->Call("GET", "/api/v1/namespaces/" + ns + "/" + what), what);
    return l.ok() ? gateway::kube::Find(*l, {"items"})->list_value().values_size() : -1;
  };
  EXPECT_EQ(left("team-x", "configmaps"), 0);

  // A 5xx while making the pods: the hold is refused and its ConfigMap goes.
  ASSERT_TRUE(c->Call("POST", "/fake/faults",
                      R"({"method":"POST","path":"/api/v1/namespaces/fedgate-jobs/pods","status":503})").ok());
  auto failed = k.ReserveHold("fedgate-j-3-1", {{"kn-1", 1}}, "other", std::chrono::seconds(3));
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(std::string(failed.status().message()).find("HTTP 503"), std::string::npos) << failed.status();
  EXPECT_EQ(left("fedgate-jobs", "configmaps"), 0);
  EXPECT_EQ(left("fedgate-jobs", "pods"), 0);
  // 409 AlreadyExists on the ConfigMap (a hold of that id is there): another
  // id, and the hold is made; the conflict is counted.
  ASSERT_TRUE(c->Call("POST", "/fake/faults",
                      R"({"method":"POST","path":"/api/v1/namespaces/fedgate-jobs/configmaps","status":409})").ok());
  auto again = k.ReserveHold("fedgate-j-4-1", {{"kn-1", 1}}, "other", std::chrono::seconds(3));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((k.ApiCounts()[{"POST", "409"}]), 1);
  EXPECT_EQ(left("fedgate-jobs", "configmaps"), 1);
  ASSERT_TRUE(k.ReleaseHold(*again).ok());
  EXPECT_EQ(left("fedgate-jobs", "configmaps"), 0);
}


// A node partitioned by the device plugin (MIG, mixed strategy): its slices
// are offered as "<node>-mig-<profile>" under the MIG model, and a hold of
// slices is a pod on that node whose containers each ask for one slice, so
// the kubelet keeps others off the slices but not off the whole GPU.
TEST(KubeHold, MigSlicesAreOfferedAndHeldAsTheirOwnResource) {
  InProcessApi api;
  auto& c = api.client;
  auto node = c->Call("POST", "/api/v1/nodes", R"({"metadata":{"name":"kn-m","labels":{"fedgate.io/pool":"true",
      "nvidia.com/gpu.product":"NVIDIA-A100-SXM4-80GB"}},
      "status":{"allocatable":{"nvidia.com/gpu":"1","nvidia.com/mig-1g.10gb":"7"},
      "addresses":[{"type":"InternalIP","address":"127.0.0.1"}],"conditions":[{"type":"Ready","status":"True"}]}})");
  ASSERT_TRUE(node.ok() && node->status == 201);
  gateway::KubernetesConfig cfg;
  cfg.node_selector = {{"fedgate.io/pool", "true"}};
  KubeCluster k(cfg, api.NewClient(), "site-k");
  ASSERT_TRUE(k.Refresh().ok()) << k.last_error();
  std::map<std::string, federation::Node> offered;
  for (const auto& n : k.InventoryNodes()) offered[n.name] = n;
  ASSERT_TRUE(offered.contains("kn-m-mig-1g-10gb")) << offered.size();
  EXPECT_EQ(offered["kn-m-mig-1g-10gb"].gpus, 7u);
  EXPECT_EQ(offered["kn-m-mig-1g-10gb"].gpu_model, "NVIDIA-A100-SXM4-80GB MIG 1g.10gb");
  EXPECT_EQ(offered["kn-m-mig-1g-10gb"].gpu_memory_gib, 10u);
  EXPECT_EQ(offered["kn-m"].gpus, 1u);
  EXPECT_EQ(k.KubeNodeOf("kn-m-mig-1g-10gb").first, "kn-m");
  EXPECT_EQ(k.KubeNodeOf("kn-m-mig-1g-10gb").second, "nvidia.com/mig-1g.10gb");

  auto id = k.ReserveHold("fedgate-j-9-1", {{"kn-m-mig-1g-10gb", 7}}, "other", std::chrono::seconds(3));
  ASSERT_TRUE(id.ok()) << id.status();
  auto pods = JsonOf(c->Call("GET", "/api/v1/pods?labelSelector=fedgate.io%2Fhold"), "pods");
  ASSERT_TRUE(pods.ok());
  const auto& items = gateway::kube::Find(*pods, {"items"})->list_value().values();
  ASSERT_EQ(items.size(), 1);
  EXPECT_EQ(gateway::kube::FindString(items[0], {"spec", "nodeName"}), "kn-m");
  const auto& ctrs = gateway::kube::Find(items[0], {"spec", "containers"})->list_value().values();
  ASSERT_EQ(ctrs.size(), 7);
  for (const auto& ctr : ctrs) {
    EXPECT_EQ(gateway::kube::FindString(ctr, {"resources", "limits", "nvidia.com/mig-1g.10gb"}), "1");
    EXPECT_EQ(gateway::kube::Find(ctr, {"resources", "limits", "nvidia.com/gpu"}), nullptr);
  }
  const auto foreign = [&](const std::string& name, const std::string& resource) {
    return ForeignPod(*c, name, "kn-m", resource);
  };
  EXPECT_EQ(foreign("wants-a-slice", "nvidia.com/mig-1g.10gb"), "Failed");
  EXPECT_EQ(foreign("wants-the-whole-gpu", "nvidia.com/gpu"), "Running");
  // The cluster's view follows: no slice free, the whole GPU taken.
  ASSERT_TRUE(Eventually([&] {
    if (!k.Refresh().ok()) return false;
    for (const auto& n : k.nodes()) {
      if (n.name == "kn-m" && n.requested != 1) return false;
      if (n.name == "kn-m-mig-1g-10gb" && n.requested != 7) return false;
    }
    return true;
  }, 5000, 200));
  ASSERT_TRUE(k.ReleaseHold(*id).ok());
}

}  // namespace
}  // namespace fedgate::testing
