#include "federation/coordinator_term.h"

#include <algorithm>
#include <set>

#include "base/str_cat.h"

namespace fedgate::federation {
namespace {

bool IsMember(const std::vector<std::string>& members, const std::string& site) {
  return std::find(members.begin(), members.end(), site) != members.end();
}

// FNV-1a: the same on every gateway and every build (std::hash is not).
uint64_t StableHash(const std::string& job_id, const std::string& site) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](unsigned char c) {
    h ^= c;
    h *= 1099511628211ULL;
  };
  for (unsigned char c : job_id) mix(c);
  mix(0);
  for (unsigned char c : site) mix(c);
  return h;
}

std::string Who(const std::string& coordinator) {
  return coordinator.empty() ? "undecided" : "coordinated by " + coordinator;
}

}  // namespace

std::vector<std::string> JobMembers(const std::string& coordinator,
                                    const std::vector<std::string>& vc_sites,
                                    const std::vector<std::string>& witnesses) {
  std::set<std::string> all(vc_sites.begin(), vc_sites.end());
  all.insert(witnesses.begin(), witnesses.end());
  if (!coordinator.empty()) all.insert(coordinator);
  return {all.begin(), all.end()};
}

size_t Majority(size_t members) { return members / 2 + 1; }

std::vector<std::string> ChooseWitnesses(const std::string& job_id,
                                         const std::vector<std::string>& members,
                                         const std::vector<std::string>& peers,
                                         size_t want_members) {
  std::vector<std::pair<uint64_t, std::string>> ranked;
  for (const auto& p : std::set<std::string>(peers.begin(), peers.end())) {
    if (!IsMember(members, p)) ranked.emplace_back(StableHash(job_id, p), p);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < ranked.size() && members.size() + out.size() < want_members; ++i) {
    out.push_back(ranked[i].second);
  }
  return out;
}

std::vector<std::string> SuccessionOrder(const std::vector<std::string>& vc_sites_in_rank_order,
                                         const std::vector<std::string>& members,
                                         const std::string& coordinator) {
  std::vector<std::string> out;
  auto add = [&](const std::string& s) {
    if (s != coordinator && IsMember(members, s) && !IsMember(out, s)) out.push_back(s);
  };
  for (const auto& s : vc_sites_in_rank_order) add(s);
  std::vector<std::string> rest(members);
  std::sort(rest.begin(), rest.end());
  for (const auto& s : rest) add(s);
  return out;
}

int64_t TakeoverDelayMs(int position, int64_t takeover_after_ms, int64_t stagger_ms) {
  if (position < 0) return -1;
  return takeover_after_ms + position * stagger_ms;
}

int64_t TakeoverFenceMs(size_t successors, int64_t takeover_after_ms, int64_t stagger_ms,
                        int64_t lease_ms) {
  if (successors == 0) return lease_ms;
  return takeover_after_ms + static_cast<int64_t>(successors - 1) * stagger_ms + lease_ms;
}

VoteAnswer AnswerVote(TermState* s, const std::vector<std::string>& members,
                      const VoteRequest& req, int64_t now_ms, int64_t lease_ms,
                      const RecordPosition& candidate, const RecordPosition& own) {
  VoteAnswer a;
  auto refuse = [&](std::string why) {
    a.term = s->term;
    a.coordinator = s->coordinator;
    a.reason = std::move(why);
    return a;
  };
  if (!IsMember(members, req.candidate)) {
    a.hostile = true;
    return refuse(StrCat(req.candidate, " is no member of job ", req.job_id));
  }
  // A real vote may repeat a grant, or take a term nobody has won yet.
  const bool ahead = req.term > s->term;
  const bool open_term = !req.pre_vote && req.term == s->term && s->coordinator.empty() &&
                         (s->voted_for.empty() || s->voted_for == req.candidate);
  if (!ahead && !open_term) {
    return refuse(StrCat("term ", req.term, " is not ahead: at term ", s->term, " ",
                         s->coordinator.empty() && !s->voted_for.empty()
                             ? "granted to " + s->voted_for
                             : Who(s->coordinator)));
  }
  // Up to date: a candidate behind this member's record would lead the job
  // back to an earlier world (this member has seen a later one).
  if (candidate < own) {
    return refuse(StrCat("the candidate's record (term ", candidate.term, ", version ",
                         candidate.version, ") is older than this member's (term ", own.term,
                         ", version ", own.version, ")"));
  }
  // Stickiness: a coordinator heard within the lease is not voted out.
  if (!s->coordinator.empty() && s->coordinator != req.candidate && now_ms - s->heard_ms < lease_ms) {
    return refuse(StrCat("still hears ", s->coordinator, " (", now_ms - s->heard_ms,
                         " ms ago, lease ", lease_ms, " ms)"));
  }
  a.granted = true;
  if (!req.pre_vote) {
    if (req.term > s->term) s->coordinator.clear();
    s->term = req.term;
    s->voted_for = req.candidate;
  }
  a.term = s->term;
  a.coordinator = s->coordinator;
  return a;
}

