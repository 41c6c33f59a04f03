// The election rules of federation/coordinator_term.h run by simulated
// members over a simulated network that drops, delays and reorders messages
// under a seed, with members killed, restarted and cut off. What must hold
// whatever the schedule: one winner per term; a member grants one candidate
// per term; a member's accepted term never goes back; a call is accepted
// only from its term's winner; honest members are never taken for hostile;
// a winner holds every record a majority stored before it won (the
// coordinator writes the job's record with each call: Raft's leader
// completeness, kept by the up-to-date check on votes).
// What must happen: a dead coordinator is replaced in time by the first
// successor that can reach a majority, and a coordinator heard by a
// majority is never voted out. With spare sites, the coordinator also
// replaces members one step at a time (CheckMembershipChange,
// ChangeAccepted), as a replacement in place does: every member votes and
// checks grants by the members in its own copy of the record.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "federation/coordinator_term.h"

namespace fedgate::federation {
namespace {

constexpr int64_t kLease = 3000, kBeat = 1000, kTakeoverAfter = 9000, kStagger = 1500;
constexpr int64_t kElectionTimeout = 2000, kTick = 10;
const std::string kJob = "j-1";

// A change of members under way, as the record carries it (v1::MemberChange).
struct Change {
  std::string site;
  bool remove = false;
  uint64_t since = 0;
  std::string then_remove;
};

struct Msg {
  enum Kind { kPreVote, kVote, kPreVoteAnswer, kVoteAnswer, kCall, kCallAnswer };
  Kind kind = kCall;
  int from = 0, to = 0;
  uint64_t term = 0;
  bool ok = false;
  std::string coordinator;
  std::vector<Grant> grants;
  RecordPosition record;  // a vote's candidate's, the record a call carries, a call's ack
  std::vector<std::string> config;  // the members in the record a call carries
  Change change;
};

struct Node {
  std::string name;
  TermState st;
  bool alive = true;
  std::map<int, int64_t> accepted;  // as coordinator: member -> its last accepted call
  int64_t confirmed_ms = -1;        // as coordinator: a majority accepted within the lease
  int64_t next_beat = 0;
  enum { kIdle, kPre, kVoting } phase = kIdle;
  uint64_t cand_term = 0;
  int64_t cand_started = 0, next_try = 0;
  std::set<int> pre;
  std::vector<Grant> grants;  // while voting; then those of the term it coordinates
  std::string last_coordinator;
  RecordPosition record;  // its copy of the job's record (persisted)
  std::vector<std::string> config;  // the members in that copy
  Change change;                    // and the change under way in it
  std::map<std::string, uint64_t> acked;  // as coordinator: the copy each member holds
};

class Sim {
 public:
  // n members s0..s{n-1}; s0 coordinates term 1 and runs no slice; the
  // virtual cluster is s1..s{n-1} in rank order.
  // `spares` more sites are no members at first; with `changes` > 0 the
  // coordinator replaces that many members by spares, one step at a time
  // (or, with `at_once`, in one step: what the rules forbid).
  // With `every_beat`, a new replacement starts as soon as the last one is
  // accepted (members fall more than one change behind).
  Sim(int n, uint64_t seed, double drop, int64_t max_delay, int spares = 0, int changes = 0,
      bool at_once = false, bool every_beat = false)
      : rng_(seed), drop_(drop), max_delay_(max_delay), changes_left_(changes), at_once_(at_once),
        every_beat_(every_beat) {
    std::vector<std::string> members;
    for (int i = 0; i < n; ++i) members.push_back("s" + std::to_string(i));
    for (int i = 0; i < n + spares; ++i) {
      Node node;
      node.name = "s" + std::to_string(i);
      if (i < n) {
        node.st.term = 1;
        node.st.coordinator = "s0";
        node.last_coordinator = "s0";
        node.record = {1, 1};  // stored by every member at commit
        node.config = members;
        ever_.insert(node.name);
      }
      nodes_.push_back(node);
      if (i < n) nodes_[0].grants.push_back(Grant{kJob, 1, "s0", node.name});
    }
    won_[1] = "s0";
  }

  void Kill(int i) { nodes_[i].alive = false; }
  // A restart keeps what was persisted (term, coordinator, vote) and hears
  // its coordinator as of now.
  void Restart(int i) {
    Node& n = nodes_[i];
    n.alive = true;
    n.st.heard_ms = now_;
    n.phase = Node::kIdle;
    n.accepted.clear();
    n.confirmed_ms = -1;
    n.next_try = now_;
  }
  void Cut(int a, int b) { cut_.insert({std::min(a, b), std::max(a, b)}); }
  void HealAll() { cut_.clear(); }
  void SetDrop(double d) { drop_ = d; }

