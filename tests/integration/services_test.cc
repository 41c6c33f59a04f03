// Inference services (issue 28) on one real gateway: a service's replicas
// are jobs running deploy/workload/model_server.py; requests go through
// /v1/services/<name>/ over HTTPS with client certificates (curl), are
// relayed as sent, survive a replica killed -9, and hostile or oversized
// requests get clear statuses and reach no replica.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

class ServicesTest : public ::testing::Test {
 protected:
  void SetUp() override { StartSites({"cn-beijing"}); }
  // Sites that peer with each other, one 8-GPU node each (or `node`).
  void StartSites(const std::vector<std::string>& sites, const std::string& node = "") {
    for (const auto& name : sites) {
      SiteOptions o;
      o.site = name;
      o.node_lines = {node.empty() ? "{name: " + name + "-1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 8}"
                                   : node};
      for (const auto& p : sites) {
        if (p != name) o.peers.push_back(p);
      }
      o.serve = true;
      fed_.AddSite(o);
    }
    for (const auto& name : sites) fed_.Start(name);
    for (const auto& name : sites) ASSERT_TRUE(fed_.WaitReady(name)) << fed_.log(name);
    WriteTlsDir(tmp_ / "alice", ca_.User("vision", "alice"));
    WriteTlsDir(tmp_ / "bob", ca_.User("speech", "bob"));
  }
  struct Reply {
    int code = 0;
    std::string body, headers;
  };
  Reply Curl(const std::string& who, const std::string& method, const std::string& path,
             std::vector<std::string> extra = {}, const std::string& site = "cn-beijing") {
    const std::string out = tmp_ / ("out-" + std::to_string(++n_));
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "--path-as-is", "-o", out, "-D", out + ".h",
                                     "-w", "%{http_code}", "-X", method, "--cacert", tmp_ / "alice/ca.pem",
                                     "--cert", tmp_ / (who + "/cert.pem"), "--key", tmp_ / (who + "/key.pem")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("https://127.0.0.1:" + std::to_string(fed_.http_port(site)) + path);
    auto r = RunCommand(argv);
    Reply rep;
    try {
      rep.code = std::stoi(r.out);
    } catch (...) {
    }
    rep.body = ReadText(out);
    rep.headers = ReadText(out + ".h");
    return rep;
  }
  std::string Body(const std::string& text) {
    const std::string f = tmp_ / ("body-" + std::to_string(++n_));
    WriteText(f, text);
    return f;
  }
  // A string field's value, in the gateway's JSON or Python's ("k": "v").
  static std::string Field(const std::string& json, const std::string& key) {
    auto p = json.find("\"" + key + "\":");
    if (p == std::string::npos) return "";
    p += key.size() + 3;
    while (p < json.size() && json[p] == ' ') ++p;
    if (p >= json.size() || json[p] != '"') return "";
    return json.substr(p + 1, json.find('"', p + 1) - p - 1);
  }
  std::string SubmitService(const std::string& spec) {
    auto r = Curl("alice", "POST", "/v1/jobs",
                  {"-H", "Content-Type: application/json", "--data-binary", "@" + Body(spec)});
    EXPECT_EQ(r.code, 200) << r.body;
    return Field(r.body, "id");
  }
  // The service's replica jobs that are not over, by id.
  std::vector<std::string> LiveReplicas(const std::string& service_id) {
    auto list = Curl("alice", "GET", "/v1/jobs?page_size=500");
    std::vector<std::string> ids;
    size_t at = 0;
    while ((at = list.body.find("\"service\":\"" + service_id + "\"", at)) != std::string::npos) {
      // The job object that holds this spec starts at the last "id" before it.
      const auto start = list.body.rfind("{\"id\":\"", at);
      const auto obj = list.body.substr(start, at - start);
      const std::string state = Field(obj, "state");
      if (state == "PENDING" || state == "RESERVING" || state == "RUNNING") ids.push_back(Field(obj, "id"));
      at += 10;
    }
    return ids;
  }
  std::string Server(const std::string& flags) {
    return std::string(R"(["python3", ")") + FEDGATE_SOURCE_DIR + R"(/deploy/workload/model_server.py")" + flags + "]";
  }
  TestCa ca_;
  TestFederation fed_{&ca_};
  TempDir tmp_;
  int n_ = 0;
};

TEST_F(ServicesTest, RequestsReachReadyReplicasAsSentAndSurviveAReplicaKilled) {
  const std::string id = SubmitService(
      R"({"spec": {"kind": "service", "name": "chat", "gpus": 1, "replicas": {"min": 2, "max": 4},
          "readiness": {"period": "300ms", "failure_threshold": 2}, "max_body": "64KiB",
          "command": )" + Server(R"(, "--compute-ms", "5")") + "}}");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] { return Curl("alice", "GET", "/v1/jobs/" + id).body.find("2 of 2 replica(s) ready") != std::string::npos; },
                         30000, 200))
      << Curl("alice", "GET", "/v1/jobs/" + id).body << fed_.log("cn-beijing");
  auto job = Curl("alice", "GET", "/v1/jobs/" + id).body;
  EXPECT_EQ(Field(job, "state"), "RUNNING") << job;
  ASSERT_EQ(LiveReplicas(id).size(), 2u);

  // Both replicas serve; the prefix is gone, the query kept.
  std::set<std::string> served_by;
  for (int i = 0; i < 30; ++i) {
    auto r = Curl("alice", "POST", "/v1/services/chat/predict", {"--data-binary", "hello"});
    ASSERT_EQ(r.code, 200) << r.body;
    served_by.insert(Field(r.body, "replica"));
  }
  EXPECT_EQ(served_by.size(), 2u) << "idle replicas share the requests";
  auto echo = Curl("alice", "POST", "/v1/services/chat/echo?x=1&y=two",
                   {"-H", "X-Trace: abc", "-H", "Transfer-Encoding: chunked", "--data-binary", "@" + Body(std::string(5000, 'z'))});
  ASSERT_EQ(echo.code, 200) << echo.body;
  EXPECT_EQ(Field(echo.body, "path"), "/echo?x=1&y=two");
  EXPECT_NE(echo.body.find("\"chunked\": true"), std::string::npos) << "a chunked body stays chunked: " << echo.body;
  EXPECT_NE(echo.body.find("\"body_bytes\": 5000"), std::string::npos) << echo.body;
  EXPECT_NE(echo.body.find("\"x-trace\": \"abc\""), std::string::npos) << echo.body;
  EXPECT_NE(echo.body.find("\"x-forwarded-for\": \"127.0.0.1\""), std::string::npos) << echo.body;
  auto sized = Curl("alice", "POST", "/v1/services/chat/echo", {"--data-binary", "@" + Body(std::string(3000, 'q'))});
  EXPECT_NE(sized.body.find("\"chunked\": false"), std::string::npos) << sized.body;
  EXPECT_NE(sized.body.find("\"content-length\": \"3000\""), std::string::npos) << sized.body;
  // A large answer streams through.
  auto big = Curl("alice", "GET", "/v1/services/chat/stream?bytes=20000000");
  EXPECT_EQ(big.code, 200);
  EXPECT_EQ(big.body.size(), 20000000u);

  // Bad input: clear statuses, counted, no replica reached.
  const int ops = fed_.ops_port("cn-beijing");
  const double before = Metric(ops, R"(fedgate_service_requests_total{service="chat",site="cn-beijing",code="200"})");
  EXPECT_GE(before, 33);
  EXPECT_EQ(Curl("alice", "GET", "/v1/services/nope/predict").code, 404);
  EXPECT_EQ(Curl("bob", "POST", "/v1/services/chat/predict", {"--data-binary", "x"}).code, 404)
      << "another tenant's service does not exist for it";
  EXPECT_EQ(Curl("alice", "GET", "/v1/services/chat/../../v1/jobs").code, 400);
  EXPECT_EQ(Curl("alice", "GET", "/v1/services/chat/a%2Fb").code, 400);
  EXPECT_EQ(Curl("alice", "GET", "/v1/services/chat/%2e%2e/x").code, 400);
  auto over = Curl("alice", "POST", "/v1/services/chat/predict", {"--data-binary", "@" + Body(std::string(70000, 'o'))});
  EXPECT_EQ(over.code, 413) << over.body;
  auto over_chunked = Curl("alice", "POST", "/v1/services/chat/echo",
                           {"-H", "Transfer-Encoding: chunked", "--data-binary", "@" + Body(std::string(70000, 'o'))});
  EXPECT_EQ(over_chunked.code, 413) << over_chunked.body;
  EXPECT_EQ(Metric(ops, R"(fedgate_service_requests_total{service="chat",site="cn-beijing",code="200"})"), before);
  EXPECT_GE(Metric(ops, R"(fedgate_service_requests_total{service="chat",site="cn-beijing",code="413"})"), 2);
  EXPECT_GE(Metric(ops, R"(fedgate_service_requests_total{service="-",site="cn-beijing",code="400"})"), 3);

  // One replica killed -9: no request fails (refused ones go to the other),
  // and the lost replica is replaced.
  const auto replicas = LiveReplicas(id);
  ASSERT_EQ(replicas.size(), 2u);
  for (pid_t pid : JobRankPids(replicas[0])) ::kill(pid, SIGKILL);
  int failed = 0;
  for (int i = 0; i < 30; ++i) {
    if (Curl("alice", "POST", "/v1/services/chat/predict", {"--data-binary", "x"}).code != 200) ++failed;
  }
  EXPECT_EQ(failed, 0);
  // The lost replica runs again (its job's next attempt, or a new replica
  // job once its attempts are spent) and is back in rotation.
  EXPECT_TRUE(Eventually([&] {
    auto now = LiveReplicas(id);
    const bool again = std::find(now.begin(), now.end(), replicas[0]) == now.end() ||
                       Curl("alice", "GET", "/v1/jobs/" + replicas[0]).body.find("\"attempt\":2") != std::string::npos;
    return now.size() == 2 && again &&
           Curl("alice", "GET", "/v1/jobs/" + id).body.find("2 of 2 replica(s) ready") != std::string::npos;
  }, 30000, 250)) << fed_.log("cn-beijing");
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Curl("alice", "POST", "/v1/services/chat/predict", {"--data-binary", "x"}).code, 200);
  }
  EXPECT_GE(Metric(ops, R"(fedgate_service_replicas{service="chat",state="ready"})"), 2);

  // Deleting the service (cancel) stops every replica; its address is gone.
  auto cancel = Curl("alice", "POST", "/v1/jobs/" + id + ":cancel");
  EXPECT_EQ(cancel.code, 200) << cancel.body;
  EXPECT_TRUE(Eventually([&] { return LiveReplicas(id).empty(); }, 15000, 200));
  EXPECT_TRUE(Eventually([&] { return Curl("alice", "POST", "/v1/services/chat/predict").code == 404; }, 5000));
}

