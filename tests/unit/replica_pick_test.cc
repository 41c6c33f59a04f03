// Which replica a service request goes to: fewest in flight, then this
// gateway's site, then the best measured link, then spread at random.
#include "gateway/serve/replica_pick.h"

#include <gtest/gtest.h>

namespace fedgate::gateway {
namespace {

std::shared_ptr<Replica> R(const std::string& id, const std::string& site, int outstanding = 0,
                           bool ready = true) {
  auto r = std::make_shared<Replica>();
  r->job_id = id;
  r->site = site;
  r->outstanding = outstanding;
  r->ready = ready;
  return r;
}

std::set<std::string> Picks(const std::vector<std::shared_ptr<Replica>>& rs,
                            const std::map<std::string, double>& gbps, const std::string& shun = "") {
  std::set<std::string> out;
  for (int i = 0; i < 200; ++i) out.insert(PickReplica(rs, {}, "bj", gbps, shun)->job_id);
  return out;
}

TEST(ReplicaPick, FewestInFlightThenOwnSiteThenFastestLinkThenRandom) {
  const std::map<std::string, double> gbps = {{"sh", 10}, {"sz", 2.5}};
  // Fewest in flight wins over everything else.
  EXPECT_EQ(Picks({R("a", "bj", 3), R("b", "sz", 1), R("c", "sh", 2)}, gbps), std::set<std::string>{"b"});
  // A tie: this site's replica.
  EXPECT_EQ(Picks({R("a", "sh"), R("b", "bj")}, gbps), std::set<std::string>{"b"});
  // A tie between other sites: the faster link (an unmeasured one is slowest).
  EXPECT_EQ(Picks({R("a", "sz"), R("b", "sh"), R("c", "hz")}, gbps), std::set<std::string>{"b"});
  EXPECT_EQ(Picks({R("a", "hz"), R("b", "sz")}, gbps), std::set<std::string>{"b"});
  // Equals on one site: spread.
  EXPECT_EQ(Picks({R("a", "sh"), R("b", "sh"), R("c", "sz")}, gbps), (std::set<std::string>{"a", "b"}));
  // After a failure on sh, sh's replicas come last even when less busy.
  EXPECT_EQ(Picks({R("a", "sh"), R("b", "sz", 4)}, gbps, "sh"), std::set<std::string>{"b"});
}

TEST(ReplicaPick, NotReadyOrTriedReplicasAreNeverPicked) {
  const std::vector<std::shared_ptr<Replica>> rs = {R("a", "bj", 0, false), R("b", "sh", 5)};
  EXPECT_EQ(PickReplica(rs, {}, "bj", {})->job_id, "b");
  EXPECT_EQ(PickReplica(rs, {"b"}, "bj", {}), nullptr);
  EXPECT_EQ(PickReplica({}, {}, "bj", {}), nullptr);
}

}  // namespace
}  // namespace fedgate::gateway