  void RunUntil(int64_t t) {
    while (now_ < t) {
      now_ += kTick;
      while (!queue_.empty() && queue_.begin()->first.first <= now_) {
        Msg m = queue_.begin()->second;
        queue_.erase(queue_.begin());
        if (nodes_[m.to].alive) Receive(m);
      }
      for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
        if (nodes_[i].alive) Tick(i);
      }
    }
  }

  // The alive member coordinating the highest term with a majority behind
  // it within the lease ("" if none).
  std::string Coordinator() const {
    std::string who;
    uint64_t best = 0;
    for (const Node& n : nodes_) {
      if (n.alive && n.st.coordinator == n.name && n.confirmed_ms >= now_ - kLease && n.st.term >= best) {
        best = n.st.term;
        who = n.name;
      }
    }
    return who;
  }

  int64_t now() const { return now_; }
  const Node& node(int i) const { return nodes_[i]; }
  const std::map<uint64_t, std::string>& won() const { return won_; }
  const std::map<uint64_t, int64_t>& won_at() const { return won_at_; }
  const std::vector<std::string>& violations() const { return violations_; }
  int steps_done() const { return steps_done_; }

 private:
  void Violation(const std::string& what) {
    violations_.push_back("t=" + std::to_string(now_) + " " + what);
  }

  void Send(int from, int to, Msg m) {
    if (cut_.count({std::min(from, to), std::max(from, to)}) > 0) return;
    if (std::uniform_real_distribution<double>(0, 1)(rng_) < drop_) return;
    m.from = from;
    m.to = to;
    const int64_t at = now_ + std::uniform_int_distribution<int64_t>(5, max_delay_)(rng_);
    queue_.emplace(std::pair{at, seq_++}, m);
  }
  int Index(const std::string& name) const { return std::stoi(name.substr(1)); }
  // To every other member in the sender's copy of the record.
  void ToAll(int from, const Msg& m) {
    for (const auto& name : nodes_[from].config) {
      if (Index(name) != from) Send(from, Index(name), m);
    }
  }
  bool IsMember(const Node& n, const std::string& who) const {
    return std::find(n.config.begin(), n.config.end(), who) != n.config.end();
  }
  int Position(const Node& n) const {
    if (!IsMember(n, n.name)) return -1;  // not (or no longer) a member
    const auto order = SuccessionOrder(n.config, n.config, n.last_coordinator);
    for (size_t i = 0; i < order.size(); ++i) {
      if (order[i] == n.name) return static_cast<int>(i);
    }
    return -1;
  }
  void Follow(Node& n) {
    if (!n.st.coordinator.empty()) n.last_coordinator = n.st.coordinator;
    if (n.phase != Node::kIdle && n.cand_term <= n.st.term && n.st.coordinator != n.name) {
      n.phase = Node::kIdle;
    }
  }

  void RecordVote(int at, uint64_t term, const std::string& candidate) {
    auto [it, fresh] = votes_.insert({{at, term}, candidate});
    if (!fresh && it->second != candidate) {
      Violation(nodes_[at].name + " granted term " + std::to_string(term) + " to " + it->second +
                " and " + candidate);
    }
  }

