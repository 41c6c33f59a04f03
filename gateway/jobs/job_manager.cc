#include "gateway/jobs/job_manager.h"
#include "federation/service_spec.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "federation/duration.h"

#include <spdlog/spdlog.h>

#include <future>

#include "federation/job_spec.h"
#include "federation/names.h"
#include "base/str_cat.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/job_copy.h"
#include "gateway/jobs/job_story.h"
#include "gateway/peering/core.h"

namespace fedgate::gateway {

namespace {
using federation::JobState;
// How often a following Logs stream looks for appended bytes.
constexpr int64_t kLogPollMs = 300;
}  // namespace

JobManager::JobManager(GatewayCore* core, JobStore* store)
    : core_(core), store_(store), events_(std::make_unique<JobEvents>(kLogPollMs)) {
  events_->Start();
}

JobManager::~JobManager() { events_->Stop(); }

v1::Job JobManager::ToProto(const JobRecord& r, bool with_plan) {
  v1::Job j = JobOf(r, core_->config().site);
  if (with_plan && r.state == JobState::kPending) {
    std::string note;
    auto plan = core_->PlanForJobs(r.spec, &note);
    if (plan.ok()) {
      *j.mutable_placement() = *plan;
      if (r.reason.empty()) {
        j.set_reason(plan->placeable() ? StrCat("queued; placeable now (", plan->summary(), ")")
                                       : StrCat("waiting for capacity: ", plan->summary(), note));
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
  if (!req.spec().service().empty()) {
    done(absl::InvalidArgumentError(
        "service: set by the coordinator on the replicas it starts; leave it out of a spec"));
    return;
  }
  if (federation::IsService(req.spec())) {
    if (auto st = CheckServiceName(caller.tenant, req.spec().name()); !st.ok()) {
      done(st);
      return;
    }
  }
  SubmitUnchecked(caller, req, std::move(done));
}

absl::Status JobManager::CheckServiceName(const std::string& tenant, const std::string& name) {
  if (!federation::IsValidName(name)) {
    return absl::InvalidArgumentError(StrCat(
        "a service's name is its URL (/v1/services/NAME/): 1 to 63 of [a-z0-9-], got \"",
        name.substr(0, 63), "\""));
  }
  if (store_ == nullptr) return absl::OkStatus();
  auto active = store_->ListAllActive();
  if (!active.ok()) return active.status();
  for (const auto& j : *active) {
    if (j.tenant == tenant && federation::IsService(j.spec) && j.spec.name() == name) {
      return absl::AlreadyExistsError(
          StrCat("tenant ", tenant, " already runs service \"", name, "\" (job ", j.id, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> JobManager::SubmitReplica(const std::string& tenant, const v1::JobSpec& spec) {
  Identity as;
  as.role = Role::kUser;
  as.tenant = tenant;
  as.name = "service-controller";
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  std::promise<absl::StatusOr<v1::SubmitJobResponse>> p;
  auto fut = p.get_future();
  SubmitUnchecked(as, req, [&p](absl::StatusOr<v1::SubmitJobResponse> r) { p.set_value(std::move(r)); });
  auto out = fut.get();
  if (!out.ok()) return out.status();
  return Load(as, out->job().id());
}

void JobManager::SubmitUnchecked(const Identity& caller, const v1::SubmitJobRequest& req,
                                 std::function<void(absl::StatusOr<v1::SubmitJobResponse>)> done) {
  // Validate against the federation's models before anything is stored;
  // the first reason is the placement on the sites this one may use.
  std::string note;
  auto plan = core_->PlanForJobs(req.spec(), &note);
  if (!plan.ok()) {
    done(plan.status());
    return;
  }
  JobRecord r;
  r.id = NewJobId();
  r.tenant = caller.tenant;
  r.idempotency_key = req.idempotency_key();
  r.spec = federation::WithDefaults(req.spec());
  r.state = JobState::kPending;
  r.reason = plan->placeable() ? plan->summary()
                               : StrCat("waiting for capacity: ", plan->summary(), note);
  if (federation::IsService(r.spec)) {
    r.reason = StrCat("starting ", r.spec.replicas().desired(), " replica(s)");
  }
  r.created_at_unix_ms = r.updated_at_unix_ms = core_->clock()->NowMs();
  r.new_events.push_back(StoryEvent(r.created_at_unix_ms, "submitted", core_->config().site,
                                    StrCat("by ", caller.ToUri(), "; ", r.reason)));
  if (coordinator_ != nullptr) coordinator_->NameQueueWitnesses(&r);
  auto answer = [this, done](absl::StatusOr<SubmitOutcome> out) {
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
  // A new job is acknowledged once the witnesses of its queued record keep
  // it (a majority of its members), or every one of them answered.
  auto reply = [this, answer](absl::StatusOr<SubmitOutcome> out) {
    if (!out.ok() || !out->created || coordinator_ == nullptr) {
      answer(std::move(out));
      return;
    }
    auto kept = std::make_shared<SubmitOutcome>(*std::move(out));
    coordinator_->TellQueueWitnesses(kept->job, [answer, kept] { answer(std::move(*kept)); });
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
  if (!federation::IsValidJobId(id)) {
    return absl::InvalidArgumentError(
        StrCat("malformed job id \"", id.substr(0, 40), "\" (want j- and 16 hex digits)"));
  }
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
  v1::GetJobResponse resp;
  if (absl::IsNotFound(r.status()) && read_copy_) {
    // A job coordinated elsewhere that runs here: this site's copy of its
    // record, which names the coordinator (its own view is fresher).
    auto copy = read_copy_(req.id());
    if (copy.ok() && copy->has_value() &&
        (caller.role != Role::kUser || (*copy)->tenant() == caller.tenant)) {
      *resp.mutable_job() = std::move(**copy);
      resp.mutable_job()->set_reason(StrCat("as ", core_->config().site, "'s copy of the job's record has it (",
                                            resp.job().coordinator(), " coordinates): ",
                                            resp.job().reason()));
      return resp;
    }
  }
  if (!r.ok()) return r.status();
  *resp.mutable_job() = ToProto(*r, true);
  return resp;
}

absl::StatusOr<v1::ListJobsResponse> JobManager::List(const Identity& caller,
                                                      const v1::ListJobsRequest& req) {
  if (store_ == nullptr) return absl::UnimplementedError("no store in the benchmark baseline");
  const int limit = req.page_size() == 0 ? 100 : static_cast<int>(std::min(req.page_size(), 1000u));
  const std::string tenant = caller.role == Role::kUser ? caller.tenant : "";
  std::string state;  // the store's name of it; empty = every state
  if (req.state() != v1::Job::STATE_UNSPECIFIED) {
    auto s = federation::FromProto(req.state());
    if (!s) return absl::InvalidArgumentError(StrCat("unknown job state ", req.state()));
    state = std::string(federation::JobStateName(*s));
  }
  auto rows = store_->List(tenant, state, req.page_token(), limit + 1);
  if (!rows.ok()) return rows.status();
  v1::ListJobsResponse resp;
  if (static_cast<int>(rows->size()) > limit) resp.set_next_page_token((*rows)[limit - 1].id);
  // Each row goes once converted: a page of 1000 jobs is not held twice.
  for (int i = 0; i < static_cast<int>(rows->size()) && i < limit; ++i) {
    *resp.add_jobs() = ToProto((*rows)[i], false);
    (*rows)[i] = JobRecord();
  }
  return resp;
}

absl::StatusOr<v1::JobEventsResponse> JobManager::Events(const Identity& caller,
                                                         const v1::JobEventsRequest& req) {
  auto r = Load(caller, req.id());
  if (!r.ok()) return r.status();
  if (store_ == nullptr) return absl::UnimplementedError("no store in the benchmark baseline");
  auto events = store_->Events(r->id, req.after_seq(), 10000);
  if (!events.ok()) return events.status();
  v1::JobEventsResponse resp;
  for (const auto& e : *events) *resp.add_events() = gateway::ToProto(e);
  return resp;
}

absl::StatusOr<v1::LogsResponse> JobManager::Logs(const Identity& caller,
                                                  const v1::LogsRequest& req) {
  auto r = Load(caller, req.id());
  if (!r.ok()) return r.status();
  std::promise<absl::StatusOr<v1::LogsResponse>> p;
  auto f = p.get_future();
  ReadLogAsync(*r, req, [&p](absl::StatusOr<v1::LogsResponse> out) { p.set_value(std::move(out)); });
  return f.get();
}

absl::Status JobManager::OpenStream(const Identity& caller) {
  const int cap = core_->config().api.max_streams_per_caller;
  std::lock_guard lock(streams_mu_);
  int& open = streams_[caller.ToUri()];
  if (open >= cap) {
    if (open == 0) streams_.erase(caller.ToUri());
    return absl::ResourceExhaustedError(
        StrCat(caller.ToUri(), " already has ", cap,
               " Watch/Logs stream(s) open (api.max_streams_per_caller)"));
  }
  ++open;
  return absl::OkStatus();
}

void JobManager::CloseStream(const Identity& caller) {
  std::lock_guard lock(streams_mu_);
  auto it = streams_.find(caller.ToUri());
  if (it != streams_.end() && --it->second <= 0) streams_.erase(it);
}

void JobManager::ReadLogAsync(const JobRecord& job, const v1::LogsRequest& req,
                              std::function<void(absl::StatusOr<v1::LogsResponse>)> done) {
  if (coordinator_ == nullptr) {
    done(absl::UnavailableError("no coordinator"));
    return;
  }
  v1::ReadLogRequest ask;
  ask.set_rank(req.rank());
  ask.set_offset(req.offset());
  const v1::Job::State state = federation::ToProto(job.state);
  coordinator_->ReadLogAsync(
      job, ask, [state, done = std::move(done)](absl::StatusOr<v1::ReadLogResponse> log) {
        if (!log.ok()) {
          done(log.status());
          return;
        }
        v1::LogsResponse resp;
        resp.set_content(std::move(*log->mutable_content()));
        resp.set_offset(log->offset());
        resp.set_state(state);
        done(std::move(resp));
      });
}

absl::StatusOr<v1::CancelJobResponse> JobManager::Cancel(const Identity& caller,
                                                         const v1::CancelJobRequest& req) {
  const std::string reason = StrCat("cancelled by ", caller.ToUri());
  // A compare-and-set: if the coordinator moved the job since it was read,
  // read it again and cancel what it is now. Once this write lands, the
  // coordinator's own writes of the job fail and it starts no rank.
  for (int tries = 0;; ++tries) {
    auto r = Load(caller, req.id());
    if (!r.ok()) return r.status();
    if (federation::IsTerminal(r->state)) {
      return absl::FailedPreconditionError(
          StrCat("job ", r->id, " already ended (", federation::JobStateName(r->state), ")"));
    }
    if (!r->moved_to.empty()) {
      // Taken over: only its coordinator at the current term can stop it.
      return absl::FailedPreconditionError(StrCat("job ", r->id, " is coordinated by ",
                                                  r->moved_to, " since term ", r->term,
                                                  ": cancel it at ", r->moved_to));
    }
    JobRecord next = *r;
    next.state = JobState::kCancelled;
    next.reason = reason;
    next.updated_at_unix_ms = core_->clock()->NowMs();
    next.new_events.push_back(
        StoryEvent(next.updated_at_unix_ms, "finished", "", StrCat("CANCELLED: ", reason)));
    if (store_ == nullptr) {
      {
        std::lock_guard lock(mem_mu_);
        mem_[next.id] = next;
      }
      events_->Notify(next.id);
    } else if (auto st = store_->Save(&next, federation::JobActor::kCaller); !st.ok()) {
      if (absl::IsAborted(st) && tries < 50) continue;
      return st;
    }
    // Stops every slice everywhere (their leases would stop them anyway).
    if (coordinator_ != nullptr) coordinator_->StopRun(next, reason);
    spdlog::info("job {} {}", next.id, reason);
    v1::CancelJobResponse resp;
    *resp.mutable_job() = ToProto(next, false);
    return resp;
  }
}

namespace {

std::string Rfc3339(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

// RFC 3339, or a duration back from `now` ("24h"); `fallback` when empty.
absl::StatusOr<int64_t> ParseWhen(const std::string& text, const char* flag, int64_t now_ms,
                                  int64_t fallback) {
  if (text.empty()) return fallback;
  if (auto d = federation::ParseDurationMs(text); d.ok()) return now_ms - *d;
  absl::Time t;
  std::string err;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return absl::ToUnixMillis(t);
  return absl::InvalidArgumentError(
      StrCat(flag, " \"", text.substr(0, 64), "\" is neither RFC 3339 nor a duration like 24h"));
}

// The tenant a caller may ask about: a tenant's user only its own (the
// default for them); an admin any, or all ("").
absl::StatusOr<std::string> TenantInScope(const Identity& caller, const std::string& asked,
                                          const char* what) {
  if (caller.role != Role::kUser) return asked;
  if (!asked.empty() && asked != caller.tenant) {
    return absl::PermissionDeniedError(
        StrCat("tenant ", caller.tenant, " may only see its own ", what, ", not ", asked, "'s"));
  }
  return caller.tenant;
}

}  // namespace

absl::StatusOr<v1::QuotasResponse> JobManager::Quotas(const Identity& caller,
                                                      const v1::QuotasRequest& req) {
  auto scope = TenantInScope(caller, req.tenant(), "quota");
  if (!scope.ok()) return scope.status();
  const std::string tenant = *scope;
  v1::QuotasResponse out;
  for (auto& q : core_->Quotas()) {
    if (tenant.empty() || q.tenant() == tenant) *out.add_quotas() = std::move(q);
  }
  // A named tenant that no site governs is NOT_FOUND; a list (a tenant's
  // own, asked without a name) is empty instead, as a list of nothing is.
  if (!req.tenant().empty() && out.quotas_size() == 0) {
    return absl::NotFoundError(StrCat("no site governs tenant ", tenant, ": it has no quota limit"));
  }
  return out;
}

absl::StatusOr<v1::UsageResponse> JobManager::Usage(const Identity& caller,
                                                    const v1::UsageRequest& req) {
  auto scope = TenantInScope(caller, req.tenant(), "usage");
  if (!scope.ok()) return scope.status();
  const std::string tenant = *scope;
  const int64_t now = core_->clock()->NowMs();
  auto since = ParseWhen(req.since(), "--since", now, 0);
  if (!since.ok()) return since.status();
  auto until = ParseWhen(req.until(), "--until", now, now);
  if (!until.ok()) return until.status();
  if (!gather_usage_) return absl::UnavailableError("usage is not kept by this gateway");
  GatheredUsage g = gather_usage_(*since, *until, tenant);
  const std::string by = req.by().empty() ? "tenant" : req.by();
  auto rows = federation::AggregateUsage(g.records, *since, *until, now, by, pricing_);
  if (!rows.ok()) return rows.status();
  v1::UsageResponse out;
  out.set_since(Rfc3339(*since));
  out.set_until(Rfc3339(*until));
  for (const auto& r : *rows) {
    auto* row = out.add_usage();
    if (by == "tenant") row->set_tenant(r.key);
    if (by == "site") row->set_site(r.key);
    if (by == "model") row->set_model(r.key);
    row->set_gpu_seconds(r.gpu_seconds);
    row->set_cost(r.cost);
  }
  for (auto& u : g.unreachable) out.add_unreachable_sites(std::move(u));
  return out;
}

}  // namespace fedgate::gateway
