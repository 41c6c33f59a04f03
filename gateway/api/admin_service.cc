// The admin service's handlers (region admins): peers, nodes, quotas,
// capacity, links, datasets, link probes.
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

}  // namespace fedgate::gateway
