// Raft's single-server changes of a job's members, where the job may be
// taken over: a replacement that moves a slice from a lost site to a new
// one first adds the new site, then removes the lost one. Each step is
// applied once a majority of the members before it holds the record with
// it, and the next step (or the next replacement) starts only then, so any
// majority of the members before a step and any majority after it share a
// member: no two successors can win one term with different members.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/str_cat.h"
#include "federation/coordinator_term.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/job_story.h"

namespace fedgate::gateway {
namespace {

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

void SetMembers(const std::vector<std::string>& members, v1::RunPlan* run) {
  run->clear_members();
  for (const auto& m : members) run->add_members(m);
}

// `site` leaves the members (and the witnesses, where a takeover made it one).
void RemoveMember(const std::string& site, v1::RunPlan* run) {
  std::vector<std::string> members(run->members().begin(), run->members().end());
  std::erase(members, site);
  SetMembers(members, run);
  std::vector<std::string> witnesses(run->witnesses().begin(), run->witnesses().end());
  std::erase(witnesses, site);
  run->clear_witnesses();
  for (const auto& w : witnesses) run->add_witnesses(w);
}

}  // namespace

std::string Coordinator::PendingMemberChange(const v1::RunPlan& run) const {
  if (!run.has_member_change() || SuccessorsOf(run, core_->config().site).empty()) return "";
  const auto& c = run.member_change();
  return StrCat("waiting for a majority of the members to hold that ", c.site(),
                c.remove() ? " left" : " joined", " (members change one at a time)");
}

absl::Status Coordinator::BeginMemberChange(const JobRecord& job, const v1::RunPlan& run,
                                            const std::string& lost, const std::string& target,
                                            v1::RunPlan* next) {
  const std::string& self = core_->config().site;
  if (SuccessorsOf(run, self).empty()) return absl::OkStatus();  // nobody votes: no members
  if (const std::string pending = PendingMemberChange(run); !pending.empty()) {
    return absl::UnavailableError(pending);
  }
  const auto before = MembersOf(run, self);
  std::vector<std::string> after = before;
  v1::MemberChange change;
  change.set_since_version(job.version + 1);  // the Save that writes `next`
  const bool lost_stays = lost == self;       // the coordinator stays a member
  if (!Has(before, target)) {
    after.push_back(target);
    std::sort(after.begin(), after.end());
    change.set_site(target);
    if (!lost_stays) change.set_then_remove(lost);
  } else if (!lost_stays) {
    std::erase(after, lost);  // the new site already votes (a witness): only the removal
    change.set_site(lost);
    change.set_remove(true);
  }
  if (auto st = federation::CheckMembershipChange(before, after); !st.ok()) {
    return absl::InternalError(StrCat("bad change of members: ", st.message()));
  }
  SetMembers(after, next);
  // A witness that now runs a slice is renewed as a site, not twice.
  std::vector<std::string> witnesses(next->witnesses().begin(), next->witnesses().end());
  std::erase(witnesses, target);
  next->clear_witnesses();
  for (const auto& w : witnesses) next->add_witnesses(w);
  if (change.site().empty()) {
    next->clear_member_change();
  } else {
    *next->mutable_member_change() = change;
  }
  return absl::OkStatus();
}

bool Coordinator::AdvanceMemberChange(RenewWork* w, int64_t now) {
  if (!w->run.has_member_change()) return true;
  const std::string& self = core_->config().site;
  const v1::MemberChange change = w->run.member_change();
  const auto before = federation::MembersBeforeChange(MembersOf(w->run, self), change.site(),
                                                      change.remove());
  if (!federation::ChangeAccepted(before, self, copy_acked_[w->job.id], change.since_version())) {
    return true;
  }
  JobRecord job = w->job;
  v1::RunPlan next = w->run;
  std::string what;
  if (change.remove()) {
    next.clear_member_change();
    what = StrCat(change.site(), " left the job's members");
  } else if (!change.then_remove().empty() && change.then_remove() != self) {
    RemoveMember(change.then_remove(), &next);
    auto* c = next.mutable_member_change();
    c->set_site(change.then_remove());
    c->set_remove(true);
    c->clear_then_remove();
    c->set_since_version(job.version + 1);
    what = StrCat(change.site(), " joined the job's members; ", change.then_remove(),
                  " leaves them next");
  } else {
    // A successor that was the lost site stays a member: a coordinator
    // never removes itself.
    next.clear_member_change();
    what = StrCat(change.site(), " joined the job's members");
  }
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = now;
  job.new_events.push_back(StoryEvent(
      now, "members", change.site(),
      StrCat(what, " (a majority of the ", before.size(), " members before the step holds it)")));
  if (!Save(&job)) return false;  // written meanwhile: the next pass tries again
  spdlog::info("job {}: {}", job.id, what);
  // A second lost slice waits in the placement thread for this step.
  if (!next.has_member_change() && next.has_replacing()) {
    {
      std::lock_guard lock(wake_mu_);
      place_now_ = true;
    }
    wake_.notify_all();
  }
  w->job = std::move(job);
  w->run = std::move(next);
  return true;
}

}  // namespace fedgate::gateway
