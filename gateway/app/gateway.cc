#include "gateway/app/gateway.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <malloc.h>
#include <unistd.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <sqlite3.h>

#include "base/str_cat.h"
#include "gateway/security/authz.h"
#include "gateway/security/certs.h"
#include "gateway/peering/bench_host.h"
#include "gateway/peering/prober.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/takeover.h"
#include "gateway/peering/core.h"
#include "gateway/peering/core_keys.h"
#include "gateway/exec/kube_site.h"
#include "gateway/exec/slurm.h"
#include "gateway/jobs/participant.h"
#include "gateway/jobs/checkpoint_sync.h"
#include "gateway/jobs/participant_client.h"
#include "gateway/api/rest_server.h"
#include "gateway/serve/replica_hop.h"
#include "gateway/serve/service_controller.h"
#include "gateway/serve/service_tokens.h"
#include "gateway/jobs/job_manager.h"
#include "gateway/jobs/job_metrics.h"
#include "gateway/jobs/usage_gather.h"
#include "gateway/datasets/dataset_registry.h"
#include "gateway/datasets/dataset_stager.h"
#include "gateway/store/job_store.h"
#include "gateway/ops/metrics.h"
#include "gateway/ops/audit_log.h"
#include "gateway/ops/gpu_probe.h"
#include "gateway/ops/ops_server.h"
#include "gateway/peering/peer_links.h"
#include "gateway/api/services.h"
#include "gateway/store/store.h"
#include "gateway/app/system_clock.h"
#include "gateway/security/tls.h"

