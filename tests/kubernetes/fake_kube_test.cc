// The fake API server behaves like a real one where a client can tell:
// status codes and reasons, resource versions, the status subresource, a
// kubelet's GPU admission, quotas, graceful deletion and owner references.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gateway/kube/kube_client.h"
#include "tests/support/fake_kube/fake_kube_server.h"
#include "tests/support/harness.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway::kube {
namespace {

using testing::TempDir;
using testing::fakekube::FakeKubeServer;

class FakeKubeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = FakeKubeServer::Start({"127.0.0.1:0", "t", dir_ / "logs"});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    KubeAccess a;
    a.server = "https://127.0.0.1:" + std::to_string(server_->port());
    a.token = "t";
    a.insecure_skip_verify = true;
    c_ = std::move(*KubeClient::Make(a));
    ASSERT_EQ(Code("POST", "/api/v1/nodes",
                   R"({"metadata":{"name":"n1"},"status":{"allocatable":{"nvidia.com/gpu":"2"},
                       "conditions":[{"type":"Ready","status":"True"}]}})"),
              201);
  }
  int Code(const std::string& method, const std::string& path, const std::string& body = "",
           const std::string& ct = "application/json") {
    auto r = c_->Call(method, path, body, ct);
    EXPECT_TRUE(r.ok()) << r.status();
    last_ = r.ok() ? r->body : "";
    return r.ok() ? r->status : 0;
  }
  Json Get(const std::string& path) {
    auto j = JsonOf(c_->Call("GET", path), path);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : Json();
  }
  std::string Phase(const std::string& pod) {
    return FindString(Get("/api/v1/namespaces/default/pods/" + pod), {"status", "phase"});
  }
  static std::string PodJson(const std::string& name, int gpus, const std::string& cmd,
                             const std::string& extra = "") {
    return R"({"metadata":{"name":")" + name + R"("}, "spec":{"nodeName":"n1",)" + extra +
           R"("containers":[{"name":"main","image":"busybox","command":["sh","-c",")" + cmd +
           R"("],"resources":{"limits":{"nvidia.com/gpu":")" + std::to_string(gpus) + R"("}}}]}})";
  }
  TempDir dir_;
  std::unique_ptr<FakeKubeServer> server_;
  std::unique_ptr<KubeClient> c_;
  std::string last_;
};

TEST_F(FakeKubeTest, CreateGetUpdateAnswerWithTheRealCodes) {
  const std::string cm = R"({"metadata":{"name":"a"},"data":{"k":"1"}})";
  EXPECT_EQ(Code("POST", "/api/v1/namespaces/default/configmaps", cm), 201);
  EXPECT_EQ(Code("POST", "/api/v1/namespaces/default/configmaps", cm), 409);
  EXPECT_NE(last_.find("AlreadyExists"), std::string::npos);
  EXPECT_EQ(Code("POST", "/api/v1/namespaces/nowhere/configmaps", cm), 404);
  EXPECT_EQ(Code("POST", "/api/v1/namespaces/default/configmaps", R"({"metadata":{"name":"Bad_Name"}})"), 422);
  EXPECT_EQ(Code("POST", "/api/v1/namespaces/default/configmaps", "{oops"), 400);
  EXPECT_EQ(Code("GET", "/api/v1/namespaces/default/configmaps/none"), 404);
  EXPECT_EQ(Code("GET", "/api/v1/namespaces/default/widgets"), 404);

  // An update against a stale resourceVersion is a conflict; the fresh one wins.
  Json obj = Get("/api/v1/namespaces/default/configmaps/a");
  const std::string rv = FindString(obj, {"metadata", "resourceVersion"});
  *Mutable(&obj, {"data", "k"}) = Str("2");
  EXPECT_EQ(Code("PUT", "/api/v1/namespaces/default/configmaps/a", ToJson(obj)), 200);
  *Mutable(&obj, {"data", "k"}) = Str("3");
  EXPECT_EQ(Code("PUT", "/api/v1/namespaces/default/configmaps/a", ToJson(obj)), 409);
  EXPECT_NE(last_.find("the object has been modified"), std::string::npos);
  EXPECT_EQ(FindString(Get("/api/v1/namespaces/default/configmaps/a"), {"data", "k"}), "2");
  EXPECT_NE(FindString(Get("/api/v1/namespaces/default/configmaps/a"), {"metadata", "resourceVersion"}), rv);
  EXPECT_EQ(Code("PATCH", "/api/v1/namespaces/default/configmaps/a", R"([{"op":"add"}])",
                 "application/json-patch+json"),
            415);
}

TEST_F(FakeKubeTest, ConcurrentPatchesNeverConflictWhileUpdatesOfAnOldVersionDo) {
  ASSERT_EQ(Code("POST", "/api/v1/namespaces/default/configmaps", R"({"metadata":{"name":"p"}})"), 201);
  std::vector<std::thread> writers;
  std::atomic<int> bad{0};
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 10; ++i) {
        auto r = c_->Call("PATCH", "/api/v1/namespaces/default/configmaps/p",
                          R"({"data":{"w)" + std::to_string(w) + "-" + std::to_string(i) + R"(":"x"}})",
                          "application/merge-patch+json");
        if (!r.ok() || r->status != 200) ++bad;
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(Find(Get("/api/v1/namespaces/default/configmaps/p"), {"data"})->struct_value().fields_size(), 40);
}

