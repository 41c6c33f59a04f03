// The peer service's handlers (gateway to gateway, mTLS): handshake, ads,
// bandwidth tests, the participant's calls and checkpoint copies. The
// admin and job services are in admin_service.cc and job_service.cc.
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

}  // namespace fedgate::gateway
