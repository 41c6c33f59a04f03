// The job service's handlers (tenants): plan, get, usage, submit, and the
// watch and logs streams.
#include "gateway/api/services.h"

#include <chrono>
#include <thread>

#include "absl/strings/ascii.h"
#include "gateway/ops/audit_log.h"

#include "gateway/api/rpc_guard.h"
#include "gateway/security/authz.h"
#include "gateway/peering/bench_host.h"
#include "base/str_cat.h"
#include "gateway/peering/core.h"
#include "gateway/jobs/job_manager.h"
#include "gateway/api/job_streams.h"
#include "gateway/ops/metrics.h"
#include "gateway/jobs/checkpoint_sync.h"
#include "gateway/jobs/participant.h"
#include "gateway/peering/prober.h"

namespace fedgate::gateway {

grpc::ServerUnaryReactor* JobServiceImpl::Plan(grpc::CallbackServerContext* ctx,
                                               const v1::PlanRequest* req,
                                               v1::PlanResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kJob, "Plan", [&](const Identity&) {
    auto out = core_->Plan(req->spec());
    if (out.ok()) *resp = std::move(*out);
    return out.status();
  });
}

#define FEDGATE_JOB_RPC(Method, Req, Resp)                                              \
  grpc::ServerUnaryReactor* JobServiceImpl::Method(grpc::CallbackServerContext* ctx,      \
                                                   const v1::Req* req, v1::Resp* resp) {  \
    return Guarded(ctx, authz_, metrics_, RpcClass::kJob, #Method,                        \
                   [&](const Identity& id) {                                              \
                     auto out = jobs_->Method(id, *req);                                  \
                     if (out.ok()) *resp = std::move(*out);                               \
                     return out.status();                                                 \
                   });                                                                    \
  }

FEDGATE_JOB_RPC(List, ListJobsRequest, ListJobsResponse)
FEDGATE_JOB_RPC(Cancel, CancelJobRequest, CancelJobResponse)
FEDGATE_JOB_RPC(Quotas, QuotasRequest, QuotasResponse)
FEDGATE_JOB_RPC(Events, JobEventsRequest, JobEventsResponse)
FEDGATE_JOB_RPC(ListServices, ListServicesRequest, ListServicesResponse)
FEDGATE_JOB_RPC(ScaleService, ScaleServiceRequest, ScaleServiceResponse)
FEDGATE_JOB_RPC(ServiceToken, ServiceTokenRequest, ServiceTokenResponse)
#undef FEDGATE_JOB_RPC

grpc::ServerUnaryReactor* JobServiceImpl::Get(grpc::CallbackServerContext* ctx,
                                              const v1::GetJobRequest* req,
                                              v1::GetJobResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kJob, "Get", [&](const Identity& id) {
    auto out = jobs_->Get(id, *req);
    if (!out.ok()) return out.status();
    *resp = std::move(*out);
    // A job coordinated elsewhere (a copy kept here, or moved away): where
    // its coordinator is, so that fedctl asks it (when it is not down).
    const std::string& coordinator = resp->job().coordinator();
    if (core_->FollowsTo(coordinator)) {
      if (const std::string at = core_->SiteEndpoint(coordinator); !at.empty()) {
        ctx->AddTrailingMetadata("fedgate-coordinator", coordinator);
        ctx->AddTrailingMetadata("fedgate-coordinator-endpoint", at);
      }
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* JobServiceImpl::Usage(grpc::CallbackServerContext* ctx,
                                                const v1::UsageRequest* req,
                                                v1::UsageResponse* resp) {
  // Gathering usage asks every site, this one too, and waits for their
  // answers, whose callbacks need gRPC's callback threads: waiting on one
  // of them deadlocked two concurrent calls (the console asks by tenant and
  // by site at once). So the wait runs on a thread of its own.
  // At most kMaxUsageInFlight such threads: callers past that are told to retry.
  auto* reactor = ctx->DefaultReactor();
  if (usage_in_flight_.fetch_add(1) >= kMaxUsageInFlight) {
    usage_in_flight_.fetch_sub(1);
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 "too many usage queries at once at this gateway; retry shortly"));
    return reactor;
  }
  std::thread([this, ctx, req, resp, reactor] {
    const absl::Status st = RunGuarded(*ctx->auth_context(), authz_, metrics_, RpcClass::kJob,
                                       "Usage", [&](const Identity& id) {
                                         auto out = jobs_->Usage(id, *req);
                                         if (out.ok()) *resp = std::move(*out);
                                         return out.status();
                                       });
    usage_in_flight_.fetch_sub(1);
    reactor->Finish(ToGrpc(st));
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::Submit(grpc::CallbackServerContext* ctx,
                                                 const v1::SubmitJobRequest* req,
                                                 v1::SubmitJobResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  auto caller = authz_->Authorize(*ctx->auth_context(), RpcClass::kJob, "Submit");
  if (!caller.ok()) {
    reactor->Finish(ToGrpc(caller.status()));
    return reactor;
  }
  metrics_->Inc("fedgate_job_rpc_handled_total", {{"method", "Submit"}});
  // Finished from the store's writer thread once the row is durable, so
  // concurrent submits share transactions instead of holding gRPC threads.
  jobs_->SubmitAsync(*caller, *req,
                     [reactor, resp, m = metrics_, t0 = std::chrono::steady_clock::now()](
                         absl::StatusOr<v1::SubmitJobResponse> out) {
                       ObserveRpc(m, "Submit", out.status(), t0);
                       if (out.ok()) *resp = std::move(*out);
                       reactor->Finish(ToGrpc(out.status()));
                     });
  return reactor;
}

namespace {
// A stream refused before it starts.
template <typename T>
grpc::ServerWriteReactor<T>* Refused(const absl::Status& st) {
  class Done final : public grpc::ServerWriteReactor<T> {
   public:
    explicit Done(const absl::Status& st) { this->Finish(ToGrpc(st)); }
    void OnDone() override { delete this; }
  };
  return new Done(st);
}
}  // namespace

grpc::ServerWriteReactor<v1::Job>* JobServiceImpl::Watch(grpc::CallbackServerContext* ctx,
                                                         const v1::WatchJobRequest* req) {
  auto caller = authz_->Authorize(*ctx->auth_context(), RpcClass::kJob, "Watch");
  if (!caller.ok()) return Refused<v1::Job>(caller.status());
  metrics_->Inc("fedgate_job_rpc_handled_total", {{"method", "Watch"}});
  return NewWatchReactor(jobs_, *caller, *req);
}

grpc::ServerWriteReactor<v1::LogsResponse>* JobServiceImpl::Logs(grpc::CallbackServerContext* ctx,
                                                                 const v1::LogsRequest* req) {
  auto caller = authz_->Authorize(*ctx->auth_context(), RpcClass::kJob, "Logs");
  if (!caller.ok()) return Refused<v1::LogsResponse>(caller.status());
  metrics_->Inc("fedgate_job_rpc_handled_total", {{"method", "Logs"}});
  return NewLogsReactor(jobs_, *caller, *req);
}

}  // namespace fedgate::gateway
