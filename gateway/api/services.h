// Thin gRPC adapters: authorize the call, hand it to its manager (GatewayCore,
// Participant, JobManager, Prober, BenchHost), reply.
#pragma once

#include <atomic>

#include "fedgate/v1/admin.grpc.pb.h"
#include "fedgate/v1/federation.grpc.pb.h"
#include "fedgate/v1/jobs.grpc.pb.h"

namespace fedgate::gateway {

class AuditLog;
class Authorizer;
class BenchHost;
class GatewayCore;
class Metrics;
class Participant;
class Prober;

class CheckpointSync;
class DatasetRegistry;

class PeerServiceImpl final : public v1::PeerService::CallbackService {
 public:
  PeerServiceImpl(GatewayCore* core, const Authorizer* authz, Metrics* metrics, BenchHost* bench,
                  Participant* participant)
      : core_(core), authz_(authz), metrics_(metrics), bench_(bench), participant_(participant) {}
  grpc::ServerUnaryReactor* Handshake(grpc::CallbackServerContext* ctx,
                                      const v1::HandshakeRequest* req,
                                      v1::HandshakeResponse* resp) override;
  grpc::ServerUnaryReactor* Advertise(grpc::CallbackServerContext* ctx,
                                      const v1::AdvertiseRequest* req,
                                      v1::AdvertiseResponse* resp) override;
  grpc::ServerUnaryReactor* OpenBench(grpc::CallbackServerContext* ctx,
                                      const v1::OpenBenchRequest* req,
                                      v1::OpenBenchResponse* resp) override;
  grpc::ServerUnaryReactor* Prepare(grpc::CallbackServerContext* ctx,
                                    const v1::PrepareRequest* req,
                                    v1::PrepareResponse* resp) override;
  grpc::ServerUnaryReactor* Commit(grpc::CallbackServerContext* ctx, const v1::CommitRequest* req,
                                   v1::CommitResponse* resp) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const v1::AbortRequest* req,
                                  v1::AbortResponse* resp) override;
  grpc::ServerUnaryReactor* SliceStatus(grpc::CallbackServerContext* ctx,
                                        const v1::SliceStatusRequest* req,
                                        v1::SliceStatusResponse* resp) override;
  grpc::ServerUnaryReactor* ReadLog(grpc::CallbackServerContext* ctx,
                                    const v1::ReadLogRequest* req,
                                    v1::ReadLogResponse* resp) override;
  grpc::ServerUnaryReactor* ListUsage(grpc::CallbackServerContext* ctx,
                                      const v1::ListUsageRequest* req,
                                      v1::ListUsageResponse* resp) override;
  grpc::ServerReadReactor<v1::CheckpointChunk>* PushCheckpoint(
      grpc::CallbackServerContext* ctx, v1::PushCheckpointResponse* resp) override;
  grpc::ServerUnaryReactor* CheckpointProgress(grpc::CallbackServerContext* ctx,
                                               const v1::CheckpointProgressRequest* req,
                                               v1::CheckpointProgressResponse* resp) override;
  // services_datasets.cc: a dataset this site holds, to a site staging it.
  grpc::ServerUnaryReactor* GetDatasetManifest(grpc::CallbackServerContext* ctx,
                                               const v1::DatasetManifestRequest* req,
                                               v1::DatasetManifest* resp) override;
  grpc::ServerWriteReactor<v1::DatasetChunk>* FetchDataset(
      grpc::CallbackServerContext* ctx, const v1::FetchDatasetRequest* req) override;
  grpc::ServerUnaryReactor* RequestVote(grpc::CallbackServerContext* ctx,
                                        const v1::VoteRequest* req,
                                        v1::VoteResponse* resp) override;
  grpc::ServerUnaryReactor* Stage(grpc::CallbackServerContext* ctx, const v1::StageRequest* req,
                                  v1::StageResponse* resp) override;
  // Where checkpoints are received (before the server starts).
  void SetCheckpoints(CheckpointSync* sync) { checkpoints_ = sync; }
  // The datasets this site serves (before the server starts).
  void SetDatasets(const DatasetRegistry* datasets) { datasets_ = datasets; }

 private:
  GatewayCore* core_;
  const Authorizer* authz_;
  Metrics* metrics_;
  BenchHost* bench_;
  Participant* participant_;
  CheckpointSync* checkpoints_ = nullptr;
  const DatasetRegistry* datasets_ = nullptr;
};

