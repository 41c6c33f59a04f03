// The one door every gRPC handler goes through: authorize the caller from
// its certificate, count the call as handled, run the handler, observe its
// duration. A refused call never reaches the handler.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gateway/ops/metrics.h"
#include "gateway/security/authz.h"

namespace fedgate::gateway {

// Handler time of one call, by method and status code.
inline void ObserveRpc(Metrics* metrics, const char* method, const absl::Status& st,
                       std::chrono::steady_clock::time_point t0) {
  metrics->Observe("fedgate_rpc_duration_seconds",
                   {{"method", method}, {"code", absl::StatusCodeToString(st.code())}},
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// The status the call ends with: the refusal, or what `body(identity)` returned.
template <typename Body>
absl::Status RunGuarded(const grpc::AuthContext& auth, const Authorizer* authz, Metrics* metrics,
                        RpcClass cls, const char* method, Body&& body) {
  auto caller = authz->Authorize(auth, cls, method);
  if (!caller.ok()) return caller.status();
  metrics->Inc(cls == RpcClass::kAdmin ? "fedgate_admin_rpc_handled_total"
               : cls == RpcClass::kJob ? "fedgate_job_rpc_handled_total"
                                       : "fedgate_peer_rpc_handled_total",
               {{"method", method}});
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status st = body(*caller);
  ObserveRpc(metrics, method, st, t0);
  return st;
}

// The same for a unary callback handler: finishes its reactor.
template <typename Body>
grpc::ServerUnaryReactor* Guarded(grpc::CallbackServerContext* ctx, const Authorizer* authz,
                                  Metrics* metrics, RpcClass cls, const char* method, Body body) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(RunGuarded(*ctx->auth_context(), authz, metrics, cls, method, body)));
  return reactor;
}

}  // namespace fedgate::gateway