namespace fedgate::gateway {

namespace {

GpuHealthProbe::Options HealthOptions(const Config& config) {
  GpuHealthProbe::Options o;
  o.command = config.health.command;
  o.interval_ms = config.health.interval_ms;
  for (const auto& n : config.nodes) o.nodes[n.name] = n.gpus;
  // NVML and nvidia-smi see this host's GPUs: the node named like this
  // host, or the only node of a one-node site.
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string name(host);
  name = name.substr(0, name.find('.'));
  if (o.nodes.contains(name)) {
    o.local_node = name;
  } else if (o.nodes.size() == 1) {
    o.local_node = o.nodes.begin()->first;
  }
  return o;
}

}  // namespace

Gateway::Gateway(Config config) : config_(std::move(config)) {}

Gateway::~Gateway() { Stop(); }

absl::Status Gateway::Start() {
  clock_ = std::make_unique<SystemClock>();
  metrics_ = std::make_unique<Metrics>();
  // Each step needs the ones before it; the first error stops the start.
  for (auto step : {&Gateway::OpenStoreAndCore, &Gateway::StartParticipantSide,
                    &Gateway::StartOps, &Gateway::MakeServices, &Gateway::MakeJobs,
                    &Gateway::ServeGrpc, &Gateway::ServeRest, &Gateway::StartLoops,
                    &Gateway::WritePorts}) {
    if (auto st = (this->*step)(); !st.ok()) return st;
  }
  ready_ = true;
  spdlog::info("fedgate {} site {} (federation {}) serving gRPC on port {}, REST on port {}, ops "
               "on port {}; {} node(s), {} approved peer(s)",
               kVersion, config_.site, config_.federation, grpc_port_, rest_ ? rest_->port() : 0,
               ops_->port(),
               config_.nodes.size(), core_->Peers().size());
  return absl::OkStatus();
}

unsigned Gateway::ReloadSeconds() const {
  return static_cast<unsigned>(std::max<int64_t>(1, config_.tls.reload_interval_ms / 1000));
}

// The store, the inventory (static or Slurm's) and the federation core.
absl::Status Gateway::OpenStoreAndCore() {
  auto store = Store::Open(config_.data_dir);
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  if (auto st = DiscoverMig(); !st.ok()) return st;
  auto inventory = OpenInventory();
  if (!inventory.ok()) return inventory.status();
  core_ = std::make_unique<GatewayCore>(config_, clock_.get(), store_.get(), std::move(*inventory),
                                        metrics_.get());
  ad_authority_ = std::make_unique<FileAdAuthority>(config_.tls.ca, config_.tls.cert,
                                                    config_.tls.key, config_.federation,
                                                    config_.tls.crl);
  core_->SetAdAuthority(ad_authority_.get());
  core_->SetRevocation(std::make_shared<RevocationList>(config_.tls.crl));
  if (auto st = core_->Init(); !st.ok()) return st;
  return absl::OkStatus();
}

// The participant (who ranks run as, under which shim, in which cgroups),
// wired to the core, and the GPU health probe.
absl::Status Gateway::StartParticipantSide() {
  participant_ = std::make_unique<Participant>(config_, clock_.get(), store_.get());
  {
    auto user = ResolveRankUser(config_.executor.run_as);
    if (!user.ok()) return user.status();
    // fedgate-shim lives beside fedgate; without it ranks are children of
    // the gateway and neither isolated nor kept across a restart.
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    std::string shim = ec ? "" : (self.parent_path() / "fedgate-shim").string();
    if (!shim.empty() && ::access(shim.c_str(), X_OK) != 0) shim.clear();
    participant_->SetExecutor(shim, *user);
    if (slurm_) participant_->SetBackend(MakeSlurmBackend(slurm_.get()));
    if (kube_) participant_->SetBackend(MakeKubeBackend(kube_.get()));
    const CgroupSupport cg = shim.empty() ? CgroupSupport{} : DetectCgroups("fedgate-" + config_.site);
    participant_->SetCgroups(cg);
    if (!cg.memory && config_.executor.memory_limit > 0) {
      spdlog::warn("executor.memory_limit is not applied: no memory controller");
    }
    if (!cg.pids && config_.executor.pids_limit > 0) {
      spdlog::warn("executor.pids_limit is not applied: no pids controller");
    }
    if (shim.empty()) {
      spdlog::warn("isolation: none: no fedgate-shim beside fedgate; ranks run as children of "
                   "the gateway, as {}, and stop with it", user->name);
    } else {
      spdlog::info("isolation: ranks run as {}{} under {}, in their job's folder under {}, with "
                   "an allowlisted environment; data_dir is private; {}",
                   user->name, user->switch_user ? "" : " (the gateway cannot switch users)",
                   shim, config_.executor.work_dir, cg.Describe());
    }
  }
  datasets_ = std::make_unique<DatasetRegistry>(config_.datasets, config_.data_dir + "/datasets",
                                                metrics_.get());
  datasets_->SetCacheDir(config_.datasets_cache.path);
  core_->SetDatasetsFn([d = datasets_.get()] { return d->Ads(); });
  participant_->SetDatasets(datasets_.get());
  participant_->SetGrantAuthority(ad_authority_.get());
  core_->SetFreeGpusFn([p = participant_.get()] { return p->FreeGpus(); });
  core_->SetAdExtrasFn([p = participant_.get()] { return p->NodeExtras(); },
                       [p = participant_.get()] { return p->Quotas(); });
  participant_->SetOnCapacityChange([c = core_.get()] { (void)c->Tick(); });
  metrics_->Describe("fedgate_gpu_seconds_total", "counter",
                     "GPU-seconds of slices that ended at this site, by tenant, model and class.");
  participant_->SetOnUsage([m = metrics_.get()](const std::vector<federation::UsageRecord>& recs) {
    for (const auto& r : recs) {
      m->Inc("fedgate_gpu_seconds_total",
             {{"tenant", r.tenant}, {"model", r.gpu_model}, {"priority", r.priority}},
             federation::GpuSeconds(r, 0, INT64_MAX, r.end_ms));
    }
  });
  if (auto st = core_->Tick(); !st.ok()) return st;
  health_ = std::make_unique<GpuHealthProbe>(
      HealthOptions(config_), metrics_.get(),
      [p = participant_.get()](const std::map<std::string, std::set<uint32_t>>& failed,
                                     const std::vector<federation::GpuHealth::Change>& changes) {
        std::map<std::pair<std::string, uint32_t>, std::string> why;
        for (const auto& c : changes) why[{c.node, c.gpu}] = c.reason;
        p->SetUnhealthy(failed, why);
      });
  metrics_->Describe("fedgate_job_term_refused_total", "counter",
                     "Coordinator calls and job records this site refused by the job's kept "
                     "record: stale (an older term), hostile (a term or caller not granted), "
                     "bad_copy (a record of another job, tenant, coordinator or term), bad_grant (a "
                     "takeover's grant whose signature or certificate does not verify).");
  if (kube_) DescribeKubeMetrics();
  metrics_->OnScrape([p = participant_.get()](Metrics& m) {
    for (const auto& [reason, n] : p->TermRefusals()) {
      m.Set("fedgate_job_term_refused_total", {{"reason", reason}}, static_cast<double>(n));
    }
  });
  metrics_->Describe("fedgate_tls_cert_expiry_seconds", "gauge",
                     "When this gateway's certificate (tls.cert) expires, as Unix seconds.");
  metrics_->OnScrape([cert = config_.tls.cert](Metrics& m) {
    // Read at scrape time: the file is hot-reloaded when it is renewed.
    if (auto t = CertNotAfterUnix(cert); t.ok()) {
      m.Set("fedgate_tls_cert_expiry_seconds", {}, static_cast<double>(*t));
    }
  });
  return absl::OkStatus();
}

// /metrics, /healthz and /readyz.
absl::Status Gateway::StartOps() {
  auto ops = OpsServer::Start(config_.listen.ops, metrics_.get(), [this]() -> std::string {
    if (!ready_.load()) return "starting or stopping";
    if (kube_) {
      if (auto e = kube_->last_error(); !e.empty()) {
        return "kubernetes API server " + kube_->client()->server() + ": " + e;
      }
    }
    return "";
  });
  if (!ops.ok()) return ops.status();
  ops_ = std::move(*ops);
  return absl::OkStatus();
}

// Per-call authorization, the client certificates, the prober, the peer
// and admin services.
absl::Status Gateway::MakeServices() {
  authz_ = std::make_unique<Authorizer>(
      config_.federation, config_.site,
      [core = core_.get()](std::string_view site) { return core->IsApprovedPeer(site); },
      metrics_.get(), config_.accept_jobs_from_federation, core_->revocation());
  client_certs_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      config_.tls.key, config_.tls.cert, config_.tls.ca, ReloadSeconds());
  bench_host_ = std::make_unique<BenchHost>();
  prober_ = std::make_unique<Prober>(core_.get(), metrics_.get(), client_certs_);
  peer_service_ = std::make_unique<PeerServiceImpl>(core_.get(), authz_.get(), metrics_.get(),
                                                    bench_host_.get(), participant_.get());
  peer_service_->SetDatasets(datasets_.get());
  auto audit = AuditLog::Open(config_.data_dir + "/audit.log");
  if (!audit.ok()) return audit.status();
  audit_ = std::move(*audit);
  admin_service_ = std::make_unique<AdminServiceImpl>(core_.get(), authz_.get(), metrics_.get(),
                                                      prober_.get(), participant_.get(), audit_.get());
  return absl::OkStatus();
}

