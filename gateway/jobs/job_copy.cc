#include "gateway/jobs/job_copy.h"

#include "base/str_cat.h"

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
  j.set_coordinator(coordinator);
  j.set_term(kFirstTerm);
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

}  // namespace fedgate::gateway