TEST_F(ServicesTest, AReplicaThatNeverBecomesReadyGets503WithRetryAfter) {
  const std::string flag = tmp_ / "not-ready";
  WriteText(flag, "");
  const std::string id = SubmitService(
      R"({"spec": {"kind": "service", "name": "slow", "gpus": 1, "readiness": {"period": "300ms"},
          "command": )" + Server(R"(, "--not-ready-file", ")" + flag + R"(")") + "}}");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] { return LiveReplicas(id).size() == 1; }, 10000));
  auto r = Curl("alice", "POST", "/v1/services/slow/predict", {"--data-binary", "x"});
  EXPECT_EQ(r.code, 503) << r.body;
  EXPECT_NE(r.headers.find("Retry-After: 1"), std::string::npos) << r.headers;
  EXPECT_NE(r.body.find("no ready replica"), std::string::npos) << r.body;
  EXPECT_EQ(Field(Curl("alice", "GET", "/v1/jobs/" + id).body, "state"), "PENDING");
  // Once its probe passes it is in rotation and the service RUNNING.
  std::filesystem::remove(flag);
  EXPECT_TRUE(Eventually([&] {
    return Curl("alice", "POST", "/v1/services/slow/predict", {"--data-binary", "x"}).code == 200;
  }, 15000, 200));
  EXPECT_EQ(Field(Curl("alice", "GET", "/v1/jobs/" + id).body, "state"), "RUNNING");
  // A second service of the same name is refused while this one runs.
  auto dup = Curl("alice", "POST", "/v1/jobs",
                  {"-H", "Content-Type: application/json", "--data-binary",
                   "@" + Body(R"({"spec": {"kind": "service", "name": "slow", "gpus": 1, "command": ["true"]}})")});
  EXPECT_EQ(dup.code, 409) << dup.body;
  EXPECT_NE(dup.body.find("already runs service"), std::string::npos) << dup.body;
}

