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
namespace {

}  // namespace

grpc::ServerUnaryReactor* PeerServiceImpl::Handshake(grpc::CallbackServerContext* ctx,
                                                     const v1::HandshakeRequest* req,
                                                     v1::HandshakeResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kPeer, "Handshake", [&](const Identity& id) {
    auto out = core_->Handshake(id, *req);
    if (out.ok()) *resp = std::move(*out);
    return out.status();
  });
}

grpc::ServerUnaryReactor* PeerServiceImpl::Advertise(grpc::CallbackServerContext* ctx,
                                                     const v1::AdvertiseRequest* req,
                                                     v1::AdvertiseResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kPeer, "Advertise", [&](const Identity& id) {
    auto out = core_->Advertise(id, *req);
    if (out.ok()) *resp = std::move(*out);
    return out.status();
  });
}

grpc::ServerUnaryReactor* PeerServiceImpl::OpenBench(grpc::CallbackServerContext* ctx,
                                                     const v1::OpenBenchRequest* req,
                                                     v1::OpenBenchResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kPeer, "OpenBench", [&](const Identity& id) {
    if (req->site() != id.site) {
      return absl::InvalidArgumentError(StrCat("request names site \"", req->site(),
                                               "\" but the certificate is of \"", id.site,
                                               "\""));
    }
    auto out = bench_->Open(id.site, *req);
    if (out.ok()) *resp = std::move(*out);
    return out.status();
  });
}

// Peer calls that name their site must come from that site's gateway.
absl::Status SameSite(const std::string& named, const Identity& id) {
  if (named == id.site) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("request names site \"", named,
                                           "\" but the certificate is of \"", id.site, "\""));
}

// The participant's calls: `from` is the caller's site as its certificate
// says; the participant refuses any site but the job's coordinator.
#define FEDGATE_PARTICIPANT_RPC(Method, Call, Req, Resp)                                     \
  grpc::ServerUnaryReactor* PeerServiceImpl::Method(grpc::CallbackServerContext* ctx,       \
                                                    const v1::Req* req, v1::Resp* resp) {   \
    return Guarded(ctx, authz_, metrics_, RpcClass::kReservation, #Method,                  \
                   [&](const Identity& id) {                                                \
      if (auto st = SameSite(req->site(), id); !st.ok()) return st;                          \
      auto out = participant_->Call(id.site, *req);                                          \
      if (out.ok()) *resp = std::move(*out);                                                 \
      return out.status();                                                                   \
    });                                                                                      \
  }

FEDGATE_PARTICIPANT_RPC(Prepare, Prepare, PrepareRequest, PrepareResponse)
FEDGATE_PARTICIPANT_RPC(Commit, Commit, CommitRequest, CommitResponse)
FEDGATE_PARTICIPANT_RPC(Abort, Abort, AbortRequest, AbortResponse)
FEDGATE_PARTICIPANT_RPC(SliceStatus, Status, SliceStatusRequest, SliceStatusResponse)
FEDGATE_PARTICIPANT_RPC(ReadLog, ReadLog, ReadLogRequest, ReadLogResponse)
FEDGATE_PARTICIPANT_RPC(ListUsage, ListUsage, ListUsageRequest, ListUsageResponse)
// A takeover's vote: the candidate is the caller, as its certificate says.
FEDGATE_PARTICIPANT_RPC(RequestVote, Vote, VoteRequest, VoteResponse)
#undef FEDGATE_PARTICIPANT_RPC

namespace {

// One PushCheckpoint stream: each chunk goes to the receiving copy as it
// arrives; the end of the stream checks and publishes the step.
class CheckpointReader final : public grpc::ServerReadReactor<v1::CheckpointChunk> {
 public:
  CheckpointReader(std::unique_ptr<CheckpointSync::Incoming> in, absl::Status refused,
                   v1::PushCheckpointResponse* resp)
      : in_(std::move(in)), resp_(resp) {
    if (!refused.ok()) {
      Finish(ToGrpc(refused));
      return;
    }
    StartRead(&chunk_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the sender is done (or gone)
      auto r = in_->Finish();
      if (r.ok()) *resp_ = *r;
      Finish(ToGrpc(r.status()));
      return;
    }
    if (auto st = in_->Add(chunk_); !st.ok()) {
      Finish(ToGrpc(st));
      return;
    }
    StartRead(&chunk_);
  }
  void OnDone() override { delete this; }

