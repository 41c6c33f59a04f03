#include "gateway/job_manager.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <future>
#include <thread>

#include "federation/job_spec.h"
#include "federation/str_cat.h"
#include "gateway/coordinator.h"
#include "gateway/core.h"

namespace fedgate::gateway {

namespace {
bool Terminal(const std::string& state) {
  return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED";
}
// How often the Watch and Logs streams look for news.
constexpr auto kStreamPoll = std::chrono::milliseconds(300);
}  // namespace

JobManager::JobManager(GatewayCore* core, JobStore* store) : core_(core), store_(store) {}

v1::Job JobManager::ToProto(const JobRecord& r, bool with_plan) {
  v1::Job j;
  j.set_id(r.id);
  j.set_name(r.spec.name());
  j.set_tenant(r.tenant);
  j.set_state(r.state);
  j.set_attempt(r.attempt);
  j.set_reason(r.reason);
  *j.mutable_spec() = r.spec;
  j.set_created_at_unix_ms(r.created_at_unix_ms);
  j.set_updated_at_unix_ms(r.updated_at_unix_ms);
  if (!r.run.empty()) j.mutable_run()->ParseFromString(r.run);
  if (with_plan && r.state == "PENDING") {
    auto plan = core_->Plan(r.spec);
    if (plan.ok()) {
      *j.mutable_placement() = *plan;
      if (r.reason.empty()) {
        j.set_reason(plan->placeable() ? StrCat("queued; placeable now (", plan->summary(), ")")
                                       : StrCat("waiting for capacity: ", plan->summary()));
      }
    }
  }
  return j;
}

void JobManager::SubmitAsync(const Identity& caller, const v1::SubmitJobRequest& req,
                             std::function<void(absl::StatusOr<v1::SubmitJobResponse>)> done) {
  if (caller.role != Role::kUser) {
    done(absl::PermissionDeniedError(
        StrCat(caller.ToUri(), " cannot submit: jobs are submitted by tenants' users")));
    return;
  }
  if (req.idempotency_key().size() > 200) {
    done(absl::InvalidArgumentError("idempotency_key longer than 200 characters"));
    return;
  }
  // Validate against the federation's models before anything is stored.
  auto plan = core_->Plan(req.spec());
  if (!plan.ok()) {
    done(plan.status());
    return;
  }
  JobRecord r;
  r.id = NewJobId();
  r.tenant = caller.tenant;
  r.idempotency_key = req.idempotency_key();
  r.spec = federation::WithDefaults(req.spec());
  r.state = "PENDING";
  r.reason = plan->summary();
  r.created_at_unix_ms = r.updated_at_unix_ms = core_->clock()->NowMs();
  auto reply = [this, done](absl::StatusOr<SubmitOutcome> out) {
    if (!out.ok()) {
      done(out.status());
      return;
    }
    if (out->created) {
      spdlog::debug("job {} of tenant {} queued ({} GPUs)", out->job.id, out->job.tenant,
                    out->job.spec.gpus());
    }
    v1::SubmitJobResponse resp;
    *resp.mutable_job() = ToProto(out->job, false);
    resp.set_created(out->created);
    done(std::move(resp));
  };
  if (store_ == nullptr) {
    {
      std::lock_guard lock(mem_mu_);
      mem_[r.id] = r;
    }
    reply(SubmitOutcome{r, true});
    return;
  }
  store_->SubmitAsync(std::move(r), std::move(reply));
}

absl::StatusOr<v1::SubmitJobResponse> JobManager::Submit(const Identity& caller,
                                                         const v1::SubmitJobRequest& req) {
  std::promise<absl::StatusOr<v1::SubmitJobResponse>> p;
  auto fut = p.get_future();
  SubmitAsync(caller, req, [&p](absl::StatusOr<v1::SubmitJobResponse> r) {
    p.set_value(std::move(r));
  });
  return fut.get();
}

absl::StatusOr<JobRecord> JobManager::Load(const Identity& caller, const std::string& id) {
  std::optional<JobRecord> r;
  if (store_ == nullptr) {
    std::lock_guard lock(mem_mu_);
    auto it = mem_.find(id);
    if (it != mem_.end()) r = it->second;
  } else {
    auto got = store_->Get(id);
    if (!got.ok()) return got.status();
    r = *got;
  }
  // Another tenant's job is reported as absent, not as forbidden.
  if (!r || (caller.role == Role::kUser && r->tenant != caller.tenant)) {
    return absl::NotFoundError(StrCat("no job \"", id, "\""));
  }
  return *r;
}

absl::StatusOr<v1::GetJobResponse> JobManager::Get(const Identity& caller,
                                                   const v1::GetJobRequest& req) {
  auto r = Load(caller, req.id());
  if (!r.ok()) return r.status();
  v1::GetJobResponse resp;
  *resp.mutable_job() = ToProto(*r, true);
  return resp;
}

absl::StatusOr<v1::ListJobsResponse> JobManager::List(const Identity& caller,
                                                      const v1::ListJobsRequest& req) {
  if (store_ == nullptr) return absl::UnimplementedError("no store in the benchmark baseline");
  const int limit = req.page_size() == 0 ? 100 : static_cast<int>(std::min(req.page_size(), 1000u));
  const std::string tenant = caller.role == Role::kUser ? caller.tenant : "";
  auto rows = store_->List(tenant, req.state(), req.page_token(), limit + 1);
  if (!rows.ok()) return rows.status();
  v1::ListJobsResponse resp;
  for (int i = 0; i < static_cast<int>(rows->size()) && i < limit; ++i) {
    *resp.add_jobs() = ToProto((*rows)[i], false);
  }
  if (static_cast<int>(rows->size()) > limit) resp.set_next_page_token((*rows)[limit - 1].id);
  return resp;
}

absl::StatusOr<v1::LogsResponse> JobManager::Logs(const Identity& caller,
                                                  const v1::LogsRequest& req) {
  auto r = Load(caller, req.id());
  if (!r.ok()) return r.status();
  if (coordinator_ == nullptr) return absl::UnavailableError("no coordinator");
  auto log = coordinator_->ReadLog(*r, req.rank());
  if (!log.ok()) return log.status();
  v1::LogsResponse resp;
  resp.set_content(log->content());
  resp.set_truncated(log->truncated());
  resp.set_state(r->state);
  return resp;
}

absl::Status JobManager::Watch(const Identity& caller, const std::string& id,
                               const std::function<bool(const v1::Job&)>& emit,
                               const std::function<bool()>& cancelled) {
  std::string last;
  v1::GetJobRequest get;
  get.set_id(id);
  while (!cancelled()) {
    auto got = Get(caller, get);
    if (!got.ok()) return got.status();
    const auto& j = got->job();
    const std::string key = StrCat(j.state(), "|", j.attempt(), "|", j.reason());
    if (key != last) {
      if (!emit(j)) return absl::CancelledError("client went away");
      last = key;
    }
    if (Terminal(j.state())) return absl::OkStatus();
    std::this_thread::sleep_for(kStreamPoll);
  }
  return absl::CancelledError("cancelled");
}

absl::Status JobManager::StreamLogs(const Identity& caller, const v1::LogsRequest& req,
                                    const std::function<bool(const v1::LogsResponse&)>& emit,
                                    const std::function<bool()>& cancelled) {
  size_t sent = 0;
  while (!cancelled()) {
    auto log = Logs(caller, req);
    if (!log.ok()) {
      // Before the rank has started there is no log yet: keep waiting.
      if (!req.follow() || !absl::IsNotFound(log.status())) return log.status();
      auto job = Load(caller, req.id());
      if (!job.ok()) return job.status();
      if (Terminal(job->state)) return log.status();
      std::this_thread::sleep_for(kStreamPoll);
      continue;
    }
    const std::string& all = log->content();
    if (all.size() < sent) sent = 0;  // a new attempt started a new log
    if (all.size() > sent) {
      v1::LogsResponse chunk;
      chunk.set_content(all.substr(sent));
      chunk.set_truncated(log->truncated());
      chunk.set_state(log->state());
      if (!emit(chunk)) return absl::CancelledError("client went away");
      sent = all.size();
    }
    if (!req.follow() || Terminal(log->state())) return absl::OkStatus();
    std::this_thread::sleep_for(kStreamPoll);
  }
  return absl::CancelledError("cancelled");
}

absl::StatusOr<v1::CancelJobResponse> JobManager::Cancel(const Identity& caller,
                                                         const v1::CancelJobRequest& req) {
  auto r = Load(caller, req.id());
  if (!r.ok()) return r.status();
  if (Terminal(r->state)) {
    return absl::FailedPreconditionError(
        StrCat("job ", r->id, " already ended (", r->state, ")"));
  }
  const std::string reason = StrCat("cancelled by ", caller.ToUri());
  const int64_t now = core_->clock()->NowMs();
  if (store_ != nullptr) {
    if (auto st = store_->Update(r->id, "CANCELLED", reason, now); !st.ok()) return st;
  }
  r->state = "CANCELLED";
  r->reason = reason;
  r->updated_at_unix_ms = now;
  // Stops every slice everywhere (their leases would stop them anyway).
  if (coordinator_ != nullptr) coordinator_->AbortRun(*r, reason);
  spdlog::info("job {} {}", r->id, reason);
  v1::CancelJobResponse resp;
  *resp.mutable_job() = ToProto(*r, false);
  return resp;
}

}  // namespace fedgate::gateway
