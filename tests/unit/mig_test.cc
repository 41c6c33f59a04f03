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
  // mig: nvidia-smi: the node stays whole until the gateway reads the driver's list at start;
  // only one node (this host) may say so.
  auto found = gateway::ParseConfig(
      head + "    - {name: bj-1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2, mig: nvidia-smi}\n",
      dir.path(), "fedgate.yaml");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->inventory.mig_from_nvidia_smi, "bj-1");
  ASSERT_EQ(found->nodes.size(), 1u);
  EXPECT_EQ(found->nodes[0].gpus, 2u);
  auto two = gateway::ParseConfig(
      head + "    - {name: bj-1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2, mig: nvidia-smi}\n"
             "    - {name: bj-2, address: 127.0.0.2, gpu_model: A100-80GB, gpus: 2, mig: nvidia-smi}\n",
      dir.path(), "fedgate.yaml");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(std::string(two.status().message()).find("only one node"), std::string::npos) << two.status();
}

// nvidia-smi -L as drivers print it: R470 and later, and R450's device names.
TEST(Mig, NvidiaSmiListGivesEachGpusSlicesWithTheirRealUuids) {
  const char* listed =
      "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5c8b0c64-0c2b-4e4b-3a4f-7f1e9b1a2c3d)\n"
      "  MIG 3g.40gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
      "  MIG 1g.10gb     Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)\n"
      "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-0d5f2a71-8f0a-4c1e-9b77-0a1b2c3d4e5f)\n"
      "GPU 2: NVIDIA A100-SXM4-40GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\r\n"
      "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-11111111-2222-3333-4444-555555555555/7/0)\r\n";
  auto mig = federation::ParseNvidiaSmiList(listed);
  ASSERT_TRUE(mig.ok()) << mig.status();
  ASSERT_EQ(mig->size(), 2u) << "GPU 1 has no MIG device: it stays whole";
  ASSERT_EQ((*mig)[0].size(), 2u);
  EXPECT_EQ((*mig)[0][0].profile, "3g.40gb");
  EXPECT_EQ((*mig)[0][0].uuid, "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f");
  EXPECT_EQ((*mig)[0][1].profile, "1g.10gb");
  EXPECT_EQ((*mig)[2][0].uuid, "MIG-GPU-11111111-2222-3333-4444-555555555555/7/0");
  // Without MIG (an H100 as it comes): nothing to split.
  auto whole = federation::ParseNvidiaSmiList("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-abc)\n");
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(whole->empty());
  // What cannot be read is named, with its line.
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"  MIG 1g.10gb Device 0: (UUID: MIG-x)\n", "before any GPU"},
           {"GPU 0: A (UUID: GPU-a)\n  MIG 1g.10gb+me Device 0: (UUID: MIG-x)\n", "not a MIG profile"},
           {"GPU 0: A (UUID: GPU-a)\n  MIG 1g.10gb Device 0: (UUID: GPU-x)\n", "MIG-"},
           {"GPU 0: A (UUID: GPU-a)\n  MIG 1g.10gb Device 0:\n", "no (UUID"},
           {"GPU x: A\n", "no GPU index"}}) {
    auto bad = federation::ParseNvidiaSmiList(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(std::string(bad.status().message()).find(why), std::string::npos) << bad.status();
    EXPECT_NE(std::string(bad.status().message()).find("nvidia-smi -L line "), std::string::npos);
  }
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