// The job store, the job manager, and the coordinator with its calls to
// participants.
absl::Status Gateway::MakeJobs() {
  // FEDGATE_BENCH_NO_STORE=1 is the no-store baseline of the submit benchmark.
  const char* no_store = std::getenv("FEDGATE_BENCH_NO_STORE");
  if (no_store == nullptr || std::string(no_store) != "1") {
    auto js = JobStore::Open(config_.data_dir + "/fedgate.db");
    if (!js.ok()) return js.status();
    job_store_ = std::move(*js);
  } else {
    spdlog::warn("FEDGATE_BENCH_NO_STORE=1: jobs are kept in memory only (benchmark baseline)");
  }
  job_manager_ = std::make_unique<JobManager>(core_.get(), job_store_.get());
  if (job_store_) {
    // Every landed write of a job wakes the Watch streams of that job.
    job_store_->SetOnWrite([events = job_manager_->events()](const std::string& id) {
      events->Notify(id);
    });
  }
  if (job_store_) {
    participant_client_ =
        std::make_unique<ParticipantClient>(core_.get(), participant_.get(), client_certs_);
    coordinator_ =
        std::make_unique<Coordinator>(core_.get(), job_store_.get(), participant_client_.get());
    checkpoints_ = std::make_unique<CheckpointSync>(
        config_.site, participant_.get(),
        // A site known to be down is not tried (its copy waits for it).
        [client = participant_client_.get(), core = core_.get()](const std::string& site) {
          return core->DownPeers().contains(site) ? nullptr : client->Stub(site);
        },
        metrics_.get());
    CheckpointSync::DescribeMetrics(metrics_.get());
    participant_->SetOnCheckpointAsk([c = checkpoints_.get()](const std::string& job, uint64_t step,
                                                              std::vector<std::string> to) {
      c->Ask(job, step, std::move(to));
    });
    peer_service_->SetCheckpoints(checkpoints_.get());
    stager_ = std::make_unique<DatasetStager>(
        config_.site, config_.datasets_cache.path, config_.datasets_cache.max_bytes, datasets_.get(),
        [client = participant_client_.get(), core = core_.get()](const std::string& site) {
          return core->DownPeers().contains(site) ? nullptr : client->Stub(site);
        },
        metrics_.get());
    stager_->SetInUse([p = participant_.get()] { return p->DatasetsInUse(); });
    participant_->SetStager(stager_.get());
    takeover_ = std::make_unique<Takeover>(core_.get(), participant_.get(),
                                           participant_client_.get(), coordinator_.get());
    metrics_->Describe("fedgate_job_silences_confirmed_total", "counter",
                       "Times a majority of a job's members confirmed its coordinator silent, so "
                       "that this site's slice kept running past its lease for a takeover.");
    metrics_->OnScrape([t = takeover_.get()](Metrics& m) {
      m.Set("fedgate_job_silences_confirmed_total", {}, static_cast<double>(t->silences_confirmed()));
    });
    job_manager_->SetCoordinator(coordinator_.get());
    job_manager_->SetCopyReader(
        [p = participant_.get()](const std::string& id) { return p->JobFromCopy(id); });
    job_manager_->SetUsageGatherer(
        [core = core_.get(), client = participant_client_.get()](
            int64_t since, int64_t until, const std::string& tenant) {
          return GatherUsage(core, client, since, until, tenant);
        },
        config_.pricing);
    MakeServiceControl();
    DescribeJobMetrics(metrics_.get());
    WireJobMetrics(metrics_.get(), job_store_.get(), coordinator_.get(), clock_.get());
  }
  job_service_ = std::make_unique<JobServiceImpl>(core_.get(), job_manager_.get(), authz_.get(),
                                                  metrics_.get());
  return absl::OkStatus();
}

