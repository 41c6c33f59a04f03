// Placement dry runs against a real 3-site federation: the demo's stitched
// A100 job, explanations, and refused or malformed requests.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "fedgate/v1/jobs.grpc.pb.h"
#include "tests/support/harness.h"

namespace fedgate::testing {
namespace {

class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto site = [](std::string name, std::vector<std::string> peers,
                   std::vector<std::string> nodes) {
      SiteOptions o;
      o.site = std::move(name);
      o.peers = std::move(peers);
      o.node_lines = std::move(nodes);
      return o;
    };
    fed_.AddSite(site("cn-beijing", {"cn-shanghai"},
                      {"{name: bj-1, address: 127.0.0.1, gpu_model: A100-80GB, gpu_memory_gib: 80, gpus: 8}"}));
    fed_.AddSite(site("cn-shanghai", {"cn-beijing", "cn-shenzhen"},
                      {"{name: sh-1, address: 127.0.0.1, gpu_model: A100-80GB, gpu_memory_gib: 80, gpus: 4}",
                       "{name: sh-2, address: 127.0.0.1, gpu_model: H100, gpu_memory_gib: 80, gpus: 4}"}));
    fed_.AddSite(site("cn-shenzhen", {"cn-shanghai"},
                      {"{name: sz-1, address: 127.0.0.1, gpu_model: H100, gpu_memory_gib: 80, gpus: 8}",
                       "{name: sz-2, address: 127.0.0.1, gpu_model: H100, gpu_memory_gib: 80, gpus: 8}"}));
    fed_.StartAll();
    ASSERT_TRUE(Eventually(
        [&] { return fed_.Converged({"cn-beijing", "cn-shanghai", "cn-shenzhen"}); }, 15000));
  }
  CommandResult Plan(const std::string& spec, const std::string& site = "cn-beijing",
                     const std::string& fmt = "json") {
    WriteText(tmp_ / "job.yaml", spec);
    return RunCommand({FedctlBin(), "jobs", "plan", "-f", tmp_ / "job.yaml", "-o", fmt,
                       "--gateway", fed_.endpoint(site), "--tls-dir", fed_.admin_tls_dir(site)});
  }
  TestCa ca_;
  TestFederation fed_{&ca_};
  TempDir tmp_;
};

TEST_F(PlanTest, TwelveA100sAreStitchedFromBeijingAndShanghai) {
  auto r = Plan("name: demo\ngpus: 12\ngpu_models: [A100-80GB]\ncommand: [true]\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::PlanResponse plan;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &plan).ok()) << r.out;
  ASSERT_TRUE(plan.placeable()) << plan.summary();
  ASSERT_EQ(plan.sites_size(), 2);
  EXPECT_EQ(plan.sites(0), "cn-beijing");
  EXPECT_EQ(plan.sites(1), "cn-shanghai");
  ASSERT_EQ(plan.slices_size(), 2);
  EXPECT_EQ(plan.slices(0).node(), "bj-1");
  EXPECT_EQ(plan.slices(0).gpus(), 8u);
  EXPECT_EQ(plan.slices(1).node(), "sh-1");
  EXPECT_EQ(plan.slices(1).first_rank(), 8u);
  for (const auto& e : plan.explanation()) {
    if (e.site() == "cn-shenzhen") {
      EXPECT_FALSE(e.used());
      EXPECT_NE(e.reason().find("no GPU of model A100-80GB"), std::string::npos) << e.reason();
    }
  }
  // The same question asked at another site gives the same answer.
  auto r2 = Plan("name: demo\ngpus: 12\ngpu_models: [A100-80GB]\ncommand: [true]\n", "cn-shenzhen");
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  v1::PlanResponse plan2;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r2.out, &plan2).ok());
  EXPECT_EQ(plan2.sites_size(), 2);
  EXPECT_EQ(plan2.sites(0), "cn-beijing");

  auto table = Plan("gpus: 12\ngpu_models: [A100-80GB]\ncommand: [true]\n", "cn-beijing", "table");
  EXPECT_NE(table.out.find("0-7"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("8-11"), std::string::npos) << table.out;
}

TEST_F(PlanTest, UnplaceableJobsSayWhy) {
  auto r = Plan("gpus: 40\ncommand: [true]\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::PlanResponse plan;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &plan).ok());
  EXPECT_FALSE(plan.placeable());
  EXPECT_NE(plan.summary().find("cannot place 40"), std::string::npos) << plan.summary();
  EXPECT_EQ(plan.explanation_size(), 3);

  r = Plan("gpus: 12\ngpu_models: [A100-80GB]\nmin_link_gbps: 1\ncommand: [true]\n");
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &plan).ok());
  EXPECT_FALSE(plan.placeable()) << "links are unknown: no min_link_gbps can be met";
}

TEST_F(PlanTest, BadSpecsGetClearErrors) {
  auto r = Plan("gpus: 12\ngpu_models: [A10O]\ncommand: [true]\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown gpu model \"A10O\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  r = Plan("gpus: 0\ncommand: [true]\n");
  EXPECT_NE(r.err.find("gpus must be > 0"), std::string::npos) << r.err;
  r = Plan("gpus: 2\ncommand: [true]\nbogus: 1\n");
  EXPECT_EQ(r.exit_code, 2) << "caught before dialing";
  EXPECT_NE(r.err.find("unknown field \"bogus\""), std::string::npos) << r.err;
}

TEST_F(PlanTest, TenantsMayPlanPeersMayNot) {
  auto call = [&](const TlsFiles& files) {
    auto stub = v1::JobService::NewStub(TlsChannel(fed_.endpoint("cn-beijing"), files));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::PlanRequest req;
    req.mutable_spec()->set_gpus(4);
    req.mutable_spec()->add_command("true");
    v1::PlanResponse resp;
    return stub->Plan(&ctx, req, &resp);
  };
  EXPECT_TRUE(call(ca_.User("vision", "bob")).ok());
  EXPECT_EQ(call(ca_.Gateway("cn-shanghai")).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(call(ca_.Admin("cn-shanghai")).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

}  // namespace
}  // namespace fedgate::testing
