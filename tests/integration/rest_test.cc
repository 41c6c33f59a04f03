// The REST/JSON job API with curl and client certificates: the same
// operations and roles as gRPC; hostile bodies get 400/413 and change nothing.
#include <gtest/gtest.h>

#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

class RestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SiteOptions a;
    a.site = "cn-beijing";
    a.node_lines = {"{name: bj-1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 8}"};
    fed_.AddSite(a);
    fed_.Start("cn-beijing");
    ASSERT_TRUE(fed_.WaitReady("cn-beijing")) << fed_.log("cn-beijing");
    WriteTlsDir(tmp_ / "alice", ca_.User("vision", "alice"));
    WriteTlsDir(tmp_ / "bob", ca_.User("speech", "bob"));
    WriteTlsDir(tmp_ / "peer", ca_.Gateway("cn-shanghai"));
    WriteTlsDir(tmp_ / "admin", ca_.Admin("cn-beijing"));
  }
  // Returns {http status, body}; status 0 when curl itself failed.
  std::pair<int, std::string> Curl(const std::string& who, const std::string& method,
                                   const std::string& path, const std::string& body_file = "") {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-o", tmp_ / "out", "-w",
                                     "%{http_code}", "-X", method, "--cacert", tmp_ / "alice/ca.pem"};
    if (!who.empty()) {
      argv.insert(argv.end(), {"--cert", tmp_ / (who + "/cert.pem"), "--key", tmp_ / (who + "/key.pem")});
    }
    if (!body_file.empty()) {
      argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", "@" + body_file});
    }
    argv.push_back("https://127.0.0.1:" + std::to_string(fed_.http_port("cn-beijing")) + path);
    auto r = RunCommand(argv);
    int code = 0;
    try {
      code = std::stoi(r.out);
    } catch (...) {
    }
    return {code, ReadText(tmp_ / "out")};
  }
  std::string Body(const std::string& text) {
    const std::string f = tmp_ / ("body-" + std::to_string(++n_));
    WriteText(f, text);
    return f;
  }
  std::string IdOf(const std::string& json) {
    const auto p = json.find("\"id\":\"");
    return p == std::string::npos ? "" : json.substr(p + 6, json.find('"', p + 6) - p - 6);
  }
  TestCa ca_;
  TestFederation fed_{&ca_};
  TempDir tmp_;
  int n_ = 0;
};

TEST_F(RestTest, SubmitGetListCancelOverHttps) {
  auto [code, body] = Curl("alice", "POST", "/v1/jobs",
                           Body(R"({"spec": {"name": "r", "gpus": 2, "command": ["true"]},
                                    "idempotency_key": "rest-1"})"));
  ASSERT_EQ(code, 200) << body;
  const std::string id = IdOf(body);
  ASSERT_FALSE(id.empty()) << body;
  EXPECT_NE(body.find("\"tenant\":\"vision\""), std::string::npos) << body;
  auto again = Curl("alice", "POST", "/v1/jobs",
                    Body(R"({"spec": {"name": "r", "gpus": 2, "command": ["true"]},
                             "idempotency_key": "rest-1"})"));
  EXPECT_EQ(IdOf(again.second), id) << "same key, same job";
  auto got = Curl("alice", "GET", "/v1/jobs/" + id);
  EXPECT_EQ(got.first, 200);
  EXPECT_NE(got.second.find(id), std::string::npos);
  auto list = Curl("alice", "GET", "/v1/jobs?page_size=10");
  EXPECT_EQ(list.first, 200);
  EXPECT_NE(list.second.find(id), std::string::npos);
  EXPECT_EQ(Curl("bob", "GET", "/v1/jobs/" + id).first, 404) << "another tenant's job";
  EXPECT_EQ(Curl("bob", "GET", "/v1/jobs").second.find(id), std::string::npos);
  // The job may already have run (2 GPUs, `true`): cancel answers 200 or 409.
  auto cancel = Curl("alice", "POST", "/v1/jobs/" + id + ":cancel");
  EXPECT_TRUE(cancel.first == 200 || cancel.first == 409) << cancel.first << cancel.second;
}

TEST_F(RestTest, HostileRequestsGetClearErrorsAndChangeNothing) {
  auto before = Curl("alice", "GET", "/v1/jobs").second;
  auto bad = Curl("alice", "POST", "/v1/jobs", Body("{not json"));
  EXPECT_EQ(bad.first, 400);
  EXPECT_NE(bad.second.find("bad JSON body"), std::string::npos) << bad.second;
  auto unknown = Curl("alice", "POST", "/v1/jobs",
                      Body(R"({"spec": {"gpus": 1, "command": ["true"]}, "sudo": true})"));
  EXPECT_EQ(unknown.first, 400);
  EXPECT_NE(unknown.second.find("sudo"), std::string::npos) << unknown.second;
  auto invalid = Curl("alice", "POST", "/v1/jobs", Body(R"({"spec": {"gpus": 0, "command": ["x"]}})"));
  EXPECT_EQ(invalid.first, 400);
  EXPECT_NE(invalid.second.find("gpus must be > 0"), std::string::npos) << invalid.second;
  auto model = Curl("alice", "POST", "/v1/jobs",
                    Body(R"({"spec": {"gpus": 1, "gpu_models": ["A10O"], "command": ["x"]}})"));
  EXPECT_NE(model.second.find("unknown gpu model \\\"A10O\\\""), std::string::npos) << model.second;
  auto huge = Curl("alice", "POST", "/v1/jobs", Body(std::string(2 << 20, ' ')));
  EXPECT_EQ(huge.first, 413) << huge.second;
  EXPECT_EQ(Curl("peer", "GET", "/v1/jobs").first, 403) << "a gateway is not a tenant";
  EXPECT_EQ(Curl("", "GET", "/v1/jobs").first, 0) << "no client certificate: no TLS session";
  EXPECT_EQ(Curl("alice", "DELETE", "/v1/jobs").first, 404);
  EXPECT_EQ(Curl("alice", "GET", "/v1/jobs").second, before) << "nothing was stored";
}