bool GrantsMajority(const std::vector<std::string>& members, const std::string& job_id,
                    uint64_t term, const std::string& candidate, const std::vector<Grant>& grants) {
  std::set<std::string> granters;
  for (const auto& g : grants) {
    if (g.job_id == job_id && g.term == term && g.candidate == candidate && IsMember(members, g.granter)) {
      granters.insert(g.granter);
    }
  }
  return granters.size() >= Majority(members.size());
}

CallCheck AcceptCoordinatorCall(TermState* s, const std::vector<std::string>& members,
                                const std::string& job_id, uint64_t term, const std::string& from,
                                const std::vector<Grant>& verified_grants, int64_t now_ms,
                                const std::vector<std::string>& newer_members) {
  CallCheck c;
  auto answer = [&](bool ok, bool hostile, std::string why) {
    c.ok = ok;
    c.hostile = hostile;
    c.term = s->term;
    c.coordinator = s->coordinator;
    c.reason = std::move(why);
    return c;
  };
  // An older term is stale whoever sends it: a coordinator that was
  // replaced and left out of the job's new members must still learn where
  // the job went, or it would go on calling for it.
  if (term < s->term) {
    return answer(false, false, StrCat("term ", term, " is over: job ", job_id, " is at term ",
                                       s->term, ", ", Who(s->coordinator)));
  }
  const bool one_step = !newer_members.empty() && newer_members != members &&
                        CheckMembershipChange(members, newer_members).ok();
  // A member more than one change behind cannot check a caller that the
  // newer record vouches for: it refuses it (its slice fences, and is
  // replaced) but does not count it hostile.
  const bool vouched = !newer_members.empty() && IsMember(newer_members, from);
  if (!IsMember(members, from) && !(one_step && vouched)) {
    return answer(false, !vouched,
                  StrCat(from, " is no member of job ", job_id,
                         vouched ? " in the record kept here, which is more than one change of "
                                   "members behind the caller's"
                                 : ""));
  }
  if (term == s->term && !s->coordinator.empty()) {
    if (from != s->coordinator) {
      return answer(false, true, StrCat(from, " claims term ", term, " of job ", job_id,
                                        ", which is ", Who(s->coordinator)));
    }
    s->heard_ms = now_ms;
    return answer(true, false, "");
  }
  // A term this member has not seen decided: only a majority of grants makes it.
  const bool newer_majority =
      vouched && GrantsMajority(newer_members, job_id, term, from, verified_grants);
  if (!GrantsMajority(members, job_id, term, from, verified_grants) &&
      !(one_step && newer_majority)) {
    return answer(false, !newer_majority,
                  StrCat(from, " claims term ", term, " of job ", job_id,
                         " without a majority of grants",
                         newer_majority ? " of the members kept here (more than one change of "
                                          "members behind the caller's)"
                                        : ""));
  }
  if (term > s->term) s->voted_for.clear();
  s->term = term;
  s->coordinator = from;
  s->heard_ms = now_ms;
  return answer(true, false, "");
}

absl::Status CheckMembershipChange(const std::vector<std::string>& current,
                                   const std::vector<std::string>& next) {
  const std::set<std::string> a(current.begin(), current.end());
  const std::set<std::string> b(next.begin(), next.end());
  if (b.size() != next.size()) return absl::InvalidArgumentError("a member is listed twice");
  if (b.empty()) return absl::InvalidArgumentError("a job keeps at least one member");
  size_t added = 0, removed = 0;
  for (const auto& m : b) added += a.count(m) == 0;
  for (const auto& m : a) removed += b.count(m) == 0;
  if (added + removed > 1) {
    return absl::InvalidArgumentError(StrCat("members change one at a time: ", added, " added and ",
                                             removed, " removed at once"));
  }
  return absl::OkStatus();
}

std::vector<std::string> MembersBeforeChange(const std::vector<std::string>& after,
                                             const std::string& site, bool removed) {
  std::set<std::string> m(after.begin(), after.end());
  if (removed) {
    m.insert(site);
  } else {
    m.erase(site);
  }
  return {m.begin(), m.end()};
}

bool ChangeAccepted(const std::vector<std::string>& before, const std::string& coordinator,
                    const std::map<std::string, uint64_t>& acked, uint64_t since_version) {
  size_t holding = 0;
  for (const auto& m : std::set<std::string>(before.begin(), before.end())) {
    const auto it = acked.find(m);
    holding += m == coordinator || (it != acked.end() && it->second >= since_version);
  }
  return holding >= Majority(before.size());
}

bool SliceFenced(int64_t now_ms, int64_t majority_confirmed_ms, int64_t fence_ms) {
  return now_ms - majority_confirmed_ms >= fence_ms;
}

int64_t SliceLostAfterMs(int64_t last_heard_ms, int64_t fence_ms, int64_t stop_grace_ms,
                         int64_t clock_skew_ms) {
  return last_heard_ms + fence_ms + stop_grace_ms + clock_skew_ms;
}

}  // namespace fedgate::federation