  void Receive(const Msg& m) {
    Node& n = nodes_[m.to];
    const std::string& from = nodes_[m.from].name;
    switch (m.kind) {
      case Msg::kPreVote:
      case Msg::kVote: {
        const bool pre = m.kind == Msg::kPreVote;
        const VoteAnswer a =
            AnswerVote(&n.st, n.config, {kJob, m.term, from, pre}, now_, kLease, m.record, n.record);
        // A member removed while cut off asks with its old copy: stale, not hostile.
        if (a.hostile && !ever_.contains(from)) {
          Violation(n.name + " took " + from + " for hostile: " + a.reason);
        }
        if (a.granted && !pre) RecordVote(m.to, m.term, from);
        Follow(n);
        Msg r;
        r.kind = pre ? Msg::kPreVoteAnswer : Msg::kVoteAnswer;
        r.term = m.term;
        r.ok = a.granted;
        Send(m.to, m.from, r);
        return;
      }
      case Msg::kPreVoteAnswer:
        if (n.phase == Node::kPre && m.term == n.cand_term && m.ok) {
          n.pre.insert(m.from);
          if (n.pre.size() + 1 >= Majority(n.config.size())) StartVote(m.to);
        }
        return;
      case Msg::kVoteAnswer:
        if (n.phase == Node::kVoting && m.term == n.cand_term && m.ok) {
          n.grants.push_back(Grant{kJob, m.term, n.name, from});
          if (GrantsMajority(n.config, kJob, m.term, n.name, n.grants)) Win(m.to);
        }
        return;
      case Msg::kCall: {
        CallCheck c;
        if (n.config.empty()) {
          // A site that keeps no record yet (a spare that joins) takes the
          // caller's: a participant takes the copy of the commit that made
          // its hold (ownership alone decides).
          n.st = {m.term, from, "", now_};
          c = {true, false, m.term, from, ""};
        } else {
          c = AcceptCoordinatorCall(&n.st, n.config, kJob, m.term, from, m.grants, now_,
                                    n.record < m.record ? m.config : std::vector<std::string>{});
        }
        if (c.hostile) Violation(n.name + " took " + from + " for hostile: " + c.reason);
        if (c.ok) {
          Store(m.to, m.record, m.config, m.change);
          auto& last = accepted_term_[m.to];
          if (m.term < last) {
            Violation(n.name + " accepted term " + std::to_string(m.term) + " after " + std::to_string(last));
          }
          last = m.term;
          const auto w = won_.find(m.term);
          if (w == won_.end() || w->second != from) {
            Violation(n.name + " accepted " + from + " at term " + std::to_string(m.term) +
                      " that it did not win");
          }
        }
        Follow(n);
        Msg r;
        r.kind = Msg::kCallAnswer;
        r.term = c.term;
        r.ok = c.ok;
        r.coordinator = c.coordinator;
        r.record = n.record;  // the copy it holds: the coordinator's ack
        Send(m.to, m.from, r);
        return;
      }
      case Msg::kCallAnswer:
        if (n.st.coordinator != n.name) return;
        if (m.ok && m.term == n.st.term) {
          n.accepted[m.from] = now_;
          n.acked[from] = m.record.version;
        } else if (!m.ok && m.term > n.st.term) {
          n.st.coordinator.clear();  // the job moved: stop coordinating it
          n.last_coordinator = m.coordinator.empty() ? n.last_coordinator : m.coordinator;
        }
        return;
    }
  }

  // Member `at` keeps `r` when it is newer; a record a majority keeps is
  // committed (no later winner may lack it).
  void Store(int at, const RecordPosition& r, const std::vector<std::string>& config,
             const Change& change) {
    Node& n = nodes_[at];
    if (n.record < r) {
      n.record = r;
      n.config = config;
      n.change = change;
    }
    // Committed: a majority of the members in that record hold it.
    size_t have = 0;
    for (const auto& name : config) have += r <= nodes_[Index(name)].record ? 1 : 0;
    if (have >= Majority(config.size()) && committed_ < r) committed_ = r;
  }

  // The coordinator's change of members, one step per beat that heard a
  // majority: the next step once a majority of the members before the last
  // one holds it; a new replacement (a member for a spare) now and then.
  void ChangeMembers(int i) {
    Node& n = nodes_[i];
    const uint64_t next_version = n.record.version + 1;  // written with this beat
    if (!n.change.site.empty()) {
      const auto before = MembersBeforeChange(n.config, n.change.site, n.change.remove);
      if (!ChangeAccepted(before, n.name, n.acked, n.change.since)) return;
      ++steps_done_;
      // A successor that was to leave stays: a coordinator never removes itself.
      if (n.change.then_remove.empty() || n.change.then_remove == n.name) {
        n.change = {};
        return;
      }
      const std::string gone = n.change.then_remove;
      std::erase(n.config, gone);
      n.change = {gone, true, next_version, ""};
      return;
    }
    if (changes_left_ == 0 || (!every_beat_ && rng_() % 4 != 0)) return;
    std::vector<std::string> spares, replaceable;
    for (const Node& m : nodes_) {
      if (!IsMember(n, m.name) && !ever_.contains(m.name)) spares.push_back(m.name);
      if (IsMember(n, m.name) && m.name != n.name) replaceable.push_back(m.name);
    }
    if (spares.empty() || replaceable.empty()) return;
    --changes_left_;
    const std::string in = spares[rng_() % spares.size()];
    const std::string out = replaceable[rng_() % replaceable.size()];
    ever_.insert(in);
    n.config.push_back(in);
    std::sort(n.config.begin(), n.config.end());
    if (at_once_) {
      std::erase(n.config, out);  // both at once: majorities may not overlap
      return;
    }
    n.change = {in, false, next_version, out};
  }

