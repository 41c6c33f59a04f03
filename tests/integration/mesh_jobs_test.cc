// Jobs beyond direct peers, in a partial mesh a–b–c (no a–c link): site-c
// accepts jobs from the whole federation (accept_jobs_from: federation), so
// a coordinator at site-a reserves on it at the endpoint of c's signed ad,
// under the same ownership rules as a peer. site-a accepts jobs only from
// its peers: a coordinator at site-c leaves it out, and says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/support/jobs_fixture.h"

namespace fedgate::testing {
namespace {

class MeshJobsTest : public JobsTest {};

std::set<std::string> SitesOf(const v1::Job& j) {
  std::set<std::string> out;
  for (const auto& s : j.run().sites()) out.insert(s.site());
  return out;
}

TEST_F(MeshJobsTest, AJobRunsOnTwoSitesThatAreNotPeersOfEachOther) {
  AddSite("site-a", {"site-b"}, 2);
  AddSite("site-b", {"site-a", "site-c"}, 1);
  AddSite("site-c", {"site-b"}, 4, "A100-80GB", "accept_jobs_from: federation\n");
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c"}); }, 20000))
      << fed_.log("site-a");
  // 6 GPUs: only site-a (2) and site-c (4) together, without a link a–c.
  const std::string marks = fed_.shared_dir() + "/ranks";
  const std::string id = Submit(
      "site-a", "name: mesh\ngpus: 6\ncommand: [sh, -c, 'echo $RANK $MASTER_ADDR:$MASTER_PORT >> " +
                    marks + "']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 30000))
      << Get("site-a", id).reason() << fed_.log("site-a") << fed_.log("site-c");
  EXPECT_EQ(SitesOf(Get("site-a", id)), (std::set<std::string>{"site-a", "site-c"}));
  const std::string text = ReadText(marks);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 6) << text;
  // site-c was reached as a non-peer, so its participant saw site-a's calls.
  EXPECT_GE(Metric(fed_.ops_port("site-c"), "fedgate_peer_rpc_handled_total{method=\"Commit\"}"), 1);

  // 7 GPUs would need site-a too, which refuses site-c's reservations.
  const std::string big = Submit("site-c", "name: big\ngpus: 7\ncommand: [true]\n");
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string r = Get("site-c", big).reason();
        return r.find("waiting for capacity") != std::string::npos &&
               r.find("left out: site-a") != std::string::npos;
      },
      10000))
      << Get("site-c", big).reason();
  EXPECT_EQ(Get("site-c", big).state(), v1::Job::PENDING);
  (void)Alice("site-c", {"jobs", "cancel", big});
}

}  // namespace
}  // namespace fedgate::testing
