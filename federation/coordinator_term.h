// Who coordinates a job, decided by Raft's election rules over the job's
// members (its coordinator, the sites of its virtual cluster, witnesses):
// terms, at most one grant per term and member, a pre-vote round, leader
// stickiness (a member that still hears the coordinator never votes it
// out), single-member configuration changes, and fencing (a member serves
// only its highest accepted term). The one replicated value is the job's
// record and its coordinator; there is no log. Pure functions over a
// member's state: the gateway sends the messages, signs and verifies the
// grants, persists TermState and reads the clock. The rules and the
// invariants they keep are in docs/coordinator_takeover.md.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace fedgate::federation {

// The members of a job, each once, sorted: its coordinator, the sites of its
// virtual cluster and its witnesses.
std::vector<std::string> JobMembers(const std::string& coordinator,
                                    const std::vector<std::string>& vc_sites,
                                    const std::vector<std::string>& witnesses);

// How many members make a majority of `members` (n / 2 + 1).
size_t Majority(size_t members);

// The witnesses a coordinator names at submit so that the job has three
// members: peers not yet members, ranked by a stable hash of (job id, site),
// so that a job's witnesses do not depend on the order peers are listed in
// and the witness load spreads over the federation. Fewer than asked when
// there are not enough peers (the job then has no majority to spare).
std::vector<std::string> ChooseWitnesses(const std::string& job_id,
                                         const std::vector<std::string>& members,
                                         const std::vector<std::string>& peers,
                                         size_t want_members = 3);

// The order in which members try to take over a silent coordinator: the
// sites of the virtual cluster in rank order (the first one first), then
// the witnesses sorted; never the coordinator itself.
std::vector<std::string> SuccessionOrder(const std::vector<std::string>& vc_sites_in_rank_order,
                                         const std::vector<std::string>& members,
                                         const std::string& coordinator);

// How long the member at `position` of SuccessionOrder waits without hearing
// the coordinator before it asks to take over (-1 when it is not in it).
int64_t TakeoverDelayMs(int position, int64_t takeover_after_ms, int64_t stagger_ms);

// How long a site keeps a slice of a job that may be taken over running
// without a renewal: until the last successor could have taken over and
// renewed it (takeover_after + stagger x (successors - 1) + lease). A slice
// whose coordinator is merely cut off from it stops then, unrenewed, since
// no majority voted its coordinator out.
int64_t TakeoverFenceMs(size_t successors, int64_t takeover_after_ms, int64_t stagger_ms,
                        int64_t lease_ms);

// One member's view of one job's coordination. `term`, `coordinator` and
// `voted_for` are persisted before any answer that depends on them is sent;
// `heard_ms` is not (a member that starts again sets it to its start time,
// so a restart alone never votes a coordinator out).
struct TermState {
  uint64_t term = 0;
  std::string coordinator;  // who coordinates at `term`; "" while undecided
  std::string voted_for;    // whom this member granted `term`; "" if nobody
  int64_t heard_ms = 0;     // when it last heard `coordinator` at `term`
};

// How current a member's copy of the job's record is: the term its
// coordinator wrote it at, then its version (Raft's last log term and
// index). A member grants no vote to a candidate whose record is older than
// its own (Raft §5.4.1), so a site that kept an earlier world's record (its
// slice was replaced while it was cut off) cannot lead the job back to it.
struct RecordPosition {
  uint64_t term = 0;
  uint64_t version = 0;
  friend auto operator<=>(const RecordPosition&, const RecordPosition&) = default;
};

struct VoteRequest {
  std::string job_id;
  uint64_t term = 0;  // the term asked for
  std::string candidate;
  bool pre_vote = false;  // a pre-vote asks "would you?" and changes nothing
};

struct VoteAnswer {
  bool granted = false;
  bool hostile = false;      // the candidate is no member of the job
  uint64_t term = 0;         // the member's term after answering
  std::string coordinator;   // whom the member follows, when it knows
  std::string reason;        // why not, when refused
};

// Raft's RequestVote for one member, with pre-vote and leader stickiness. A
// granted real vote moves the member to req.term with no coordinator until
// the winner presents its grants.
// `candidate` and `own`: where the candidate's copy of the record and this
// member's stand.
VoteAnswer AnswerVote(TermState* s, const std::vector<std::string>& members,
                      const VoteRequest& req, int64_t now_ms, int64_t lease_ms,
                      const RecordPosition& candidate = {}, const RecordPosition& own = {});

// A grant as the gateway has verified it (signature of `granter` checked).
struct Grant {
  std::string job_id;
  uint64_t term = 0;
  std::string candidate;
  std::string granter;
};

// Whether `grants` hold a majority of `members` for (job_id, term,
// candidate): each granter a member, counted once; others are ignored.
bool GrantsMajority(const std::vector<std::string>& members, const std::string& job_id,
                    uint64_t term, const std::string& candidate, const std::vector<Grant>& grants);

struct CallCheck {
  bool ok = false;
  bool hostile = false;     // a non-member, or a term the caller was not granted
  uint64_t term = 0;        // the member's term after the check
  std::string coordinator;  // whom the member follows (a refused caller goes there)
  std::string reason;
};

// Fencing: a call from `from` at `term` (a renewal, commit, status, cancel)
// is served only at the member's highest accepted term and only from that
// term's coordinator. A higher term, or an undecided current one, is
// accepted with a majority of grants for it and makes `from` the
// coordinator; an older term is refused and names the coordinator.
// `newer_members`: the members in a newer record the call brings, if any.
// When they are one change away from `members` (a step of a change this
// member has not heard of yet), the caller may be one of them and its
// grants a majority of them: a successor elected by the members after a
// step still fences a member that missed the step's copy.
CallCheck AcceptCoordinatorCall(TermState* s, const std::vector<std::string>& members,
                                const std::string& job_id, uint64_t term, const std::string& from,
                                const std::vector<Grant>& verified_grants, int64_t now_ms,
                                const std::vector<std::string>& newer_members = {});

// Raft's single-server change: `next` adds or removes at most one member of
// `current`, and keeps at least one. The coordinator applies a change once a
// majority of `current` has accepted it, and starts the next change only
// then.
absl::Status CheckMembershipChange(const std::vector<std::string>& current,
                                   const std::vector<std::string>& next);

// The members before the single-server change that made `after`: without
// `site` when it was added, with it when it was removed.
std::vector<std::string> MembersBeforeChange(const std::vector<std::string>& after,
                                             const std::string& site, bool removed);

// Whether a change is accepted: a majority of the members before it hold a
// record at least `since_version` (the first version that has the change).
// `acked` maps a member to the version of the copy it last acknowledged;
// the coordinator, which wrote the change, counts as holding it.
bool ChangeAccepted(const std::vector<std::string>& before, const std::string& coordinator,
                    const std::map<std::string, uint64_t>& acked, uint64_t since_version);

// A site keeps its slice running while it has confirmed a majority of the
// job's members within `fence_ms`; past that it stops the ranks.
bool SliceFenced(int64_t now_ms, int64_t majority_confirmed_ms, int64_t fence_ms);

// The earliest time a coordinator may call a slice lost (and replace it)
// whose site it last heard at `last_heard_ms`: by then the site's own fence
// has stopped the ranks, whatever the clocks' skew.
int64_t SliceLostAfterMs(int64_t last_heard_ms, int64_t fence_ms, int64_t stop_grace_ms,
                         int64_t clock_skew_ms);

}  // namespace fedgate::federation
