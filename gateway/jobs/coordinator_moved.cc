// A job's coordination moving between gateways (coordinator takeover): a
// job this site took over is written into its store and renewed with the
// grants that made it coordinator until every site has accepted them; a
// job taken over from this site is handed over (this site steps down and
// never drives it again); and a coordinator that cannot reach a majority
// of a job's members changes nothing about the job until it can.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "base/str_cat.h"
#include "federation/coordinator_term.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/job_story.h"

namespace fedgate::gateway {

absl::Status Coordinator::Adopt(JobRecord job, std::vector<v1::SignedGrant> grants) {
  {
    // Before the row exists: the first renewal of the job carries them.
    std::lock_guard lock(grants_mu_);
    grants_[job.id] = {job.term, std::move(grants), {}};
  }
  const std::string id = job.id;
  const uint64_t term = job.term;
  auto st = store_->Adopt(std::move(job));
  if (!st.ok()) {
    std::lock_guard lock(grants_mu_);
    if (auto it = grants_.find(id); it != grants_.end() && it->second.term == term) {
      grants_.erase(it);
    }
    return st;
  }
  ++takeovers_;
  {
    std::lock_guard lock(wake_mu_);
    renew_now_ = true;
  }
  wake_.notify_all();
  return absl::OkStatus();
}

void Coordinator::AttachGrants(const JobRecord& job, const std::string& site,
                               v1::SliceStatusRequest* req) {
  std::lock_guard lock(grants_mu_);
  auto it = grants_.find(job.id);
  if (it == grants_.end() || it->second.term != job.term || it->second.accepted.contains(site)) {
    return;
  }
  for (const auto& g : it->second.grants) *req->add_grants() = g;
}

void Coordinator::GrantsAnswered(const RenewWork& w) {
  const JobRecord& job = w.job;
  const v1::RunPlan& run = w.run;
  const auto& a = w.answers;
  std::lock_guard lock(grants_mu_);
  auto it = grants_.find(job.id);
  if (it == grants_.end() || it->second.term != job.term) return;
  for (int i = 0; i < run.sites_size() && i < static_cast<int>(a.size()); ++i) {
    if (a[i].ok() && a[i]->moved_term() == 0) it->second.accepted.insert(run.sites(i).site());
  }
  for (size_t i = 0; i < w.witnesses.size(); ++i) {
    const auto& wa = w.witness_answers[i];
    if (wa.ok() && wa->moved_term() == 0) it->second.accepted.insert(w.witnesses[i]);
  }
  bool all = true;
  for (const auto& s : run.sites()) all = all && it->second.accepted.contains(s.site());
  for (const auto& s : w.witnesses) all = all && it->second.accepted.contains(s);
  if (all) grants_.erase(it);
}

bool Coordinator::StepDownIfMoved(JobRecord job,
                                  std::vector<absl::StatusOr<v1::SliceStatusResponse>>* answers,
                                  int64_t now) {
  uint64_t term = 0;
  std::string to, why;
  for (auto& a : *answers) {
    if (!a.ok() || a->moved_term() == 0) continue;
    if (a->moved_term() > term && !a->moved_to().empty()) {
      term = a->moved_term();
      to = a->moved_to();
      why = a->message();
    }
    // A site past this term with no coordinator yet is no answer at all.
    a = absl::UnavailableError(StrCat("term ", job.term, " is over: ", a->message()));
  }
  if (term <= job.term || to.empty()) return false;
  // This site stops coordinating the job: the row names the new coordinator.
  job.term = term;
  job.moved_to = to;
  job.reason = StrCat("coordinated by ", to, " since term ", term,
                      " (taken over while this site could not renew it)");
  job.updated_at_unix_ms = now;
  job.new_events.push_back(StoryEvent(now, "coordinator_moved", to,
                                      StrCat("term ", term, ": ", to, " coordinates the job")));
  if (Save(&job)) {
    spdlog::warn("job {}: stepped down: {} ({})", job.id, job.reason, why);
    ++stepped_down_;
  }
  return true;
}

bool Coordinator::HearsMajority(const RenewWork& w, int64_t sent) {
  const JobRecord& job = w.job;
  const v1::RunPlan& run = w.run;
  const auto& a = w.answers;
  const std::string& self = core_->config().site;
  if (SuccessorsOf(run, self).empty()) return true;  // no takeover: as ever
  const auto members = MembersOf(run, self);
  std::set<std::string> heard = {self};
  for (int i = 0; i < run.sites_size() && i < static_cast<int>(a.size()); ++i) {
    if (a[i].ok()) heard.insert(run.sites(i).site());
  }
  for (size_t i = 0; i < w.witnesses.size(); ++i) {
    if (w.witness_answers[i].ok()) heard.insert(w.witnesses[i]);
  }
  // A job that ran only here and ended here (its witnesses not asked, see
  // AskWitnesses) may end on this site's word while the last pass heard a
  // majority.
  const bool ended_here =
      heard_majority_.contains(job.id) && run.sites_size() > 0 &&
      std::all_of(run.sites().begin(), run.sites().end(),
                  [&](const v1::SiteRun& r) { return r.site() == self; }) &&
      std::all_of(a.begin(), a.begin() + std::min<int>(run.sites_size(), a.size()), [](const auto& x) {
        return x.ok() && (x->state() == v1::SliceStatusResponse::SUCCEEDED ||
                          x->state() == v1::SliceStatusResponse::FAILED);
      });
  const bool answered = heard.size() >= federation::Majority(members.size());
  if (answered) {
    heard_majority_.insert(job.id);
    // Heard now by the members a retry's queued record names (its world's):
    // the retry need not wait a pass for them (PlacePass, QueueHeard).
    std::lock_guard lock(queue_mu_);
    queue_heard_ms_[job.id] = sent;
  } else if (!ended_here) {
    heard_majority_.erase(job.id);
  }
  const bool majority = answered || ended_here;
  if (!majority && frozen_.insert(job.id).second) {
    spdlog::warn(
        "job {}: hears {} of its {} members, no majority: changing nothing until it does "
        "(a majority may have taken it over)",
        job.id, heard.size(), members.size());
  }
  if (majority) frozen_.erase(job.id);
  return majority;
}

}  // namespace fedgate::gateway
