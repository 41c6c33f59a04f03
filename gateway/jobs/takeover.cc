#include "gateway/jobs/takeover.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>

#include "base/str_cat.h"
#include "federation/coordinator_term.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/job_story.h"
#include "gateway/jobs/participant_calls.h"
#include "gateway/peering/core.h"

namespace fedgate::gateway {

Takeover::Takeover(GatewayCore* core, Participant* participant, ParticipantCalls* calls,
                   Coordinator* coordinator)
    : core_(core), participant_(participant), calls_(calls), coordinator_(coordinator) {}

Takeover::~Takeover() { Stop(); }

void Takeover::Start() {
  thread_ = std::thread([this] {
    const auto period = std::chrono::milliseconds(
        std::max<int64_t>(100, core_->config().jobs.lease_ms / 5));
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      Pass();
      lock.lock();
      wake_.wait_for(lock, period, [&] { return stop_; });
    }
  });
}

void Takeover::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Takeover::Pass() {
  ConfirmSilences(participant_->SilencesToConfirm());
  std::set<std::string> due_ids;
  for (const auto& due : participant_->TakeoversDue()) {
    due_ids.insert(due.job_id);
    Elect(due);
  }
  std::erase_if(next_try_ms_, [&](const auto& e) { return !due_ids.contains(e.first); });
}

std::vector<absl::StatusOr<v1::VoteResponse>> Takeover::AskAll(
    const Participant::TakeoverDue& due, uint64_t term, bool pre_vote) {
  const std::string& self = core_->config().site;
  const int64_t timeout = std::max<int64_t>(500, core_->config().jobs.lease_ms / 4);
  const size_t majority = federation::Majority(due.members.size());
  // Shared with the calls' callbacks: the round ends at a majority of
  // grants, without waiting for a member that is cut off to time out.
  struct Round {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<absl::StatusOr<v1::VoteResponse>> out;
    size_t answered = 0, granted = 0;
  };
  auto round = std::make_shared<Round>();
  round->out.assign(due.members.size(), absl::UnavailableError("no answer yet"));
  auto ask = [&](size_t i) {
    v1::VoteRequest req;
    req.set_job_id(due.job_id);
    req.set_term(term);
    req.set_pre_vote(pre_vote);
    req.set_record_term(due.record_term);
    req.set_record_version(due.version);
    calls_->Vote(due.members[i], std::move(req), timeout,
                 [round, i](absl::StatusOr<v1::VoteResponse> a) {
                   std::lock_guard lock(round->mu);
                   round->granted += a.ok() && a->granted() ? 1 : 0;
                   round->out[i] = std::move(a);
                   ++round->answered;
                   round->cv.notify_all();
                 });
  };
  auto wait = [&](size_t answers) {
    std::unique_lock lock(round->mu);
    round->cv.wait(lock, [&] { return round->answered >= answers || round->granted >= majority; });
    return round->out;  // a copy: late answers keep writing the shared one
  };
  // This site's own vote first and on its own: a candidate stores its vote
  // for itself before it asks anyone else for theirs.
  const auto own = std::find(due.members.begin(), due.members.end(), self);
  size_t expected = 0;
  if (own != due.members.end()) {
    ask(static_cast<size_t>(own - due.members.begin()));
    const auto first = wait(++expected);
    const auto& a = first[own - due.members.begin()];
    if (!a.ok() || !a->granted()) return first;
  }
  for (size_t i = 0; i < due.members.size(); ++i) {
    if (due.members[i] != self) {
      ask(i);
      ++expected;
    }
  }
  return wait(expected);
}

