// The records of jobs this site runs slices of (v1::JobCopy), kept beside
// the holds: stored when a commit or a renewal brings a newer version than
// the kept one, answered from by this gateway's `jobs get` for a job it does
// not coordinate, and forgotten once no slice of the job holds GPUs here.
// A kept record fences its job: calls of another term or coordinator than
// the record's are refused (federation::AcceptCoordinatorCall).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/str_cat.h"
#include "federation/member_contact.h"
#include "federation/saturating.h"
#include "gateway/security/ad_signing.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/participant.h"
#include "gateway/jobs/participant_limits.h"

namespace fedgate::gateway {
namespace {

Participant::KeptCopy KeptOf(const v1::Job& job, uint64_t version, const std::string& site) {
  Participant::KeptCopy k;
  k.witness = std::find(job.run().witnesses().begin(), job.run().witnesses().end(), site) !=
              job.run().witnesses().end();
  k.queued = job.state() == v1::Job::PENDING && QueuedRecord(job.run());
  k.version = version;
  k.record_term = job.term();
  k.attempt = job.attempt();
  k.epoch_here = Participant::KeptCopy::kNoSliceHere;
  for (const auto& r : job.run().sites()) {
    if (r.site() == site) k.epoch_here = r.epoch() != 0 ? r.epoch() : job.run().epoch();
  }
  k.term.term = job.term();
  k.term.coordinator = job.coordinator();
  k.members = MembersOf(job.run(), job.coordinator());
  k.successors = SuccessorsOf(job.run(), job.coordinator());
  k.takeover_after_ms = job.run().takeover_after_ms();
  k.stagger_ms = job.run().takeover_stagger_ms();
  return k;
}

}  // namespace

uint64_t Participant::CopyVersionLocked(const std::string& job_id) const {
  const auto it = copies_.find(job_id);
  return it == copies_.end() ? 0 : it->second.version;
}

std::optional<Participant::BroughtRecord> Participant::Brought(const v1::SliceStatusRequest& req) {
  v1::Job j;
  if (!req.has_copy() || !j.ParseFromString(req.copy().job())) return std::nullopt;
  return BroughtRecord{req.copy().version(), MembersOf(j.run(), j.coordinator())};
}

absl::Status Participant::CheckTermLocked(const v1::ReservationKey& key, const std::string& from,
                                         const std::vector<federation::Grant>& grants,
                                         std::optional<StoredJobTerm>* persist,
                                         const BroughtRecord* brought) {
  auto it = copies_.find(key.job_id());
  // Gateways from before terms send none: theirs is the first.
  const uint64_t term = std::max<uint64_t>(key.term(), kFirstTerm);
  if (it == copies_.end()) {
    // Nothing kept: ownership alone decides. But the record may have gone
    // with a slice that ended here while holds of the job still name an
    // earlier coordinator (a second takeover, with this site frozen
    // through it, found every call and Prepare of the new one refused): a
    // majority of grants over the members of the record the call brings
    // hands them over, the holder among those members.
    if (brought != nullptr && !grants.empty() && !ledger_.CheckOwner(key.job_id(), from).ok()) {
      federation::TermState fresh;
      const auto c = federation::AcceptCoordinatorCall(&fresh, brought->members, key.job_id(), term,
                                                       from, grants, clock_->NowMs());
      const auto& m = brought->members;
      if (c.ok && std::find(m.begin(), m.end(), config_.site) != m.end()) {
        spdlog::warn("job {}: {} coordinates it from term {} on, with a majority's grants (no "
                     "record kept here)",
                     key.job_id(), from, term);
        ledger_.Reassign(key.job_id(), from);
      }
    }
    return absl::OkStatus();
  }
  federation::TermState& t = it->second.term;
  const uint64_t was_term = t.term;
  const std::string was_coordinator = t.coordinator;
  // The members of a newer record the call brings: a step of a change of
  // members this site has not heard of yet (federation::AcceptCoordinatorCall).
  std::vector<std::string> newer;
  if (brought != nullptr && brought->version > it->second.version) newer = brought->members;
  const auto c = federation::AcceptCoordinatorCall(&t, it->second.members, key.job_id(), term,
                                                   from, grants, clock_->NowMs(), newer);
  if (!c.ok) {
    ++term_refused_[c.hostile ? "hostile" : "stale"];
    spdlog::warn("job {}: refused a call of {}: {}", key.job_id(), from, c.reason);
    if (c.hostile) return absl::PermissionDeniedError(c.reason);
    return absl::FailedPreconditionError(c.reason);
  }
  const bool moved = t.term != was_term || t.coordinator != was_coordinator;
  if (moved) {
    // A majority granted `from` this term: the job's holds are its from now on.
    spdlog::warn("job {}: {} coordinates it from term {} on (was {} at term {})", key.job_id(),
                 from, t.term, was_coordinator.empty() ? "undecided" : was_coordinator, was_term);
    ledger_.Reassign(key.job_id(), from);
  }
  // A new coordinator sends its grants until a call at its term has been
  // answered; every such call stores the term, so none is answered before
  // the term is durable (a repeat may overtake the first call's write).
  if (persist != nullptr && (moved || !grants.empty())) {
    *persist = StoredJobTerm{t.term, t.coordinator, t.voted_for};
  }
  return absl::OkStatus();
}

std::vector<federation::Grant> Participant::VerifyGrants(
    const google::protobuf::RepeatedPtrField<v1::SignedGrant>& signed_grants) {
  std::vector<federation::Grant> out;
  if (signed_grants.empty()) return out;
  size_t bad = 0;
  for (const auto& sg : signed_grants) {
    AdRefusal why;
    auto g = grant_authority_ == nullptr
                 ? absl::StatusOr<v1::Grant>(absl::FailedPreconditionError("no grant authority"))
                 : grant_authority_->VerifyGrant(sg, &why);
    if (!g.ok()) {
      ++bad;
      spdlog::warn("refused a grant: {}", std::string(g.status().message()));
      continue;
    }
    out.push_back({g->job_id(), g->term(), g->candidate(), g->granter()});
  }
  if (bad > 0) {
    std::lock_guard lock(mu_);
    term_refused_["bad_grant"] += bad;
  }
  return out;
}

absl::Status Participant::PersistTerm(const std::string& job_id,
                                      const std::optional<StoredJobTerm>& t) {
  if (!t.has_value() || store_ == nullptr) return absl::OkStatus();
  auto st = store_->PutJobTerm(job_id, *t);
  if (!st.ok()) {
    spdlog::error("job {}: cannot store term {} ({}): {}", job_id, t->term, t->coordinator,
                  std::string(st.message()));
  }
  return st;
}

std::map<std::string, uint64_t> Participant::TermRefusals() {
  std::lock_guard lock(mu_);
  return term_refused_;
}

uint64_t Participant::KeepJobCopy(const std::string& from, const v1::ReservationKey& key,
                                  const v1::JobCopy& copy) {
  if (auto end = ForgetEndedCopy(from, key.job_id(), copy); end.has_value()) return *end;
  std::string tenant;
  std::optional<uint64_t> kept_term;
  uint64_t have = 0;
  bool held = false;
  {
    std::lock_guard lock(mu_);
    have = CopyVersionLocked(key.job_id());
    if (copy.version() <= have) return have;
    const federation::Hold* hold = ledger_.Find(key.job_id(), key.epoch());
    if (hold != nullptr) tenant = hold->tenant;
    held = hold != nullptr;
    if (auto it = copies_.find(key.job_id()); it != copies_.end()) kept_term = it->second.term.term;
  }
  // Kept beside a hold, by a witness the record names, or by a member that
  // keeps the record already (its slice ended, the job has not: a step of
  // a change of members needs its copy); with none, there is nothing to
  // keep it for.
  if (!held && kept_term.has_value()) {
    auto mine = JobFromCopy(key.job_id());
    if (!mine.ok() || !mine->has_value()) return have;
    tenant = (*mine)->tenant();
  } else if (!held) {
    auto w = WitnessCopy(copy, key.job_id(), from);
    if (!w.has_value()) return have;
    // A running job's record, or a queued one (before its first world).
    const bool queued = w->state() == v1::Job::PENDING && QueuedRecord(w->run());
    if (w->state() != v1::Job::RUNNING && !queued) return have;  // an end: nothing to keep
    tenant = w->tenant();
  }
  auto job = CheckCopy(copy, key.job_id(), tenant, from);
  if (job.ok() && kept_term.has_value() && job->term() != *kept_term) {
    // A term changes by a takeover's grants, never by a copy: refused before
    // anything is written.
    job = absl::InvalidArgumentError(StrCat("the copy of job ", key.job_id(), " is of term ",
                                            job->term(), ", this site is at term ", *kept_term));
  }
  if (!job.ok()) {
    spdlog::warn("job {}: refused the copy of its record sent by {}: {}", key.job_id(), from,
                 std::string(job.status().message()));
    std::lock_guard lock(mu_);
    ++term_refused_["bad_copy"];
    return CopyVersionLocked(key.job_id());
  }
  const absl::Status put = store_ == nullptr
                               ? absl::OkStatus()
                               : store_->PutJobCopy(key.job_id(), copy.version(), copy.job());
  std::lock_guard lock(mu_);
  if (!put.ok()) {
    spdlog::error("job {}: cannot keep the copy of its record: {}", key.job_id(),
                  std::string(put.message()));
    return CopyVersionLocked(key.job_id());
  }
  KeptCopy& kept = copies_[key.job_id()];
  if (kept.version > 0 && job->term() != kept.term.term) {
    // The term moved while the copy was written (a takeover accepted
    // meanwhile): the stored term outranks the copy's after a restart.
    ++term_refused_["bad_copy"];
    spdlog::warn("job {}: refused the copy of its record sent by {}: term {}, accepted term {}",
                 key.job_id(), from, job->term(), kept.term.term);
    return kept.version;
  }
  if (copy.version() > kept.version) {
    const federation::TermState was = kept.term;
    const int64_t lease = kept.lease_ms;
    kept = KeptOf(*job, copy.version(), config_.site);
    kept.lease_ms = lease;
    if (was.term == kept.term.term) kept.term.voted_for = was.voted_for;
    kept.term.heard_ms = std::max(was.heard_ms, clock_->NowMs());
  }
  return kept.version;
}

std::vector<Participant::TakeoverDue> Participant::TakeoversDue() {
  std::vector<TakeoverDue> out;
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMs();
  for (const auto& [id, k] : copies_) {
    const auto at = std::find(k.successors.begin(), k.successors.end(), config_.site);
    if (at == k.successors.end() || k.term.coordinator == config_.site || k.ended) continue;
    const int position = static_cast<int>(at - k.successors.begin());
    const int64_t wait = federation::TakeoverDelayMs(position, k.takeover_after_ms, k.stagger_ms);
    if (now - k.term.heard_ms < wait) continue;
    out.push_back({id, k.term.term, k.term.coordinator, k.members, now - k.term.heard_ms,
                   k.version, position, k.record_term});
  }
  return out;
}

absl::Status Participant::TakeLead(const std::string& job_id, uint64_t term,
                                   const std::vector<v1::SignedGrant>& grants) {
  google::protobuf::RepeatedPtrField<v1::SignedGrant> signed_grants(grants.begin(), grants.end());
  const auto verified = VerifyGrants(signed_grants);
  v1::ReservationKey key;
  key.set_job_id(job_id);
  key.set_term(term);
  std::optional<StoredJobTerm> persist;
  std::vector<FenceWrite> fences;
  {
    std::lock_guard lock(mu_);
    if (auto st = CheckTermLocked(key, config_.site, verified, &persist); !st.ok()) return st;
    // This site coordinates the job now: its own slice has heard its
    // coordinator. Taking the term ends the confirmed silence (the fence
    // falls back to the short one), so without this a sweep before the
    // first renewal of the new term stopped the slice it was taken over for.
    const int64_t now = clock_->NowMs();
    for (auto s = slices_.lower_bound({job_id, 0}); s != slices_.end() && s->first.first == job_id; ++s) {
      Slice& slice = s->second;
      if (slice.state != SliceState::RUNNING || slice.stopping || slice.released) continue;
      slice.lease_deadline_ms = std::max(slice.lease_deadline_ms, federation::SatAdd(now, slice.lease_ms));
      if (!slice.ranks.empty() && !slice.parked) fences.push_back(FenceOfLocked(slice));
    }
  }
  for (const auto& f : fences) WriteFence(f);
  return PersistTerm(job_id, persist);
}

int64_t Participant::FenceExtraLocked(const std::string& job_id, int64_t lease_ms) const {
  auto it = copies_.find(job_id);
  if (it == copies_.end() || it->second.successors.empty()) return 0;
  const KeptCopy& k = it->second;
  const int64_t fence = federation::TakeoverFenceMs(k.successors.size(), k.takeover_after_ms,
                                                    k.stagger_ms, lease_ms);
  const bool confirmed = k.confirmed_heard_ms >= 0 && k.confirmed_heard_ms == k.term.heard_ms;
  return (confirmed ? fence : federation::UnconfirmedFenceMs(fence, lease_ms)) - lease_ms;
}

absl::StatusOr<std::optional<v1::Job>> Participant::JobFromCopy(const std::string& job_id) const {
  if (store_ == nullptr) return std::optional<v1::Job>();
  auto row = store_->GetJobCopy(job_id);
  if (!row.ok()) return row.status();
  if (!row->has_value()) return std::optional<v1::Job>();
  v1::Job job;
  if (!job.ParseFromString((*row)->job)) {
    return absl::DataLossError(StrCat("the kept copy of job ", job_id, " does not parse"));
  }
  return std::optional<v1::Job>(std::move(job));
}

std::vector<std::string> Participant::OrphanCopiesLocked() {
  std::vector<std::string> out;
  for (auto it = copies_.begin(); it != copies_.end();) {
    // Kept while a slice of the job holds GPUs here (running, parked,
    // stopping), or ended without its coordinator deciding or seeing it
    // (stopped for want of a coordinator, or its ranks ended by themselves
    // and the coordinator has not asked since), while its state is
    // remembered: the job is not over until a coordinator says so, and a
    // takeover needs the record. So is one that succeeded, seen or not,
    // until the coordinator's end notice: a coordinator lost for good
    // right after it decided the job's end must leave a majority that can
    // decide it again (a failed slice's site may be left out of the next
    // world, and must not lead the job back to this one). A job its
    // coordinator said was over goes with its last hold, and so does one
    // nobody may take over (no successors) or whose end was of an earlier
    // attempt or of a slice the coordinator replaced (it placed the
    // record's attempt, or the replacement, after that end).
    const KeptCopy& k = it->second;
    bool held = false;
    for (auto s = slices_.lower_bound({it->first, 0}); s != slices_.end() && s->first.first == it->first;
         ++s) {
      const Slice& sl = s->second;
      const bool current = sl.key.attempt() >= k.attempt &&
                           (k.epoch_here == 0 || sl.key.epoch() == k.epoch_here);
      const bool undecided_end =
          !sl.aborted && (!sl.reported || sl.state == SliceState::SUCCEEDED);
      const bool keep_end = !k.successors.empty() && current && (sl.fenced || undecided_end);
      held = held || !sl.released || (!k.ended && keep_end);
    }
    const int64_t now = clock_->NowMs();
    held = held || (k.witness && !k.ended &&
                    now - k.term.heard_ms < participant_limits::kFinishedSliceKeepMs);
    held = held || (!k.ended && k.restored_alone_ms >= 0 && k.term.heard_ms == k.restored_alone_ms &&
                    now - k.restored_alone_ms < participant_limits::kFinishedSliceKeepMs);
    if (held) {
      ++it;
      continue;
    }
    out.push_back(it->first);
    it = copies_.erase(it);
  }
  return out;
}

void Participant::MarkCopiesRestoredAloneLocked() {
  for (auto& [id, k] : copies_) {
    // A job with no slice here may have ended here unseen just before the
    // restart (a finished slice is not stored): a successor may need the
    // record to finish it.
    const auto s = slices_.lower_bound({id, 0});
    if (s == slices_.end() || s->first.first != id) k.restored_alone_ms = k.term.heard_ms;
  }
}

void Participant::LoadCopies() {
  if (store_ == nullptr) return;
  auto rows = store_->ListJobCopies();
  if (!rows.ok()) {
    spdlog::error("cannot read the kept job records: {}", std::string(rows.status().message()));
    return;
  }
  auto terms = store_->ListJobTerms();
  if (!terms.ok()) {
    spdlog::error("cannot read the kept job terms: {}", std::string(terms.status().message()));
    return;  // without its votes a record must not answer for its job
  }
  std::map<std::string, KeptCopy> loaded;
  for (const auto& [id, version] : *rows) {
    auto job = JobFromCopy(id);
    if (!job.ok() || !job->has_value()) continue;
    KeptCopy k = KeptOf(**job, version, config_.site);
    // A vote or a takeover accepted since the record was written.
    if (auto t = terms->find(id); t != terms->end() && t->second.term >= k.term.term) {
      k.term.term = t->second.term;
      k.term.coordinator = t->second.coordinator;
      k.term.voted_for = t->second.voted_for;
    }
    // A restart alone votes nobody out: the coordinator counts as heard now.
    k.term.heard_ms = clock_->NowMs();
    loaded[id] = std::move(k);
  }
  // Those of jobs without a slice here are marked once the slices are
  // loaded (MarkCopiesRestoredAlone).
  std::lock_guard lock(mu_);
  copies_.merge(loaded);
}

}  // namespace fedgate::gateway