  void Tick(int i) {
    Node& n = nodes_[i];
    if (n.st.coordinator == n.name) {
      size_t heard = 1;
      for (const auto& [m, at] : n.accepted) heard += at >= now_ - kLease && IsMember(n, nodes_[m].name);
      if (heard >= Majority(n.config.size())) {
        n.confirmed_ms = now_;
        n.st.heard_ms = now_;
      }
      if (now_ >= n.next_beat) {
        // Without a majority the coordinator changes nothing about the job.
        const std::vector<std::string> was = n.config;
        if (n.confirmed_ms == now_) ChangeMembers(i);
        // Each call writes the record anew (a renewal's copy, a new world).
        n.record.version += 1;
        Store(i, n.record, n.config, n.change);
        Msg call;
        call.kind = Msg::kCall;
        call.term = n.st.term;
        call.grants = n.grants;
        call.record = n.record;
        call.config = n.config;
        call.change = n.change;
        ToAll(i, call);
        // A removed member is told too (the gateway aborts its slice).
        for (const auto& name : was) {
          if (!IsMember(n, name)) Send(i, Index(name), call);
        }
        n.next_beat = now_ + kBeat;
      }
      return;
    }
    const int pos = Position(n);
    if (pos < 0) return;
    if (n.phase != Node::kIdle && now_ - n.cand_started > kElectionTimeout) {
      n.phase = Node::kIdle;
      n.next_try = now_ + kStagger * (pos + 1);
    }
    if (n.phase == Node::kIdle && now_ >= n.next_try &&
        now_ - n.st.heard_ms >= TakeoverDelayMs(pos, kTakeoverAfter, kStagger)) {
      StartPreVote(i);
    }
  }

  void StartPreVote(int i) {
    Node& n = nodes_[i];
    n.cand_term = n.st.term + 1;
    n.cand_started = now_;
    n.pre.clear();
    if (!AnswerVote(&n.st, n.config, {kJob, n.cand_term, n.name, true}, now_, kLease, n.record,
                    n.record)
             .granted) {
      return;
    }
    n.phase = Node::kPre;
    Msg m;
    m.kind = Msg::kPreVote;
    m.term = n.cand_term;
    m.record = n.record;
    ToAll(i, m);
  }

  void StartVote(int i) {
    Node& n = nodes_[i];
    if (!AnswerVote(&n.st, n.config, {kJob, n.cand_term, n.name, false}, now_, kLease, n.record,
                    n.record)
             .granted) {
      n.phase = Node::kIdle;
      return;
    }
    RecordVote(i, n.cand_term, n.name);
    n.phase = Node::kVoting;
    n.cand_started = now_;
    n.grants = {Grant{kJob, n.cand_term, n.name, n.name}};
    Msg m;
    m.kind = Msg::kVote;
    m.term = n.cand_term;
    m.record = n.record;
    ToAll(i, m);
  }

  void Win(int i) {
    Node& n = nodes_[i];
    auto [it, fresh] = won_.insert({n.cand_term, n.name});
    if (!fresh && it->second != n.name) {
      Violation("term " + std::to_string(n.cand_term) + " won by " + it->second + " and " + n.name);
    }
    won_at_[n.cand_term] = now_;
    if (n.record < committed_) {
      Violation(n.name + " won term " + std::to_string(n.cand_term) + " without the record a " +
                "majority stored (term " + std::to_string(committed_.term) + ", version " +
                std::to_string(committed_.version) + "; it has version " +
                std::to_string(n.record.version) + ")");
    }
    // The winner writes the record at its term (JobStore::Adopt).
    n.record = {n.cand_term, n.record.version + 1};
    Store(i, n.record, n.config, n.change);
    const CallCheck self = AcceptCoordinatorCall(&n.st, n.config, kJob, n.cand_term, n.name, n.grants, now_);
    if (!self.ok) Violation(n.name + " won but refused itself: " + self.reason);
    n.phase = Node::kIdle;
    n.last_coordinator = n.name;
    n.accepted.clear();
    n.acked.clear();
    n.confirmed_ms = -1;
    n.next_beat = now_;
  }