TEST_F(FakeKubeTest, StatusChangesOnlyThroughTheSubresource) {
  EXPECT_EQ(Code("PATCH", "/api/v1/nodes/n1", R"({"status":{"allocatable":{"nvidia.com/gpu":"9"}},
                 "metadata":{"labels":{"a":"b"}}})", "application/merge-patch+json"),
            200);
  Json n = Get("/api/v1/nodes/n1");
  EXPECT_EQ(FindString(n, {"status", "allocatable", "nvidia.com/gpu"}), "2");
  EXPECT_EQ(FindString(n, {"metadata", "labels", "a"}), "b");
  EXPECT_EQ(Code("PATCH", "/api/v1/nodes/n1/status", R"({"status":{"allocatable":{"nvidia.com/gpu":"3"}}})",
                 "application/merge-patch+json"),
            200);
  EXPECT_EQ(FindString(Get("/api/v1/nodes/n1"), {"status", "allocatable", "nvidia.com/gpu"}), "3");
}

TEST_F(FakeKubeTest, PodsRunWithTheirExitCodesAndLogsAndTheKubeletAdmitsGpus) {
  ASSERT_EQ(Code("POST", "/api/v1/namespaces/default/pods", PodJson("ok", 1, "echo hello; exit 0")), 201);
  ASSERT_EQ(Code("POST", "/api/v1/namespaces/default/pods", PodJson("bad", 1, "exit 3")), 201);
  EXPECT_TRUE(testing::Eventually([&] { return Phase("ok") == "Succeeded"; }, 10000));
  EXPECT_TRUE(testing::Eventually([&] { return Phase("bad") == "Failed"; }, 10000));
  Json bad = Get("/api/v1/namespaces/default/pods/bad");
  EXPECT_EQ(FindNumber(*Find(bad, {"status", "containerStatuses"})->list_value().values().begin(),
                       {"state", "terminated", "exitCode"}),
            3);
  auto log = c_->Call("GET", "/api/v1/namespaces/default/pods/ok/log");
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->body, "hello\n");

  // Two GPUs on n1: a running pod of 2 fills it; the next pod is refused by
  // the kubelet as a real one refuses it.
  ASSERT_EQ(Code("POST", "/api/v1/namespaces/default/pods", PodJson("big", 2, "sleep 30")), 201);
  EXPECT_TRUE(testing::Eventually([&] { return Phase("big") == "Running"; }, 10000));
  ASSERT_EQ(Code("POST", "/api/v1/namespaces/default/pods", PodJson("late", 1, "true")), 201);
  EXPECT_TRUE(testing::Eventually([&] { return Phase("late") == "Failed"; }, 10000));
  Json late = Get("/api/v1/namespaces/default/pods/late");
  EXPECT_EQ(FindString(late, {"status", "reason"}), "OutOfnvidia.com/gpu");

  // Deleting with a grace period: SIGTERM first, gone once it exited.
  EXPECT_EQ(Code("DELETE", "/api/v1/namespaces/default/pods/big?gracePeriodSeconds=5"), 200);
  EXPECT_TRUE(testing::Eventually(
      [&] { return Code("GET", "/api/v1/namespaces/default/pods/big") == 404; }, 8000));
}

TEST_F(FakeKubeTest, QuotasRefusePodsOverTheirLimit) {
  ASSERT_EQ(Code("POST", "/api/v1/namespaces", R"({"metadata":{"name":"team"}})"), 201);
  ASSERT_EQ(Code("POST", "/api/v1/namespaces/team/resourcequotas",
                 R"({"metadata":{"name":"gpus"},"spec":{"hard":{"requests.nvidia.com/gpu":"1"}}})"),
            201);
  EXPECT_EQ(Code("POST", "/api/v1/namespaces/team/pods", PodJson("one", 1, "sleep 5")), 201);
  EXPECT_EQ(Code("POST", "/api/v1/namespaces/team/pods", PodJson("two", 1, "sleep 5")), 403);
  EXPECT_NE(last_.find("exceeded quota: gpus"), std::string::npos) << last_;
}

TEST_F(FakeKubeTest, DeletingAnOwnerDeletesItsPods) {
  ASSERT_EQ(Code("POST", "/api/v1/namespaces/default/configmaps", R"({"metadata":{"name":"slice"}})"), 201);
  const std::string uid = FindString(Get("/api/v1/namespaces/default/configmaps/slice"), {"metadata", "uid"});
  std::string pod = PodJson("owned", 0, "sleep 30");
  pod.replace(pod.find(R"("metadata":{"name":"owned"},)"), std::string(R"("metadata":{"name":"owned"},)").size(),
              R"("metadata":{"name":"owned","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"slice","uid":")" +
                  uid + R"("}]},)");
  ASSERT_EQ(Code("POST", "/api/v1/namespaces/default/pods", pod), 201);
  EXPECT_TRUE(testing::Eventually([&] { return Phase("owned") == "Running"; }, 10000));
  EXPECT_EQ(Code("DELETE", "/api/v1/namespaces/default/configmaps/slice"), 200);
  EXPECT_TRUE(testing::Eventually(
      [&] { return Code("GET", "/api/v1/namespaces/default/pods/owned") == 404; }, 10000));
}

}  // namespace
}  // namespace fedgate::gateway::kube