// MIG: a node with one whole GPU and seven 1g.10gb slices of the other.
class ServicesMigTest : public ServicesTest {
 protected:
  void SetUp() override {
    StartSites({"cn-beijing"},
               "{name: bj-1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2, mig: {0: [1g.10gb, 1g.10gb, "
               "1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, {profile: 1g.10gb, uuid: MIG-0000-given}]}}");
  }
};

TEST_F(ServicesMigTest, SevenSlicesRunSevenReplicasEachSeeingOnlyItsUuid) {
  const std::string id = SubmitService(
      R"({"spec": {"kind": "service", "name": "small", "mig": "1g.10gb", "replicas": {"min": 7, "max": 7},
          "readiness": {"period": "300ms"}, "command": )" + Server("") + "}}");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] {
    return Curl("alice", "GET", "/v1/jobs/" + id).body.find("7 of 7 replica(s) ready") != std::string::npos;
  }, 40000, 250)) << Curl("alice", "GET", "/v1/jobs/" + id).body << fed_.log("cn-beijing");
  std::set<std::string> devices;
  for (int i = 0; i < 80 && devices.size() < 7; ++i) {
    auto r = Curl("alice", "POST", "/v1/services/small/predict", {"--data-binary", "x"});
    ASSERT_EQ(r.code, 200) << r.body;
    const std::string d = Field(r.body, "devices");
    EXPECT_EQ(d.rfind("MIG-", 0), 0u) << "one MIG UUID, nothing else: " << d;
    EXPECT_EQ(d.find(','), std::string::npos) << d;
    devices.insert(d);
  }
  EXPECT_EQ(devices.size(), 7u) << "seven replicas, seven distinct slices";
  EXPECT_TRUE(devices.contains("MIG-0000-given")) << "a UUID the inventory names is used as given";
  // Whole-GPU jobs: the one whole GPU (device 1) serves one; two never fit.
  auto submit = [&](int gpus) {
    return SubmitService(R"({"spec": {"name": "whole", "gpus": )" + std::to_string(gpus) +
                         R"(, "command": ["sh", "-c", "echo devices=$CUDA_VISIBLE_DEVICES; sleep 30"]}})");
  };
  const std::string two = submit(2);
  const std::string one = submit(1);
  ASSERT_TRUE(Eventually([&] { return Field(Curl("alice", "GET", "/v1/jobs/" + one).body, "state") == "RUNNING"; },
                         15000));
  ASSERT_TRUE(Eventually([&] {
    return Curl("alice", "GET", "/v1/jobs/" + one + "/logs?rank=0").body.find("devices=1\n") != std::string::npos;
  }, 10000)) << Curl("alice", "GET", "/v1/jobs/" + one + "/logs?rank=0").body;
  auto pending = Curl("alice", "GET", "/v1/jobs/" + two).body;
  EXPECT_EQ(Field(pending, "state"), "PENDING") << "two whole GPUs never come from slices: " << pending;
  // The ad carries the slices as their own model.
  auto sites = Curl("alice", "GET", "/v1/sites").body;
  EXPECT_NE(sites.find("A100-80GB MIG 1g.10gb"), std::string::npos) << sites;
}

