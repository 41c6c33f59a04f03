#include <gtest/gtest.h>

#include "gateway/exec/slurm.h"

namespace fedgate::gateway {
namespace {

TEST(SlurmParse, ScontrolNodesWithGresUseAndStates) {
  const std::string text =
      "NodeName=sl-1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 Gres=gpu:a100:4 NodeAddr=127.0.0.1 "
      "NodeHostName=vm OS=Linux 6.1 #1 SMP State=MIXED Partitions=gpu,debug "
      "GresUsed=gpu:a100:2(IDX:0-1) CfgTRES=cpu=16\n"
      "NodeName=sl-2 Gres=gpu:h100:8 NodeAddr=10.0.0.2 State=IDLE+DRAIN Partitions=gpu "
      "GresUsed=gpu:h100:0(IDX:N/A)\n"
      "NodeName=cpu-1 Gres=(null) State=DOWN* Partitions=cpu GresUsed=\n";
  auto nodes = ParseScontrolNodes(text);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 3u);
  const auto& a = (*nodes)[0];
  EXPECT_EQ(a.name, "sl-1");
  EXPECT_EQ(a.addr, "127.0.0.1");
  EXPECT_EQ(a.gres_type, "a100");
  EXPECT_EQ(a.gpus, 4u);
  EXPECT_EQ(a.used, 2u);
  EXPECT_TRUE(a.usable());
  EXPECT_EQ(a.partitions, (std::vector<std::string>{"gpu", "debug"}));
  EXPECT_FALSE((*nodes)[1].usable()) << "drained";
  EXPECT_EQ((*nodes)[1].gpus, 8u);
  EXPECT_EQ((*nodes)[2].gpus, 0u);
  EXPECT_FALSE((*nodes)[2].usable()) << "down, not responding";
  auto bad = ParseScontrolNodes("State=IDLE Gres=gpu:2\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 1: no NodeName="), std::string::npos);
}

TEST(SlurmParse, SallocJobId) {
  EXPECT_EQ(ParseSallocJobId("salloc: Granted job allocation 42\n"), 42u);
  EXPECT_EQ(ParseSallocJobId("salloc: Pending job allocation 9\nsalloc: error: Unable to "
                             "allocate resources: Requested nodes are busy"),
            std::nullopt);
  EXPECT_EQ(ParseSallocJobId("Granted job allocation x"), std::nullopt);
}

}  // namespace
}  // namespace fedgate::gateway