 private:
  std::unique_ptr<CheckpointSync::Incoming> in_;
  v1::PushCheckpointResponse* resp_;
  v1::CheckpointChunk chunk_;
};

}  // namespace

grpc::ServerReadReactor<v1::CheckpointChunk>* PeerServiceImpl::PushCheckpoint(
    grpc::CallbackServerContext* ctx, v1::PushCheckpointResponse* resp) {
  auto caller = authz_->Authorize(*ctx->auth_context(), RpcClass::kReservation, "PushCheckpoint");
  if (caller.ok()) {
    metrics_->Inc("fedgate_peer_rpc_handled_total", {{"method", "PushCheckpoint"}});
  }
  absl::Status refused = caller.status();
  if (refused.ok() && checkpoints_ == nullptr) {
    refused = absl::UnimplementedError("this gateway copies no checkpoints");
  }
  return new CheckpointReader(refused.ok() ? checkpoints_->Receive(caller->site) : nullptr,
                              refused, resp);
}

grpc::ServerUnaryReactor* PeerServiceImpl::CheckpointProgress(
    grpc::CallbackServerContext* ctx, const v1::CheckpointProgressRequest* req,
    v1::CheckpointProgressResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kReservation, "CheckpointProgress",
                 [&](const Identity& id) {
                   if (auto st = SameSite(req->site(), id); !st.ok()) return st;
                   if (checkpoints_ == nullptr) {
                     return absl::UnimplementedError("this gateway copies no checkpoints");
                   }
                   auto out = checkpoints_->Progress(id.site, *req);
                   if (out.ok()) *resp = std::move(*out);
                   return out.status();
                 });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListPeers(grpc::CallbackServerContext* ctx,
                                                      const v1::ListPeersRequest*,
                                                      v1::ListPeersResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kAdmin, "ListPeers", [&](const Identity&) {
    *resp = core_->ListPeers();
    return absl::OkStatus();
  });
}

