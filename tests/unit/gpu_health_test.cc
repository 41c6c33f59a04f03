#include "federation/gpu_health.h"

#include <gtest/gtest.h>

namespace fedgate::federation {
namespace {

const std::map<std::string, uint32_t> kNodes{{"bj-1", 4}, {"bj-2", 2}};

TEST(HealthOutput, ParsesOkFailReasonsCommentsAndBlankLines) {
  auto r = ParseHealthOutput("# from gpu-health\n\nbj-1 0 ok\nbj-1 3 fail  Xid 79: fell off the bus\n"
                             "  bj-2\t1\tok  \n",
                             kNodes);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[1].node, "bj-1");
  EXPECT_EQ((*r)[1].gpu, 3u);
  EXPECT_FALSE((*r)[1].ok);
  EXPECT_EQ((*r)[1].reason, "Xid 79: fell off the bus");
  EXPECT_TRUE((*r)[2].ok);
  EXPECT_EQ((*r)[2].gpu, 1u);
}

TEST(HealthOutput, ABadLineRefusesTheWholeOutputNamingTheLine) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"bj-1 0 ok\nbj-9 0 fail\n", "line 2: no node \"bj-9\""},
      {"bj-2 2 fail\n", "line 1: node bj-2 has 2 GPU(s), no index 2"},
      {"bj-1 x ok\n", "line 1: GPU index \"x\" is not a number"},
      {"bj-1 -1 ok\n", "line 1: GPU index \"-1\""},
      {"bj-1 0 broken\n", "line 1: want ok or fail, got \"broken\""},
      {"\n\nbj-1 0\n", "line 3: want"},
      {"bj-1 99999999999999999999 ok\n", "is not a number"},
  };
  for (const auto& c : cases) {
    auto r = ParseHealthOutput(c.text, kNodes);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(c.says), std::string::npos)
        << r.status().message();
  }
}

TEST(GpuHealthState, UnlistedGpusKeepTheirStateAndChangesAreReportedOnce) {
  GpuHealth h;
  auto c = h.Apply({{"bj-1", 1, false, "ecc"}, {"bj-1", 2, true, ""}});
  ASSERT_EQ(c.size(), 1u) << "a GPU that was healthy and says ok is no change";
  EXPECT_EQ(c[0].gpu, 1u);
  EXPECT_FALSE(c[0].ok);
  EXPECT_TRUE(h.Apply({{"bj-1", 1, false, "ecc again"}}).empty()) << "still failing";
  EXPECT_EQ(h.failed().at({"bj-1", 1}), "ecc again");
  EXPECT_TRUE(h.Apply({{"bj-2", 0, true, ""}}).empty());
  EXPECT_TRUE(h.Failed("bj-1", 1)) << "a round that does not list it leaves it failed";
  EXPECT_EQ(h.FailedByNode(), (std::map<std::string, std::set<uint32_t>>{{"bj-1", {1}}}));
  c = h.Apply({{"bj-1", 1, true, ""}});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].ok);
  EXPECT_TRUE(h.FailedByNode().empty());
}

}  // namespace
}  // namespace fedgate::federation