// The federation views of the console: capacity and links for tenants and
// admins (no node names), nodes for this site's admins, a job's world.
TEST_F(RestTest, FederationViewsAndAJobsVirtualCluster) {
  auto sites = Curl("alice", "GET", "/v1/sites");
  EXPECT_EQ(sites.first, 200) << sites.second;
  EXPECT_NE(sites.second.find("\"site\":\"cn-beijing\""), std::string::npos) << sites.second;
  EXPECT_NE(sites.second.find("\"free_gpus\":8"), std::string::npos) << sites.second;
  EXPECT_NE(sites.second.find("\"cordoned_nodes\":0"), std::string::npos) << sites.second;
  EXPECT_EQ(sites.second.find("bj-1"), std::string::npos) << "no node names for tenants";
  auto links = Curl("alice", "GET", "/v1/links");
  EXPECT_EQ(links.first, 200) << links.second;
  EXPECT_NE(links.second.find("\"links\""), std::string::npos) << links.second;
  EXPECT_EQ(Curl("alice", "GET", "/v1/nodes").first, 403) << "node names are the admins'";
  auto nodes = Curl("admin", "GET", "/v1/nodes");
  EXPECT_EQ(nodes.first, 200) << nodes.second;
  EXPECT_NE(nodes.second.find("\"name\":\"bj-1\""), std::string::npos) << nodes.second;
  EXPECT_EQ(Curl("peer", "GET", "/v1/sites").first, 403) << "a gateway is not a tenant";

  auto [code, body] = Curl("alice", "POST", "/v1/jobs",
                           Body(R"({"spec": {"name": "vc", "gpus": 3, "command": ["sleep", "30"]}})"));
  ASSERT_EQ(code, 200) << body;
  const std::string id = IdOf(body);
  std::string vc;
  ASSERT_TRUE(Eventually([&] {
    vc = Curl("alice", "GET", "/v1/jobs/" + id + "/vc").second;
    return vc.find("\"world_size\":3") != std::string::npos && vc.find("\"rank\":2") != std::string::npos;
  }, 20000, 200)) << vc;
  EXPECT_NE(vc.find("\"node\":\"bj-1\""), std::string::npos) << vc;
  EXPECT_NE(vc.find("\"placement\":[{\"site\":\"cn-beijing\""), std::string::npos)
      << "the placement's explanation stays with the world: " << vc;
  EXPECT_EQ(Curl("bob", "GET", "/v1/jobs/" + id + "/vc").first, 404) << "another tenant's job";
  EXPECT_EQ(Curl("alice", "GET", "/v1/jobs/j-00000000000000ff/vc").first, 404);
  EXPECT_EQ(Curl("alice", "GET", "/v1/jobs/not..an-id/vc").first, 400) << "a malformed id";
  // The job's story so far, oldest first: why it is where it is.
  std::string story;
  ASSERT_TRUE(Eventually([&] {
    story = Curl("alice", "GET", "/v1/jobs/" + id + "/events").second;
    return story.find("\"type\":\"started\"") != std::string::npos;
  }, 20000, 200)) << story;
  size_t at = 0;
  for (const char* type : {"submitted", "placed", "reserved", "started"}) {
    const size_t p = story.find(std::string("\"type\":\"") + type + "\"", at);
    EXPECT_NE(p, std::string::npos) << type << " after offset " << at << ": " << story;
    if (p != std::string::npos) at = p;
  }
  EXPECT_NE(story.find("placed on cn-beijing"), std::string::npos) << story;
  EXPECT_NE(story.find("cn-beijing (used): "), std::string::npos) << "with the reasons: " << story;
  EXPECT_EQ(Curl("bob", "GET", "/v1/jobs/" + id + "/events").first, 404) << "another tenant's job";
  EXPECT_EQ(Curl("alice", "GET", "/v1/jobs/" + id + "/events?after_seq=x").first, 400);
  Curl("alice", "POST", "/v1/jobs/" + id + ":cancel");
  ASSERT_TRUE(Eventually([&] {
    story = Curl("alice", "GET", "/v1/jobs/" + id + "/events?after_seq=2").second;
    return story.find("CANCELLED: cancelled by") != std::string::npos;
  }, 5000, 100)) << story;
  EXPECT_EQ(story.find("\"submitted\""), std::string::npos) << "after_seq skips the first: " << story;
}

}  // namespace
}  // namespace fedgate::testing
