// MIG slices as their own resource: the inventory's `mig:` map, the nodes
// it becomes, and placement that gives slices only to jobs asking for them.
#include <gtest/gtest.h>

#include <set>

#include "federation/job_spec.h"
#include "federation/mig.h"
#include "federation/placement.h"
#include "gateway/config/config.h"
#include "tests/support/temp_dir.h"

namespace fedgate {
namespace {

using federation::JobRequest;
using federation::SiteOffer;

TEST(Mig, ProfilesAreCheckedAndNamedModels) {
  for (const char* p : {"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb", "1g.5gb"}) {
    EXPECT_TRUE(federation::IsMigProfile(p)) << p;
  }
  for (const char* p : {"", "1g", "0g.10gb", "1g.10GB", "10g.10gb", "1g.010gb", "1g.10gbx", "g.10gb"}) {
    EXPECT_FALSE(federation::IsMigProfile(p)) << p;
  }
  EXPECT_EQ(federation::MigProfileMemoryGib("3g.40gb"), 40u);
  EXPECT_EQ(federation::MigModel("A100-80GB", "1g.10gb"), "A100-80GB MIG 1g.10gb");
  EXPECT_EQ(federation::MigProfileOf("A100-80GB MIG 1g.10gb"), "1g.10gb");
  EXPECT_EQ(federation::MigProfileOf("A100-80GB"), "");
}

TEST(Mig, APartitionedGpuBecomesANodePerProfileAndLeavesTheWholeGpus) {
  federation::Node n;
  n.name = "a-n1";
  n.address = "10.0.0.1";
  n.gpu_model = "A100-80GB";
  n.gpu_memory_gib = 80;
  n.gpus = 2;
  std::map<uint32_t, std::vector<federation::MigSlice>> mig;
  for (int i = 0; i < 3; ++i) mig[0].push_back({"1g.10gb", "", false});
  mig[0].push_back({"2g.20gb", "MIG-given-uuid", false});
  auto out = federation::ExpandMig("site-a", n, mig);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  const auto& whole = (*out)[0];
  EXPECT_EQ(whole.name, "a-n1");
  EXPECT_EQ(whole.gpus, 1u);
  EXPECT_EQ(whole.devices, std::vector<std::string>{"1"}) << "GPU 0 is partitioned: the whole one is 1";
  const auto& small = (*out)[1];
  EXPECT_EQ(small.name, "a-n1-mig-1g-10gb");
  EXPECT_EQ(small.gpu_model, "A100-80GB MIG 1g.10gb");
  EXPECT_EQ(small.gpu_memory_gib, 10u);
  EXPECT_EQ(small.gpus, 3u);
  EXPECT_EQ(small.address, "10.0.0.1");
  EXPECT_EQ(std::set<std::string>(small.devices.begin(), small.devices.end()).size(), 3u);
  for (const auto& d : small.devices) EXPECT_EQ(d.rfind("MIG-", 0), 0u) << d;
  EXPECT_EQ(small.labels.at("fedgate.io/mig-uuids"), "derived");
  EXPECT_EQ((*out)[2].devices, std::vector<std::string>{"MIG-given-uuid"});
  EXPECT_FALSE((*out)[2].labels.contains("fedgate.io/mig-uuids"));
  // Derived UUIDs are stable: the same site, node, GPU and index give the same one.
  EXPECT_EQ(small.devices[1], federation::DerivedMigUuid("site-a", "a-n1", 0, 1));
  EXPECT_NE(small.devices[1], federation::DerivedMigUuid("site-b", "a-n1", 0, 1));

  mig.clear();
  mig[5].push_back({"1g.10gb", "", false});
  EXPECT_NE(federation::ExpandMig("s", n, mig).status().message().find("GPU 5 is not one of its 2"),
            std::string::npos);
  mig.clear();
  for (int i = 0; i < 8; ++i) mig[0].push_back({"1g.10gb", "", false});
  EXPECT_NE(federation::ExpandMig("s", n, mig).status().message().find("at most 7"), std::string::npos);
  mig.clear();
  mig[0].push_back({"big", "", false});
  EXPECT_NE(federation::ExpandMig("s", n, mig).status().message().find("not a MIG profile"),
            std::string::npos);
}

TEST(Mig, TheInventoryMapParsesAndBadEntriesAreNamed) {
  testing::TempDir dir;
  for (const char* f : {"ca.pem", "cert.pem", "key.pem"}) testing::WriteText(dir / f, "x");
  const std::string head =
      "site: cn-beijing\nfederation: aidc\nlisten: {grpc: 0.0.0.0:7443}\n"
      "tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\ninventory:\n  nodes:\n";
  auto c = gateway::ParseConfig(
      head + "    - {name: bj-1, address: 10.0.0.11, gpu_model: A100-80GB, gpus: 1,\n"
             "       mig: {0: [1g.10gb, 1g.10gb, {profile: 3g.40gb, uuid: MIG-abc}]}}\n",
      dir.path(), "fedgate.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->nodes.size(), 2u) << "the one GPU is partitioned: no whole-GPU node left";
  EXPECT_EQ(c->nodes[0].name, "bj-1-mig-1g-10gb");
  EXPECT_EQ(c->nodes[0].gpus, 2u);
  EXPECT_EQ(c->nodes[1].devices, std::vector<std::string>{"MIG-abc"});
  auto bad = gateway::ParseConfig(
      head + "    - {name: bj-1, address: 10.0.0.11, gpu_model: A100-80GB, gpus: 1, mig: {0: [9g.1tb]}}\n",
      dir.path(), "fedgate.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("inventory.nodes[0].mig"), std::string::npos)
      << bad.status();
  EXPECT_NE(std::string(bad.status().message()).find("not a MIG profile"), std::string::npos);
}

TEST(Mig, SlicesGoOnlyToJobsAskingForTheirProfile) {
  // site-a: one whole A100 and seven 1g.10gb slices of its other GPU.
  std::vector<SiteOffer> offers = {
      {"site-a", true, {{"a-n1", "A100-80GB", 80, 1}, {"a-n1-mig-1g-10gb", "A100-80GB MIG 1g.10gb", 10, 7}}, {}},
  };
  auto none = [](auto&, auto&) { return std::nullopt; };
  JobRequest whole;
  whole.gpus = 2;
  auto r = federation::Place(whole, offers, none);
  EXPECT_FALSE(r.placement.has_value()) << "a whole-GPU job never gets a slice";
  whole.gpus = 1;
  r = federation::Place(whole, offers, none);
  ASSERT_TRUE(r.placement.has_value());
  EXPECT_EQ(r.placement->slices[0].node, "a-n1");
  JobRequest mig;
  mig.gpus = 7;
  mig.mig_profile = "1g.10gb";
  r = federation::Place(mig, offers, none);
  ASSERT_TRUE(r.placement.has_value()) << r.summary;
  EXPECT_EQ(r.placement->slices[0].node, "a-n1-mig-1g-10gb");
  mig.gpu_models = {"A100-80GB"};  // the base model filters slices too
  EXPECT_TRUE(federation::Place(mig, offers, none).placement.has_value());
  mig.gpu_models = {"H100"};
  r = federation::Place(mig, offers, none);
  EXPECT_FALSE(r.placement.has_value());
  ASSERT_FALSE(r.explanation.empty());
  EXPECT_NE(r.explanation[0].reason.find("no MIG slice of profile 1g.10gb on H100"), std::string::npos)
      << r.explanation[0].reason;
  mig.gpu_models.clear();
  mig.mig_profile = "2g.20gb";
  EXPECT_FALSE(federation::Place(mig, offers, none).placement.has_value());
}

TEST(Mig, ASpecAsksForASliceByProfile) {
  v1::JobSpec s;
  s.set_mig("1g.10gb");
  s.add_command("serve");
  EXPECT_TRUE(federation::ValidateJobSpec(s, {}).ok()) << "gpus may be left out: one slice";
  EXPECT_EQ(federation::WithDefaults(s).gpus(), 1u);
  EXPECT_EQ(federation::ToJobRequest(s).mig_profile, "1g.10gb");
  s.set_kind("service");
  s.set_name("chat");
  EXPECT_TRUE(federation::ValidateJobSpec(s, {}).ok()) << federation::ValidateJobSpec(s, {});
  s.set_mig("1g.10GB");
  EXPECT_NE(federation::ValidateJobSpec(s, {}).message().find("mig must be a MIG profile"), std::string::npos);
}

}  // namespace
}  // namespace fedgate