  std::mt19937_64 rng_;
  double drop_;
  int64_t max_delay_;
  int64_t now_ = 0;
  uint64_t seq_ = 0;
  int changes_left_ = 0;
  bool at_once_ = false, every_beat_ = false;
  int steps_done_ = 0;
  std::vector<Node> nodes_;
  std::set<std::string> ever_;  // every site that ever was a member
  std::set<std::pair<int, int>> cut_;
  std::map<std::pair<int64_t, uint64_t>, Msg> queue_;  // by (delivery time, order sent)
  std::map<uint64_t, std::string> won_;
  std::map<uint64_t, int64_t> won_at_;
  std::map<std::pair<int, uint64_t>, std::string> votes_;
  std::map<int, uint64_t> accepted_term_;
  RecordPosition committed_;
  std::vector<std::string> violations_;
};

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

TEST(CoordinatorElectionSim, AHeardCoordinatorIsNeverVotedOut) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    for (int n : {3, 5}) {
      Sim sim(n, seed, 0.0, 200);
      sim.RunUntil(120'000);
      EXPECT_EQ(sim.won().size(), 1u) << "seed " << seed << " n " << n;
      EXPECT_EQ(sim.Coordinator(), "s0");
      EXPECT_TRUE(sim.violations().empty()) << Join(sim.violations());
    }
  }
}

TEST(CoordinatorElectionSim, ADeadCoordinatorIsReplacedByTheFirstSiteInTime) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Sim sim(3, seed, 0.0, 100);
    sim.RunUntil(5'000);
    sim.Kill(0);
    sim.RunUntil(5'000 + kTakeoverAfter + 2'000);
    EXPECT_EQ(sim.Coordinator(), "s1") << "seed " << seed;
    ASSERT_EQ(sim.won().count(2), 1u) << "seed " << seed;
    EXPECT_LE(sim.won_at().at(2) - 5'000, kTakeoverAfter + 2'000);
    EXPECT_TRUE(sim.violations().empty()) << Join(sim.violations());
  }
}