// The gRPC server: mTLS, health, reflection, the three services.
absl::Status Gateway::ServeGrpc() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      config_.listen.grpc,
      MakeServerCredentials(config_.tls.ca, config_.tls.cert, config_.tls.key, ReloadSeconds(),
                            core_->revocation()),
      &grpc_port_);
  // Port clashes must fail loudly, not be shared.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(peer_service_.get());
  builder.RegisterService(admin_service_.get());
  builder.RegisterService(job_service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || grpc_port_ == 0) {
    return absl::UnavailableError(fedgate::StrCat("listen.grpc: cannot listen on ",
                                               config_.listen.grpc,
                                               " (address in use or TLS files unusable)"));
  }
  return absl::OkStatus();
}

// The REST API (none in the no-store benchmark baseline).
absl::Status Gateway::ServeRest() {
  if (job_store_) {
    auto rest = RestServer::Start(config_, job_manager_.get(), core_.get(), participant_.get(),
                                  metrics_.get(), services_.get());
    if (!rest.ok()) return rest.status();
    rest_ = std::move(*rest);
    core_->SetHttpEndpoint(AdvertisedHttpEndpoint(config_, rest_->port()));
    if (!config_.listen.serve.empty()) {  // services for bearer-token clients
      auto serve = RestServer::StartServe(config_, core_.get(), metrics_.get(), services_.get(),
                                          tokens_.get());
      if (!serve.ok()) return serve.status();
      serve_ = std::move(*serve);
    }
  }
  return absl::OkStatus();
}

