// A member's vote in a coordinator takeover: Raft's RequestVote answered
// from the job's kept record (federation::AnswerVote), the vote stored
// before it is answered (one grant per term, across restarts), the grant
// signed with this gateway's key so the winner can show it to the others.
#include <spdlog/spdlog.h>

#include "base/str_cat.h"
#include "gateway/jobs/participant.h"
#include "gateway/jobs/participant_limits.h"
#include "gateway/security/ad_signing.h"

namespace fedgate::gateway {

using participant_limits::CheckJobId;
using participant_limits::kMinLeaseMs;

absl::StatusOr<v1::VoteResponse> Participant::Vote(const std::string& from,
                                                   const v1::VoteRequest& req) {
  if (auto st = CheckJobId(req.job_id()); !st.ok()) return st;
  if (grant_authority_ == nullptr) {
    return absl::FailedPreconditionError("this site cannot sign grants (no gateway key)");
  }
  federation::VoteAnswer a;
  std::optional<StoredJobTerm> vote;
  {
    std::lock_guard lock(mu_);
    auto it = copies_.find(req.job_id());
    if (it == copies_.end()) {
      return absl::NotFoundError(
          StrCat("site ", config_.site, " keeps no record of job ", req.job_id()));
    }
    // Stickiness counts the lease the coordinator gave the job's slices here.
    int64_t lease = config_.jobs.lease_ms;
    for (auto s = slices_.lower_bound({req.job_id(), 0});
         s != slices_.end() && s->first.first == req.job_id(); ++s) {
      lease = std::max(lease, s->second.lease_ms);
    }
    KeptCopy& kept = it->second;
    if (kept.ended) {
      return absl::FailedPreconditionError(StrCat("job ", req.job_id(), " ended: its coordinator ",
                                                  kept.term.coordinator, " said so at term ",
                                                  kept.term.term));
    }
    lease = std::max(lease, kept.lease_ms);
    // This gateway coordinates the job at the kept term: it hears itself,
    // whenever its own slice was last renewed (a job re-placed elsewhere
    // renews no slice here). Another member may still vote it out.
    if (kept.term.coordinator == config_.site && from != config_.site) {
      const std::string why = StrCat("site ", config_.site, " coordinates job ", req.job_id(),
                                     " at term ", kept.term.term, " and hears itself");
      spdlog::info("job {}: no {} for {} at term {}: {}", req.job_id(),
                   req.pre_vote() ? "pre-vote" : "vote", from, req.term(), why);
      v1::VoteResponse no;
      no.set_term(kept.term.term);
      no.set_coordinator(kept.term.coordinator);
      no.set_reason(why);
      return no;
    }
    const federation::RecordPosition own{kept.record_term, kept.version};
    // A silence check is a pre-vote about the coordinator only.
    const bool silence_only = req.silence_only() && req.pre_vote();
    a = federation::AnswerVote(&kept.term, kept.members,
                               {req.job_id(), req.term(), from, req.pre_vote()}, clock_->NowMs(),
                               std::max<int64_t>(lease, kMinLeaseMs),
                               silence_only ? own
                                            : federation::RecordPosition{req.record_term(),
                                                                         req.record_version()},
                               own);
    if (a.hostile) ++term_refused_["hostile"];
    // Stored by every call that grants, also a repeated one: a repeat that
    // overtook the first call's write must not answer before it is durable.
    if (a.granted && !req.pre_vote()) {
      vote = StoredJobTerm{kept.term.term, kept.term.coordinator, kept.term.voted_for};
    }
  }
  v1::VoteResponse resp;
  resp.set_term(a.term);
  resp.set_coordinator(a.coordinator);
  if (!a.granted) {
    spdlog::info("job {}: no {} for {} at term {}: {}", req.job_id(),
                 req.pre_vote() ? "pre-vote" : "vote", from, req.term(), a.reason);
    if (a.hostile) return absl::PermissionDeniedError(a.reason);
    resp.set_reason(a.reason);
    return resp;
  }
  if (req.pre_vote()) {
    resp.set_granted(true);
    return resp;
  }
  // The vote is on disk before anyone can count it.
  if (auto st = PersistTerm(req.job_id(), vote); !st.ok()) {
    return absl::UnavailableError(StrCat("cannot store the vote: ", st.message()));
  }
  v1::Grant g;
  g.set_job_id(req.job_id());
  g.set_term(req.term());
  g.set_candidate(from);
  g.set_granter(config_.site);
  auto signed_grant = grant_authority_->SignGrant(g);
  if (!signed_grant.ok()) return signed_grant.status();
  spdlog::warn("job {}: granted {} term {}", req.job_id(), from, req.term());
  resp.set_granted(true);
  *resp.mutable_grant() = *std::move(signed_grant);
  return resp;
}

}  // namespace fedgate::gateway