namespace {

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

grpc::ServerUnaryReactor* AdminServiceImpl::AddPeer(grpc::CallbackServerContext* ctx,
                                                    const v1::AddPeerRequest* req,
                                                    v1::AddPeerResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kAdmin, "AddPeer", [&](const Identity& id) {
    auto out = core_->AddPeer(req->site(), req->endpoint());
    if (out.ok()) *resp->mutable_peer() = std::move(*out);
    if (audit_ != nullptr) {
      audit_->Record(id.ToUri(), "peers.add", {{"site", req->site()}, {"endpoint", req->endpoint()}},
                     out.status(), WallMs());
    }
    return out.status();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::RemovePeer(grpc::CallbackServerContext* ctx,
                                                       const v1::RemovePeerRequest* req,
                                                       v1::RemovePeerResponse*) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kAdmin, "RemovePeer", [&](const Identity& id) {
    auto st = core_->RemovePeer(req->site());
    if (audit_ != nullptr) audit_->Record(id.ToUri(), "peers.remove", {{"site", req->site()}}, st, WallMs());
    return st;
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListNodes(grpc::CallbackServerContext* ctx,
                                                      const v1::ListNodesRequest*,
                                                      v1::ListNodesResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kAdmin, "ListNodes", [&](const Identity&) {
    for (auto& n : participant_->Nodes()) *resp->add_nodes() = std::move(n);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::CordonNode(grpc::CallbackServerContext* ctx,
                                                       const v1::CordonNodeRequest* req,
                                                       v1::CordonNodeResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kAdmin, "CordonNode", [&](const Identity& id) {
    const auto action = req->action();
    absl::Status st;
    if (action == v1::CordonNodeRequest::ACTION_UNSPECIFIED ||
        !v1::CordonNodeRequest::Action_IsValid(action)) {
      st = absl::InvalidArgumentError("action must be CORDON, UNCORDON or DRAIN");
    } else if (req->preempt() && action != v1::CordonNodeRequest::DRAIN) {
      st = absl::InvalidArgumentError("preempt applies to DRAIN only");
    } else {
      auto v = participant_->SetCordoned(req->node(), action != v1::CordonNodeRequest::UNCORDON);
      st = v.status();
      if (v.ok()) *resp->mutable_node() = *v;
      if (st.ok() && action == v1::CordonNodeRequest::DRAIN && req->preempt()) {
        auto n = participant_->StopSlicesOn(
            req->node(), StrCat("node ", req->node(), " drained by ", id.ToUri()));
        st = n.status();
        if (n.ok()) resp->set_stopped_slices(*n);
      }
    }
    if (audit_ != nullptr) {
      audit_->Record(id.ToUri(), StrCat("nodes.", absl::AsciiStrToLower(v1::CordonNodeRequest::Action_Name(action))),
                     {{"node", req->node()}, {"preempt", req->preempt() ? "true" : "false"}}, st,
                     WallMs());
    }
    return st;
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetQuota(grpc::CallbackServerContext* ctx,
                                                     const v1::SetQuotaRequest* req,
                                                     v1::SetQuotaResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kAdmin, "SetQuota", [&](const Identity& id) {
    absl::Status st;
    // One home per tenant: another site's claim is refused here, not
    // discovered later as a conflict.
    auto home = core_->HomeOf(req->tenant());
    if (home && home->site != core_->config().site) {
      st = absl::FailedPreconditionError(StrCat("tenant ", req->tenant(), " is governed by site ",
                                                home->site, "; set its quota there"));
    } else {
      federation::TenantQuota q{req->tenant(), req->gpus(),
                                {req->models().begin(), req->models().end()}, req->borrow(),
                                req->weight() > 0 ? req->weight() : 1};
      if (req->weight() == 0 && home) q.weight = home->quota.weight() > 0 ? home->quota.weight() : 1;
      auto v = participant_->SetQuota(q);
      st = v.status();
      if (v.ok()) *resp->mutable_quota() = *v;
    }
    if (audit_ != nullptr) {
      std::string models;
      for (const auto& [m, g] : req->models()) models += StrCat(models.empty() ? "" : ",", m, "=", g);
      audit_->Record(id.ToUri(), "quota.set",
                     {{"tenant", req->tenant()}, {"gpus", std::to_string(req->gpus())},
                      {"borrow", std::to_string(req->borrow())}, {"models", models}},
                     st, WallMs());
    }
    return st;
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetCapacity(grpc::CallbackServerContext* ctx,
                                                        const v1::GetCapacityRequest*,
                                                        v1::GetCapacityResponse* resp) {
  // Tenants read capacity too (counts per site and model, no node names).
  return Guarded(ctx, authz_, metrics_, RpcClass::kJob, "GetCapacity", [&](const Identity&) {
    *resp = core_->Capacity();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListLinks(grpc::CallbackServerContext* ctx,
                                                      const v1::ListLinksRequest*,
                                                      v1::ListLinksResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kJob, "ListLinks", [&](const Identity&) {
    *resp = core_->ListLinks();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListDatasets(grpc::CallbackServerContext* ctx,
                                                         const v1::ListDatasetsRequest*,
                                                         v1::ListDatasetsResponse* resp) {
  return Guarded(ctx, authz_, metrics_, RpcClass::kJob, "ListDatasets", [&](const Identity&) {
    *resp = core_->ListDatasets();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ProbeLink(grpc::CallbackServerContext* ctx,
                                                      const v1::ProbeLinkRequest* req,
                                                      v1::ProbeLinkResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  auto caller = authz_->Authorize(*ctx->auth_context(), RpcClass::kAdmin, "ProbeLink");
  if (!caller.ok()) {
    reactor->Finish(ToGrpc(caller.status()));
    return reactor;
  }
  metrics_->Inc("fedgate_admin_rpc_handled_total", {{"method", "ProbeLink"}});
  if (!core_->IsApprovedPeer(req->site())) {
    reactor->Finish(ToGrpc(absl::NotFoundError(
        StrCat("\"", req->site(), "\" is not an approved peer of this site"))));
    return reactor;
  }
  // A probe takes seconds: finish the call from the prober's thread instead
  // of holding a gRPC thread.
  prober_->ProbeAsync(req->site(), [this, reactor, resp](const absl::StatusOr<v1::Link>& link) {
    if (link.ok()) {
      const auto all = core_->ListLinks();
      for (const auto& v : all.links()) {
        if (v.from() == link->from() && v.to() == link->to()) *resp->mutable_link() = v;
      }
    }
    reactor->Finish(ToGrpc(link.status()));
  });
  return reactor;
}

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