TEST(CoordinatorElectionSim, ASuccessorCutOffDoesNotStallTheJob) {
  Sim sim(5, 7, 0.0, 100);
  sim.RunUntil(5'000);
  sim.Kill(0);
  for (int other : {0, 2, 3, 4}) sim.Cut(1, other);
  sim.RunUntil(5'000 + kTakeoverAfter + kStagger + 2'000);
  EXPECT_EQ(sim.Coordinator(), "s2") << "the next in rank order, one stagger later";
  EXPECT_EQ(sim.won().size(), 2u);
  EXPECT_TRUE(sim.violations().empty()) << Join(sim.violations());
}

TEST(CoordinatorElectionSim, AMemberCutFromTheCoordinatorAloneCannotTakeOver) {
  Sim sim(3, 3, 0.0, 100);
  sim.Cut(0, 1);  // s2 still hears s0 and refuses s1
  sim.RunUntil(60'000);
  EXPECT_EQ(sim.won().size(), 1u);
  EXPECT_EQ(sim.Coordinator(), "s0");
  EXPECT_EQ(sim.node(1).st.term, 1u) << "pre-votes move no term";
  EXPECT_TRUE(sim.violations().empty()) << Join(sim.violations());
}

TEST(CoordinatorElectionSim, ACutOffCoordinatorLearnsTheJobMovedWhenThePartitionHeals) {
  Sim sim(3, 5, 0.0, 100);
  sim.RunUntil(5'000);
  sim.Cut(0, 1);
  sim.Cut(0, 2);
  sim.RunUntil(5'000 + kTakeoverAfter + 2'000);
  EXPECT_EQ(sim.Coordinator(), "s1");
  EXPECT_EQ(sim.node(0).st.coordinator, "s0") << "it does not know yet";
  sim.HealAll();
  sim.RunUntil(sim.now() + 5'000);
  EXPECT_EQ(sim.node(0).st.coordinator, "s1");
  EXPECT_EQ(sim.node(0).st.term, 2u);
  EXPECT_EQ(sim.Coordinator(), "s1");
  EXPECT_TRUE(sim.violations().empty()) << Join(sim.violations());
}

TEST(CoordinatorElectionSim, WithoutAMajorityNobodyTakesOverUntilTheCutHeals) {
  Sim sim(3, 11, 0.0, 100);
  sim.RunUntil(5'000);
  sim.Kill(0);
  sim.Cut(1, 2);
  sim.RunUntil(60'000);
  EXPECT_EQ(sim.won().size(), 1u) << "neither s1 nor s2 has a majority";
  EXPECT_EQ(sim.Coordinator(), "");
  sim.HealAll();
  sim.RunUntil(sim.now() + kTakeoverAfter + 2 * kStagger + 4'000);
  const std::string now = sim.Coordinator();
  EXPECT_TRUE(now == "s1" || now == "s2") << now;
  const size_t terms = sim.won().size();
  sim.RunUntil(sim.now() + 60'000);
  EXPECT_EQ(sim.Coordinator(), now) << "and it stays";
  EXPECT_EQ(sim.won().size(), terms);
  EXPECT_TRUE(sim.violations().empty()) << Join(sim.violations());
}

// Twelve random faults (kill, restart, cut, heal) among `sites` sites, each
// followed by 2-10 s of running; then the network heals, stops dropping,
// and every site comes back.
void RunFaults(Sim* sim, std::mt19937_64* faults, int sites) {
  auto pick = [&] { return static_cast<int>((*faults)() % sites); };
  for (int step = 0; step < 12; ++step) {
    switch ((*faults)() % 4) {
      case 0: sim->Kill(pick()); break;
      case 1: sim->Restart(pick()); break;
      case 2: sim->Cut(pick(), pick()); break;
      case 3: sim->HealAll(); break;
    }
    sim->RunUntil(sim->now() + 2'000 + static_cast<int64_t>((*faults)() % 8'000));
  }
  sim->HealAll();
  sim->SetDrop(0.0);
  for (int i = 0; i < sites; ++i) {
    if (!sim->node(i).alive) sim->Restart(i);
  }
}

// Random faults under a lossy, reordering network; then the network heals
// and every site comes back: the rules held throughout, and one member
// coordinates again.
TEST(CoordinatorElectionSim, RandomFaultsNeverBreakTheRules) {
  int takeovers = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    std::mt19937_64 faults(seed * 7919);
    const int n = seed % 2 ? 5 : 3;
    Sim sim(n, seed, 0.05 + 0.05 * static_cast<double>(seed % 5), 50 + 150 * (seed % 4));
    RunFaults(&sim, &faults, n);
    sim.RunUntil(sim.now() + kTakeoverAfter + n * kStagger + 10'000);
    EXPECT_NE(sim.Coordinator(), "") << "seed " << seed;
    EXPECT_TRUE(sim.violations().empty()) << "seed " << seed << "\n" << Join(sim.violations());
    takeovers += static_cast<int>(sim.won().size()) - 1;
  }
  std::printf("[ measure ] 150 seeded schedules: %d takeovers, no rule broken\n", takeovers);
  EXPECT_GT(takeovers, 30) << "the faults must exercise takeovers";
}

// The same faults while the coordinator replaces members by spare sites,
// one step at a time (every third schedule as fast as the steps are
// accepted): the rules hold, and the steps complete. With both steps of a
// replacement at once, or with the steps not waiting for a majority, these
// schedules break the rules (docs/coordinator_takeover.md).
TEST(CoordinatorElectionSim, MembersChangingOneAtATimeUnderFaultsNeverBreakTheRules) {
  int steps = 0, takeovers = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    std::mt19937_64 faults(seed * 104729);
    const int n = seed % 2 ? 5 : 3, spares = 3;
    const bool fast = seed % 3 == 0;
    Sim sim(n, seed, 0.05 + 0.05 * static_cast<double>(seed % 5), 50 + 150 * (seed % 4), spares,
            /*changes=*/fast ? 20 : 3, /*at_once=*/false, /*every_beat=*/fast);
    RunFaults(&sim, &faults, n + spares);
    sim.RunUntil(sim.now() + kTakeoverAfter + (n + 1) * kStagger + 20'000);
    EXPECT_NE(sim.Coordinator(), "") << "seed " << seed;
    EXPECT_TRUE(sim.violations().empty()) << "seed " << seed << "\n" << Join(sim.violations());
    steps += sim.steps_done();
    takeovers += static_cast<int>(sim.won().size()) - 1;
  }
  std::printf("[ measure ] 150 seeded schedules with changes of members: %d steps accepted, "
              "%d takeovers\n",
              steps, takeovers);
  EXPECT_GT(steps, 150) << "the schedules must exercise changes of members";
  EXPECT_GT(takeovers, 30);
}

}  // namespace
}  // namespace fedgate::federation