class ServicesRelayTest : public ServicesTest {
 protected:
  void SetUp() override { StartSites({"cn-beijing", "cn-shanghai"}); }
  CommandResult Fedctl(const std::string& site, std::vector<std::string> args) {
    std::vector<std::string> argv = {FedctlBin(), "--gateway", fed_.endpoint(site), "--tls-dir", tmp_ / "alice"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
};

// Any gateway serves a service: one that does not coordinate it relays the
// request (mTLS, naming the tenant) to the one that does, which its ad names.
TEST_F(ServicesRelayTest, AnotherGatewayRelaysToTheCoordinatorAndFedctlManagesTheService) {
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"cn-beijing", "cn-shanghai"}); }, 20000));
  const std::string id = SubmitService(
      R"({"spec": {"kind": "service", "name": "chat", "gpus": 1, "replicas": {"min": 1, "max": 3},
          "readiness": {"period": "300ms"}, "command": )" + Server("") + "}}");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] {
    return Curl("alice", "POST", "/v1/services/chat/predict", {"--data-binary", "x"}, "cn-shanghai").code == 200;
  }, 30000, 250)) << fed_.log("cn-shanghai");
  // 3 MB: streamed (over 1 MiB), and curl waits for "100 Continue" first.
  const std::string big = Body(std::string(3000000, 'e'));
  auto echo = Curl("alice", "POST", "/v1/services/chat/echo?via=sh", {"--data-binary", "@" + big}, "cn-shanghai");
  ASSERT_EQ(echo.code, 200) << echo.body;
  EXPECT_EQ(Field(echo.body, "path"), "/echo?via=sh");
  EXPECT_NE(echo.body.find("\"body_bytes\": 3000000"), std::string::npos) << echo.body;
  EXPECT_EQ(echo.body.find("\"expect\""), std::string::npos) << "answered by the gateway: " << echo.body;
  auto direct = Curl("alice", "POST", "/v1/services/chat/echo", {"--data-binary", "@" + big});
  EXPECT_NE(direct.body.find("\"body_bytes\": 3000000"), std::string::npos) << direct.body;
  EXPECT_EQ(echo.body.find("fedgate-tenant"), std::string::npos) << "fedgate's header never reaches a replica";
  EXPECT_GE(Metric(fed_.ops_port("cn-shanghai"),
                   R"(fedgate_service_requests_total{service="chat",site="cn-beijing",code="200"})"),
            2);
  // Another tenant is not relayed into alice's service.
  EXPECT_EQ(Curl("bob", "POST", "/v1/services/chat/predict", {"--data-binary", "x"}, "cn-shanghai").code, 404);
  // A user cannot name another tenant; a gateway that is not an approved
  // peer cannot relay.
  EXPECT_EQ(Curl("bob", "POST", "/v1/services/chat/predict", {"-H", "Fedgate-Tenant: vision", "--data-binary", "x"}).code,
            404);
  WriteTlsDir(tmp_ / "stranger", ca_.Gateway("cn-hangzhou"));
  EXPECT_EQ(Curl("stranger", "POST", "/v1/services/chat/predict", {"-H", "Fedgate-Tenant: vision", "--data-binary", "x"}).code,
            403);

  // fedctl services: list, scale, get, delete.
  auto jobs = Fedctl("cn-beijing", {"jobs", "list"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_NE(jobs.out.find("KIND"), std::string::npos) << jobs.out;
  EXPECT_NE(jobs.out.find(" service "), std::string::npos) << jobs.out;
  EXPECT_NE(jobs.out.find(" replica "), std::string::npos) << jobs.out;
  auto list = Fedctl("cn-beijing", {"services", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("chat"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("/v1/services/chat/"), std::string::npos) << list.out;
  auto bad = Fedctl("cn-beijing", {"services", "scale", "chat", "--min", "3", "--max", "2"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("less than min"), std::string::npos) << bad.err;
  auto scaled = Fedctl("cn-beijing", {"services", "scale", "chat", "--min", "2", "--max", "3"});
  ASSERT_EQ(scaled.exit_code, 0) << scaled.err;
  ASSERT_TRUE(Eventually([&] { return LiveReplicas(id).size() == 2; }, 10000))
      << scaled.out << Curl("alice", "GET", "/v1/jobs?page_size=50").body << fed_.log("cn-beijing");
  ASSERT_TRUE(Eventually([&] {
    auto got = Fedctl("cn-beijing", {"-o", "json", "services", "get", "chat"});
    return got.out.find("\"ready\":2") != std::string::npos;
  }, 20000, 300)) << Fedctl("cn-beijing", {"-o", "json", "services", "get", "chat"}).out;
  auto rest = Curl("alice", "GET", "/v1/services");
  EXPECT_EQ(rest.code, 200);
  EXPECT_NE(rest.body.find("\"desired\":2"), std::string::npos) << rest.body;
  auto events = Curl("alice", "GET", "/v1/jobs/" + id + "/events");
  EXPECT_NE(events.body.find("replicas min 2 max 3"), std::string::npos) << events.body;
  // listen.serve: a bearer token instead of a client certificate.
  auto bearer = [&](const std::string& token, const std::string& path) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "--path-as-is", "-o", "/dev/null", "-w",
                                     "%{http_code}", "--cacert", tmp_ / "alice/ca.pem", "-X", "POST",
                                     "--data-binary", "x"};
    if (!token.empty()) argv.insert(argv.end(), {"-H", "Authorization: Bearer " + token});
    argv.push_back("https://127.0.0.1:" + std::to_string(fed_.serve_port("cn-beijing")) + path);
    return RunCommand(argv).out;
  };
  ASSERT_GT(fed_.serve_port("cn-beijing"), 0);
  EXPECT_EQ(bearer("", "/v1/services/chat/predict"), "401");
  auto issued = Fedctl("cn-beijing", {"services", "token", "chat"});
  ASSERT_EQ(issued.exit_code, 0) << issued.err;
  const std::string token = issued.out.substr(0, issued.out.find('\n'));
  ASSERT_EQ(token.size(), 68u) << issued.out;
  EXPECT_EQ(bearer(token, "/v1/services/chat/predict"), "200");
  EXPECT_EQ(bearer("fgs_" + std::string(64, '0'), "/v1/services/chat/predict"), "401");
  EXPECT_EQ(bearer(token, "/v1/jobs"), "404") << "listen.serve serves services only";
  EXPECT_EQ(bearer(token, "/v1/services/other/predict"), "403") << "a token opens its own service only";
  EXPECT_EQ(bearer(token, "/v1/services/chat/../x"), "400");
  EXPECT_GE(Metric(fed_.ops_port("cn-beijing"),
                   R"(fedgate_service_requests_total{service="chat",site="cn-beijing",code="401"})"),
            1);
  auto again = Fedctl("cn-beijing", {"services", "token", "chat"});
  ASSERT_EQ(again.exit_code, 0);
  EXPECT_EQ(bearer(token, "/v1/services/chat/predict"), "401") << "a new token replaces the old";
  ASSERT_EQ(Fedctl("cn-beijing", {"services", "token", "chat", "--revoke"}).exit_code, 0);
  EXPECT_EQ(bearer(again.out.substr(0, 68), "/v1/services/chat/predict"), "401") << "revoked";
  events = Curl("alice", "GET", "/v1/jobs/" + id + "/events");
  EXPECT_NE(events.body.find("bearer token revoked"), std::string::npos) << events.body;
  EXPECT_EQ(events.body.find("fgs_"), std::string::npos) << "a token never enters the story";

  auto del = Fedctl("cn-beijing", {"services", "delete", "chat"});
  ASSERT_EQ(del.exit_code, 0) << del.err;
  EXPECT_TRUE(Eventually([&] { return LiveReplicas(id).empty(); }, 15000, 200));
  // Gone from the coordinator's ad: the other gateway answers 404 again.
  EXPECT_TRUE(Eventually([&] {
    return Curl("alice", "POST", "/v1/services/chat/predict", {"--data-binary", "x"}, "cn-shanghai").code == 404;
  }, 10000, 200));
}


class ServicesHopTest : public ServicesRelayTest {
 protected:
  void SetUp() override { StartSites({"cn-beijing", "cn-shanghai", "cn-shenzhen"}); }
};

// A replica on another site than the coordinator's is probed and called
// through its own site's gateway, which serves only the replica's
// coordinator and tenant.
TEST_F(ServicesHopTest, AReplicaOnAnotherSiteIsReachedThroughItsSitesGateway) {
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"cn-beijing", "cn-shanghai", "cn-shenzhen"}); }, 20000));
  const std::string id = SubmitService(
      R"({"spec": {"kind": "service", "name": "chat", "gpus": 1, "allowed_sites": ["cn-shanghai"],
          "readiness": {"period": "300ms"}, "command": )" + Server("") + "}}");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] {
    return Curl("alice", "POST", "/v1/services/chat/predict", {"--data-binary", "x"}).code == 200;
  }, 30000, 250)) << fed_.log("cn-beijing") << fed_.log("cn-shanghai");
  auto echo = Curl("alice", "POST", "/v1/services/chat/echo?q=1", {"--data-binary", "abc"});
  ASSERT_EQ(echo.code, 200) << echo.body;
  EXPECT_EQ(Field(echo.body, "path"), "/echo?q=1");
  EXPECT_NE(echo.body.find("\"body_bytes\": 3"), std::string::npos) << echo.body;
  EXPECT_EQ(echo.body.find("fedgate-replica"), std::string::npos) << "fedgate's header never reaches a replica";
  EXPECT_EQ(echo.body.find("fedgate-tenant"), std::string::npos) << echo.body;
  // Two proxies on the way: the coordinator's, then shanghai's gateway's.
  EXPECT_NE(echo.body.find("\"x-forwarded-for\": \"127.0.0.1, 127.0.0.1\""), std::string::npos) << echo.body;
  // Shanghai's gateway relayed the probes and both requests on.
  EXPECT_GE(Metric(fed_.ops_port("cn-shanghai"),
                   R"(fedgate_service_requests_total{service="chat",site="cn-shanghai",code="200"})"),
            3);
  // The connection to shanghai's gateway is kept between requests.
  const int ops = fed_.ops_port("cn-beijing");
  const std::string reused = R"(fedgate_service_hop_connections_total{site="cn-shanghai",kind="reused"})";
  const std::string opened = R"(fedgate_service_hop_connections_total{site="cn-shanghai",kind="new"})";
  const double reused_before = Metric(ops, reused), opened_before = Metric(ops, opened);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Curl("alice", "POST", "/v1/services/chat/predict", {"--data-binary", "x"}).code, 200);
  }
  EXPECT_GE(Metric(ops, reused) - reused_before, 8);
  EXPECT_LE(Metric(ops, opened) - opened_before, 2);
  const auto replicas = LiveReplicas(id);
  ASSERT_EQ(replicas.size(), 1u);
  // Only the replica's coordinator may call it through shanghai's gateway;
  // a user's Fedgate-Replica is no more than a header (relayed as a tenant's
  // request, and dropped before the replica).
  WriteTlsDir(tmp_ / "shenzhen-gw", ca_.Gateway("cn-shenzhen"));
  const std::vector<std::string> hop = {"-H", "Fedgate-Tenant: vision", "-H", "Fedgate-Replica: " + replicas[0],
                                        "--data-binary", "x"};
  auto other = Curl("shenzhen-gw", "POST", "/v1/services/chat/echo", hop, "cn-shanghai");
  EXPECT_EQ(other.code, 403) << other.body;
  EXPECT_NE(other.body.find("not one of cn-shenzhen's services"), std::string::npos) << other.body;
  auto nobody = Curl("shenzhen-gw", "POST", "/v1/services/chat/echo",
                     {"-H", "Fedgate-Tenant: vision", "-H", "Fedgate-Replica: j-nosuch", "--data-binary", "x"},
                     "cn-shanghai");
  EXPECT_EQ(nobody.code, 404) << nobody.body;
  auto user = Curl("alice", "POST", "/v1/services/chat/echo", {"-H", "Fedgate-Replica: " + replicas[0],
                                                               "--data-binary", "x"}, "cn-shanghai");
  EXPECT_EQ(user.code, 200) << user.body;
  EXPECT_EQ(user.body.find("fedgate-replica"), std::string::npos) << user.body;
  // Its site's gateway gone, the replica is out of rotation.
  fed_.Kill("cn-shanghai");
  EXPECT_TRUE(Eventually([&] {
    auto r = Curl("alice", "POST", "/v1/services/chat/predict", {"--data-binary", "x"});
    return r.code == 503 && r.headers.find("Retry-After") != std::string::npos;
  }, 15000, 200));
}

}  // namespace
}  // namespace fedgate::testing