void Takeover::Elect(const Participant::TakeoverDue& due) {
  const int64_t now = core_->clock()->NowMs();
  if (auto it = next_try_ms_.find(due.job_id); it != next_try_ms_.end() && it->second > now) {
    return;
  }
  // A lost election is tried again at a higher term, later the further down
  // the succession: two successors that split a term's votes (both due at
  // once when a cut heals) do not split the next one too.
  next_try_ms_[due.job_id] = now + core_->config().jobs.lease_ms * (1 + due.position);
  ++elections_;
  const uint64_t term = due.term + 1;
  const size_t majority = federation::Majority(due.members.size());
  auto count = [](const std::vector<absl::StatusOr<v1::VoteResponse>>& answers) {
    return static_cast<size_t>(std::count_if(answers.begin(), answers.end(), [](const auto& a) {
      return a.ok() && a->granted();
    }));
  };
  const auto pre = AskAll(due, term, true);
  if (count(pre) < majority) {
    spdlog::info("job {}: pre-vote for term {}: {} of {} members would grant it, no majority",
                 due.job_id, term, count(pre), due.members.size());
    return;
  }
  const auto votes = AskAll(due, term, false);
  std::vector<v1::SignedGrant> grants;
  for (const auto& a : votes) {
    if (a.ok() && a->granted()) grants.push_back(a->grant());
  }
  if (grants.size() < majority) {
    spdlog::info("job {}: term {}: {} of {} members granted it, no majority", due.job_id, term,
                 grants.size(), due.members.size());
    return;
  }
  // This site's own record first: from now on it hears itself, so it
  // grants no later term to another member while it coordinates.
  if (auto st = participant_->TakeLead(due.job_id, term, grants); !st.ok()) {
    spdlog::warn("job {}: won term {} but the record here moved on: {}", due.job_id, term,
                 std::string(st.message()));
    return;
  }
  auto job = Adopted(due, term, grants.size());
  if (!job.ok()) {
    spdlog::error("job {}: won term {} but cannot take it over: {}", due.job_id, term,
                  std::string(job.status().message()));
    return;
  }
  if (auto st = coordinator_->Adopt(*std::move(job), std::move(grants)); !st.ok()) {
    spdlog::error("job {}: won term {} but cannot store it: {}", due.job_id, term,
                  std::string(st.message()));
    return;
  }
  ++won_;
  spdlog::warn("job {}: took it over at term {} ({} silent for {} ms)", due.job_id, term,
               due.coordinator.empty() ? "undecided" : due.coordinator, due.silent_ms);
}

absl::StatusOr<JobRecord> Takeover::Adopted(const Participant::TakeoverDue& due, uint64_t term,
                                            size_t granted) {
  auto kept = participant_->JobFromCopy(due.job_id);
  if (!kept.ok()) return kept.status();
  if (!kept->has_value()) return absl::NotFoundError("the record is no longer kept here");
  const v1::Job& j = **kept;
  const auto state = federation::FromProto(j.state());
  const bool queued = state == federation::JobState::kPending && QueuedRecord(j.run());
  if (!state || (*state != federation::JobState::kRunning && !queued)) {
    return absl::FailedPreconditionError(
        StrCat("the record says ", v1::Job::State_Name(j.state()), ", not RUNNING or queued"));
  }
  const std::string& self = core_->config().site;
  const int64_t now = core_->clock()->NowMs();
  JobRecord r;
  r.id = j.id();
  r.tenant = j.tenant();
  r.spec = j.spec();
  r.state = *state;
  r.attempt = j.attempt();
  r.created_at_unix_ms = j.created_at_unix_ms();
  r.updated_at_unix_ms = now;
  v1::RunPlan run = j.run();
  if (run.members_size() == 0) {
    // The members stay as they were: the old coordinator keeps its vote.
    for (auto& m : MembersOf(run, j.coordinator())) run.add_members(std::move(m));
  }
  // A member with no slice (the old coordinator) is renewed as a witness
  // from now on: it keeps the record, so it can vote in a second takeover
  // (with none kept it refused every vote, and a job taken over once could
  // not be taken over again while it lived).
  for (const auto& m : run.members()) {
    const bool site = std::any_of(run.sites().begin(), run.sites().end(),
                                  [&](const v1::SiteRun& s) { return s.site() == m; });
    const bool witness = std::find(run.witnesses().begin(), run.witnesses().end(), m) !=
                         run.witnesses().end();
    if (m != self && !site && !witness) run.add_witnesses(m);
  }
  r.run = run.SerializeAsString();
  r.version = due.version + 1;  // newer than every site's copy
  r.term = term;
  const std::string old = due.coordinator.empty() ? j.coordinator() : due.coordinator;
  r.reason = StrCat("taken over by ", self, " at term ", term, ": ", old, " was silent for ",
                    due.silent_ms / 1000, " s");
  r.new_events.push_back(StoryEvent(
      now, "coordinator_moved", self,
      StrCat("term ", term, ": ", self, " coordinates the job with ", granted, " of ",
             due.members.size(), " members' grants; ", old, " was silent for ",
             due.silent_ms / 1000, " s")));
  return r;
}

}  // namespace fedgate::gateway
