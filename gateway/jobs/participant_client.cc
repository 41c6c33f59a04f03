#include "gateway/jobs/participant_client.h"

#include <chrono>

#include "base/str_cat.h"
#include "gateway/peering/core.h"
#include "gateway/jobs/participant.h"
#include "gateway/security/tls.h"

namespace fedgate::gateway {
namespace {

absl::Status FromGrpc(const grpc::Status& st) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
}

// One call in flight: owns what gRPC writes into until the callback ran.
template <typename Req, typename Resp>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
  ParticipantCalls::Done<Resp> done;
};

template <typename Req, typename Resp, typename AsyncMethod>
void Send(v1::PeerService::Stub* stub, AsyncMethod method, Req req, int64_t timeout_ms,
          ParticipantCalls::Done<Resp> done) {
  auto* call = new Call<Req, Resp>{};
  call->req = std::move(req);
  call->done = std::move(done);
  call->ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 1)));
  method(stub, &call->ctx, &call->req, &call->resp, [call](grpc::Status st) {
    std::unique_ptr<Call<Req, Resp>> owned(call);
    if (st.ok()) {
      owned->done(std::move(owned->resp));
    } else {
      owned->done(FromGrpc(st));
    }
  });
}

}  // namespace

ParticipantClient::ParticipantClient(
    GatewayCore* core, Participant* local,
    std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider)
    : core_(core), local_(local), provider_(std::move(provider)) {}

std::shared_ptr<v1::PeerService::Stub> ParticipantClient::Stub(const std::string& site) {
  const std::string endpoint = core_->ReservationEndpoint(site);
  if (endpoint.empty()) return nullptr;
  std::lock_guard lock(mu_);
  auto& slot = stubs_[site];
  if (!slot.second || slot.first != endpoint) {
    slot = {endpoint, std::shared_ptr<v1::PeerService::Stub>(v1::PeerService::NewStub(
                          DialPeerGateway(endpoint, provider_, core_->config().federation, site,
                                          kMaxReplyBytes, core_->revocation())))};
  }
  return slot.second;
}

bool ParticipantClient::Drain(int64_t timeout_ms) {
  std::unique_lock lock(flight_mu_);
  return flight_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                             [&] { return in_flight_ == 0; });
}

#define FEDGATE_PARTICIPANT_CALL(Method, Rpc, Req, Resp, LocalExpr)                         \
  void ParticipantClient::Method(const std::string& site, v1::Req req, int64_t timeout_ms, \
                                 Done<v1::Resp> done) {                                    \
    req.set_site(core_->config().site);                                                    \
    if (site == core_->config().site) {                                                    \
      const std::string& from = core_->config().site;                                      \
      (void)from;                                                                          \
      done(LocalExpr);                                                                     \
      return;                                                                              \
    }                                                                                      \
    auto stub = Stub(site);                                                                \
    if (stub == nullptr) {                                                                 \
      done(absl::FailedPreconditionError(                                                   \
          StrCat(site, " is not a peer and does not accept jobs from the federation")));   \
      return;                                                                              \
    }                                                                                      \
    /* The stub outlives the call: the callback holds a reference. */                      \
    {                                                                                      \
      std::lock_guard lock(flight_mu_);                                                    \
      ++in_flight_;                                                                        \
    }                                                                                      \
    auto rpc = [](v1::PeerService::Stub* s, grpc::ClientContext* c, const v1::Req* q,      \
                  v1::Resp* r, std::function<void(grpc::Status)> f) {                      \
      s->async()->Rpc(c, q, r, std::move(f));                                              \
    };                                                                                     \
    Send<v1::Req, v1::Resp>(stub.get(), rpc, std::move(req), timeout_ms,                   \
                            [this, stub, done = std::move(done)](absl::StatusOr<v1::Resp> r) { \
                              done(std::move(r));                                          \
                              std::lock_guard lock(flight_mu_);                            \
                              if (--in_flight_ == 0) flight_cv_.notify_all();              \
                            });                                                            \
  }

FEDGATE_PARTICIPANT_CALL(Prepare, Prepare, PrepareRequest, PrepareResponse,
                         local_->Prepare(from, req))
FEDGATE_PARTICIPANT_CALL(Commit, Commit, CommitRequest, CommitResponse,
                         local_->Commit(from, req))
FEDGATE_PARTICIPANT_CALL(Abort, Abort, AbortRequest, AbortResponse, local_->Abort(from, req))
FEDGATE_PARTICIPANT_CALL(SliceStatus, SliceStatus, SliceStatusRequest, SliceStatusResponse,
                         local_->Status(from, req))
FEDGATE_PARTICIPANT_CALL(ReadLog, ReadLog, ReadLogRequest, ReadLogResponse,
                         local_->ReadLog(from, req))
FEDGATE_PARTICIPANT_CALL(ListUsage, ListUsage, ListUsageRequest, ListUsageResponse,
                         local_->ListUsage(from, req))
FEDGATE_PARTICIPANT_CALL(Stage, Stage, StageRequest, StageResponse, local_->Stage(from, req))
FEDGATE_PARTICIPANT_CALL(Vote, RequestVote, VoteRequest, VoteResponse, local_->Vote(from, req))
#undef FEDGATE_PARTICIPANT_CALL

}  // namespace fedgate::gateway