// The threads: peer links, prober, advertiser, participant sweeper, health
// probe, coordinator.
absl::Status Gateway::StartLoops() {
  links_ = std::make_unique<PeerLinks>(core_.get(), client_certs_);
  if (config_.bench.probe_on_peer_up) {
    links_->SetOnLinkUp([p = prober_.get()](const std::string& site) { p->Enqueue(site); });
  }
  prober_->Start();
  core_->SetPeersChangedHook([links = links_.get()] { links->Reconcile(); });
  links_->Reconcile();
  advertiser_ = std::thread([this] { AdvertiseLoop(); });
  participant_->Start();
  // After the participant's start: a change it hears of refreshes it.
  if (kube_) kube_->StartWatching([p = participant_.get()] { p->RefreshNodes(); });
  datasets_->Start();
  if (checkpoints_) checkpoints_->Start();
  health_->Start();
  if (coordinator_) coordinator_->Start();
  if (services_) services_->Start();
  if (takeover_) takeover_->Start();
  return absl::OkStatus();
}

// The ports actually bound (a listen address may say port 0), for scripts
// and tests: "grpc N", "http N", "ops N", one per line.
absl::Status Gateway::WritePorts() {
  const std::string ports = fedgate::StrCat("grpc ", grpc_port_, "\nhttp ", rest_ ? rest_->port() : 0,
                                            "\nops ", ops_->port(), "\nserve ", serve_ ? serve_->port() : 0, "\n");
  if (auto st = WriteFileAtomic(config_.data_dir + "/ports", ports, 0644); !st.ok()) {
    spdlog::warn("cannot write {}/ports: {}", config_.data_dir, std::string(st.message()));
  }
  return absl::OkStatus();
}

void Gateway::AdvertiseLoop() {
  while (!stopping_) {
    core_->WaitUntil(clock_->NowMs() + config_.advertise.interval_ms,
                     [this] { return stopping_.load(); });
    if (stopping_) break;
    if (auto st = core_->Tick(); !st.ok()) {
      spdlog::error("cannot persist the ad seq, not advertising: {}", std::string(st.message()));
    }
    // Bursts of calls leave freed memory in malloc's arenas; hand it back
    // so that RSS follows what is live (a few ms, once an interval).
    malloc_trim(0);
  }
}

void Gateway::Stop() {
  if (stopping_.exchange(true)) return;
  ready_ = false;
  if (core_) core_->NotifyAll();
  if (advertiser_.joinable()) advertiser_.join();
  if (kube_) kube_->StopWatching();  // its changes refresh the participant
  // Finishes or cancels pending probes (and their admin calls) first.
  if (prober_) prober_->Stop();
  // Running slices elsewhere keep running within their lease; a restarted
  // coordinator picks them up again from the store.
  if (takeover_) takeover_->Stop();
  if (services_) services_->Stop();
  if (coordinator_) coordinator_->Stop();
  if (checkpoints_) checkpoints_->Stop();
  if (stager_) stager_->Stop();
  // Aborts sent by the coordinator end by their deadlines (a quarter lease).
  if (participant_client_ && !participant_client_->Drain(config_.jobs.lease_ms)) {
    spdlog::warn("shutting down with calls to participants still in flight");
  }
  if (core_ && links_) {
    spdlog::info("shutting down: withdrawing this site's ad from peers");
    core_->Withdraw();
    links_->Shutdown(1000);
  }
  if (serve_) serve_->Stop();
  if (rest_) rest_->Stop();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
  if (ops_) ops_->Stop();
  if (health_) health_->Stop();
  if (datasets_) datasets_->Stop();
  // Supervised ranks keep running; the restarted gateway re-attaches.
  if (participant_) participant_->Detach();
  spdlog::info("stopped");
}

}  // namespace fedgate::gateway
