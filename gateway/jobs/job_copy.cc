#include "gateway/jobs/job_copy.h"

#include <algorithm>

#include "base/str_cat.h"
#include "federation/coordinator_term.h"
#include "federation/member_contact.h"
#include "gateway/jobs/participant_limits.h"

namespace fedgate::gateway {

v1::Job JobOf(const JobRecord& r, const std::string& coordinator) {
  v1::Job j;
  j.set_id(r.id);
  j.set_name(r.spec.name());
  j.set_tenant(r.tenant);
  j.set_state(federation::ToProto(r.state));
  j.set_attempt(r.attempt);
  j.set_reason(r.reason);
  *j.mutable_spec() = r.spec;
  j.set_created_at_unix_ms(r.created_at_unix_ms);
  j.set_updated_at_unix_ms(r.updated_at_unix_ms);
  if (!r.run.empty()) j.mutable_run()->ParseFromString(r.run);
  j.set_coordinator(r.moved_to.empty() ? coordinator : r.moved_to);
  j.set_term(std::max<uint64_t>(r.term, kFirstTerm));
  return j;
}

v1::JobCopy CopyOf(const JobRecord& r, const std::string& coordinator, const v1::RunPlan& run) {
  v1::Job j = JobOf(r, coordinator);
  *j.mutable_run() = run;
  v1::JobCopy c;
  c.set_job(j.SerializeAsString());
  c.set_version(r.version);
  return c;
}

absl::StatusOr<v1::Job> CheckCopy(const v1::JobCopy& copy, const std::string& job_id,
                                  const std::string& tenant, const std::string& from) {
  v1::Job j;
  if (!j.ParseFromString(copy.job())) {
    return absl::InvalidArgumentError(StrCat("the copy of job ", job_id, " does not parse"));
  }
  if (j.id() != job_id) {
    return absl::InvalidArgumentError(
        StrCat("a copy of job \"", j.id().substr(0, 40), "\" sent for job ", job_id));
  }
  if (j.tenant() != tenant) {
    return absl::InvalidArgumentError(StrCat("the copy of job ", job_id, " names tenant \"",
                                             j.tenant().substr(0, 64), "\", the hold is ", tenant,
                                             "'s"));
  }
  if (j.coordinator() != from) {
    return absl::InvalidArgumentError(StrCat("the copy of job ", job_id, " names coordinator \"",
                                             j.coordinator().substr(0, 64), "\", sent by ", from));
  }
  if (j.term() < kFirstTerm) {
    return absl::InvalidArgumentError(StrCat("the copy of job ", job_id, " has no term"));
  }
  return j;
}

std::vector<std::string> MembersOf(const v1::RunPlan& run, const std::string& coordinator) {
  if (run.members_size() > 0) {
    return federation::JobMembers("", {}, {run.members().begin(), run.members().end()});
  }
  std::vector<std::string> sites;
  for (const auto& s : run.sites()) sites.push_back(s.site());
  return federation::JobMembers(coordinator, sites,
                                {run.witnesses().begin(), run.witnesses().end()});
}

std::vector<std::string> SuccessorsOf(const v1::RunPlan& run, const std::string& coordinator) {
  if (run.takeover_after_ms() <= 0) return {};
  const auto members = MembersOf(run, coordinator);
  if (members.size() < 3) return {};
  std::vector<std::string> in_rank_order;
  for (const auto& s : run.sites()) in_rank_order.push_back(s.site());
  return federation::SuccessionOrder(in_rank_order, members, coordinator);
}

int64_t SliceFenceMs(const v1::RunPlan& run, const std::string& coordinator, int64_t lease_ms) {
  return federation::TakeoverFenceMs(SuccessorsOf(run, coordinator).size(),
                                     run.takeover_after_ms(), run.takeover_stagger_ms(), lease_ms);
}

int64_t UnconfirmedSliceFenceMs(const v1::RunPlan& run, const std::string& coordinator,
                                int64_t lease_ms) {
  if (SuccessorsOf(run, coordinator).empty()) return lease_ms;
  return federation::UnconfirmedFenceMs(SliceFenceMs(run, coordinator, lease_ms), lease_ms);
}

int64_t SiteLostAfterMs(const v1::RunPlan& run, const std::string& coordinator, int64_t lease_ms,
                        bool unconfirmable) {
  // Past the fence (and the shims' margin after it) its ranks were told to
  // stop, past the grace they are dead; the skew covers the clocks.
  const int64_t fence = (unconfirmable ? UnconfirmedSliceFenceMs(run, coordinator, lease_ms)
                                       : SliceFenceMs(run, coordinator, lease_ms)) +
                        participant_limits::kShimFenceMarginMs;
  return federation::SliceLostAfterMs(0, fence, participant_limits::kKillGraceMs,
                                      kAllowedClockSkewMs);
}

}  // namespace fedgate::gateway
