// Wires one site's gateway together: store, core, gRPC server (mTLS, health,
// reflection), peer links, advertiser and the ops endpoint.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include <grpcpp/security/tls_certificate_provider.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "federation/inventory.h"
#include "gateway/config/config.h"
#include "gateway/security/ad_signing.h"

namespace grpc {
class Server;
}

namespace fedgate::gateway {

class Authorizer;
class BenchHost;
class Prober;
class GatewayCore;
class SlurmCluster;
class KubeCluster;
class Metrics;
class OpsServer;
class GpuHealthProbe;
class AuditLog;
class PeerLinks;
class PeerServiceImpl;
class CheckpointSync;
class AdminServiceImpl;
class JobServiceImpl;
class JobManager;
class ReplicaHop;
class ServiceController;
class ServiceTokens;
class RestServer;
class JobStore;
class Participant;
class Coordinator;
class Takeover;
class ParticipantClient;
class Store;
class DatasetRegistry;
class DatasetStager;
class SystemClock;

class Gateway {
 public:
  explicit Gateway(Config config);
  ~Gateway();

  absl::Status Start();
  // Stops accepting, tells peers (a withdrawn ad), stops every thread.
  void Stop();

  int grpc_port() const { return grpc_port_; }

 private:
  // The steps of Start, in order (gateway.cc).
  absl::Status OpenStoreAndCore();
  // static, slurm or kubernetes (gateway_sites.cc); a kubeconfig that cannot
  // be used is an error, a resource manager that does not answer is not.
  // gateway_sites.cc: the node whose MIG slices nvidia-smi lists (mig:
  // nvidia-smi) split into them, with the devices' real UUIDs, before
  // anything reads the nodes. FEDGATE_NVIDIA_SMI names the program.
  absl::Status DiscoverMig();
  absl::StatusOr<std::unique_ptr<federation::InventorySource>> OpenInventory();
  void DescribeKubeMetrics();
  absl::Status StartParticipantSide();
  absl::Status StartOps();
  absl::Status MakeServices();
  absl::Status MakeJobs();
  // gateway_services.cc: the service controller, its prober and tokens.
  void MakeServiceControl();
  absl::Status ServeGrpc();
  absl::Status ServeRest();
  absl::Status StartLoops();
  absl::Status WritePorts();
  unsigned ReloadSeconds() const;
  void AdvertiseLoop();

  Config config_;
  std::unique_ptr<SystemClock> clock_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<DatasetRegistry> datasets_;  // before core_: its ads read it
  std::unique_ptr<AdAuthority> ad_authority_;  // before core_: it uses it
  std::unique_ptr<GatewayCore> core_;
  std::unique_ptr<Authorizer> authz_;
  std::unique_ptr<PeerServiceImpl> peer_service_;
  std::unique_ptr<AdminServiceImpl> admin_service_;
  std::unique_ptr<SlurmCluster> slurm_;  // executor.kind slurm
  std::unique_ptr<KubeCluster> kube_;    // executor.kind kubernetes
  std::unique_ptr<Participant> participant_;
  std::unique_ptr<ParticipantClient> participant_client_;  // outlives the coordinator
  std::unique_ptr<CheckpointSync> checkpoints_;
  std::unique_ptr<DatasetStager> stager_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Takeover> takeover_;  // after the coordinator, before it at stop
  std::unique_ptr<JobStore> job_store_;
  std::unique_ptr<JobManager> job_manager_;
  std::unique_ptr<ReplicaHop> hop_;               // to replicas on other sites (probes)
  std::unique_ptr<ServiceController> services_;  // kind: service (the coordinator's)
  std::unique_ptr<ServiceTokens> tokens_;         // their bearer tokens
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<RestServer> rest_;
  std::unique_ptr<RestServer> serve_;  // listen.serve
  std::unique_ptr<grpc::Server> server_;
  // One file-watching provider for every outgoing channel (peers, probes, jobs).
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> client_certs_;
  std::unique_ptr<PeerLinks> links_;
  std::unique_ptr<BenchHost> bench_host_;
  std::unique_ptr<Prober> prober_;
  std::unique_ptr<OpsServer> ops_;
  std::unique_ptr<GpuHealthProbe> health_;
  std::unique_ptr<AuditLog> audit_;
  std::thread advertiser_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> ready_{false};
  int grpc_port_ = 0;
};

}  // namespace fedgate::gateway