class AdminServiceImpl final : public v1::AdminService::CallbackService {
 public:
  // Admin actions that change something are written to `audit`.
  AdminServiceImpl(GatewayCore* core, const Authorizer* authz, Metrics* metrics, Prober* prober,
                   Participant* participant, AuditLog* audit)
      : core_(core), authz_(authz), metrics_(metrics), prober_(prober),
        participant_(participant), audit_(audit) {}
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx,
                                      const v1::ListNodesRequest* req,
                                      v1::ListNodesResponse* resp) override;
  grpc::ServerUnaryReactor* CordonNode(grpc::CallbackServerContext* ctx,
                                       const v1::CordonNodeRequest* req,
                                       v1::CordonNodeResponse* resp) override;
  grpc::ServerUnaryReactor* SetQuota(grpc::CallbackServerContext* ctx,
                                     const v1::SetQuotaRequest* req,
                                     v1::SetQuotaResponse* resp) override;
  grpc::ServerUnaryReactor* ListPeers(grpc::CallbackServerContext* ctx,
                                      const v1::ListPeersRequest* req,
                                      v1::ListPeersResponse* resp) override;
  grpc::ServerUnaryReactor* AddPeer(grpc::CallbackServerContext* ctx,
                                    const v1::AddPeerRequest* req,
                                    v1::AddPeerResponse* resp) override;
  grpc::ServerUnaryReactor* RemovePeer(grpc::CallbackServerContext* ctx,
                                       const v1::RemovePeerRequest* req,
                                       v1::RemovePeerResponse* resp) override;
  grpc::ServerUnaryReactor* GetCapacity(grpc::CallbackServerContext* ctx,
                                        const v1::GetCapacityRequest* req,
                                        v1::GetCapacityResponse* resp) override;
  grpc::ServerUnaryReactor* ListLinks(grpc::CallbackServerContext* ctx,
                                      const v1::ListLinksRequest* req,
                                      v1::ListLinksResponse* resp) override;
  grpc::ServerUnaryReactor* ListDatasets(grpc::CallbackServerContext* ctx,
                                         const v1::ListDatasetsRequest* req,
                                         v1::ListDatasetsResponse* resp) override;
  grpc::ServerUnaryReactor* ProbeLink(grpc::CallbackServerContext* ctx,
                                      const v1::ProbeLinkRequest* req,
                                      v1::ProbeLinkResponse* resp) override;

 private:
  GatewayCore* core_;
  const Authorizer* authz_;
  Metrics* metrics_;
  Prober* prober_;
  Participant* participant_;
  AuditLog* audit_;
};

class JobManager;

// Every method uses the callback API; the two server streams (Watch, Logs)
// are reactors (job_streams.h) that hold no thread while they wait.
using JobServiceBase = v1::JobService::CallbackService;

class JobServiceImpl final : public JobServiceBase {
 public:
  JobServiceImpl(GatewayCore* core, JobManager* jobs, const Authorizer* authz, Metrics* metrics)
      : core_(core), jobs_(jobs), authz_(authz), metrics_(metrics) {}
  grpc::ServerUnaryReactor* Plan(grpc::CallbackServerContext* ctx, const v1::PlanRequest* req,
                                 v1::PlanResponse* resp) override;
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx,
                                   const v1::SubmitJobRequest* req,
                                   v1::SubmitJobResponse* resp) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                v1::GetJobResponse* resp) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                 v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* Usage(grpc::CallbackServerContext* ctx, const v1::UsageRequest* req,
                                  v1::UsageResponse* resp) override;
  grpc::ServerUnaryReactor* Quotas(grpc::CallbackServerContext* ctx, const v1::QuotasRequest* req,
                                   v1::QuotasResponse* resp) override;
  grpc::ServerUnaryReactor* Events(grpc::CallbackServerContext* ctx,
                                   const v1::JobEventsRequest* req,
                                   v1::JobEventsResponse* resp) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx,
                                   const v1::CancelJobRequest* req,
                                   v1::CancelJobResponse* resp) override;
  grpc::ServerUnaryReactor* ListServices(grpc::CallbackServerContext* ctx,
                                         const v1::ListServicesRequest* req,
                                         v1::ListServicesResponse* resp) override;
  grpc::ServerUnaryReactor* ScaleService(grpc::CallbackServerContext* ctx,
                                         const v1::ScaleServiceRequest* req,
                                         v1::ScaleServiceResponse* resp) override;
  grpc::ServerUnaryReactor* ServiceToken(grpc::CallbackServerContext* ctx,
                                         const v1::ServiceTokenRequest* req,
                                         v1::ServiceTokenResponse* resp) override;
  grpc::ServerWriteReactor<v1::LogsResponse>* Logs(grpc::CallbackServerContext* ctx,
                                                   const v1::LogsRequest* req) override;
  grpc::ServerWriteReactor<v1::Job>* Watch(grpc::CallbackServerContext* ctx,
                                           const v1::WatchJobRequest* req) override;

 private:
  GatewayCore* core_;
  JobManager* jobs_;
  const Authorizer* authz_;
  Metrics* metrics_;
  // Usage gatherings in flight, each on a thread of its own (bounded).
  static constexpr int kMaxUsageInFlight = 32;
  std::atomic<int> usage_in_flight_{0};
};

}  // namespace fedgate::gateway
