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
#include "gateway/peering/core.h"
#include "gateway/exec/slurm.h"
#include "gateway/jobs/participant.h"
#include "gateway/jobs/participant_client.h"
#include "gateway/api/rest_server.h"
#include "gateway/jobs/job_manager.h"
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
  o.command = config.health_command;
  o.interval_ms = config.health_interval_ms;
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
  auto store = Store::Open(config_.data_dir);
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  std::unique_ptr<federation::InventorySource> inventory;
  if (config_.inventory_source == "slurm") {
    slurm_ = std::make_unique<SlurmCluster>(SlurmConfig{
        config_.slurm_partition, config_.slurm_conf, config_.slurm_gpu_models,
        config_.slurm_accounts});
    // A controller that is down now is not fatal: the site offers nothing
    // until Slurm answers, and says why.
    if (auto st = slurm_->Refresh(); !st.ok()) {
      spdlog::warn("slurm: no nodes yet: {}", std::string(st.message()));
    } else {
      spdlog::info("slurm: {} node(s) with GPUs in partition {}", slurm_->InventoryNodes().size(),
                   config_.slurm_partition);
    }
    inventory = std::make_unique<SlurmInventory>(slurm_.get());
  } else {
    inventory = std::make_unique<federation::StaticInventory>(config_.nodes);
  }
  core_ = std::make_unique<GatewayCore>(config_, clock_.get(), store_.get(), std::move(inventory),
                                        metrics_.get());
  ad_authority_ = std::make_unique<FileAdAuthority>(config_.tls_ca, config_.tls_cert,
                                                    config_.tls_key, config_.federation,
                                                    config_.tls_crl);
  core_->SetAdAuthority(ad_authority_.get());
  core_->SetRevocation(std::make_shared<RevocationList>(config_.tls_crl));
  if (auto st = core_->Init(); !st.ok()) return st;
  participant_ = std::make_unique<Participant>(config_, clock_.get(), store_.get());
  {
    auto user = ResolveRankUser(config_.executor_run_as);
    if (!user.ok()) return user.status();
    // fedgate-shim lives beside fedgate; without it ranks are children of
    // the gateway and neither isolated nor kept across a restart.
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    std::string shim = ec ? "" : (self.parent_path() / "fedgate-shim").string();
    if (!shim.empty() && ::access(shim.c_str(), X_OK) != 0) shim.clear();
    participant_->SetExecutor(shim, *user);
    if (slurm_) participant_->SetBackend(MakeSlurmBackend(slurm_.get()));
    const CgroupSupport cg = shim.empty() ? CgroupSupport{} : DetectCgroups("fedgate-" + config_.site);
    participant_->SetCgroups(cg);
    if (!cg.memory && config_.executor_memory_limit > 0) {
      spdlog::warn("executor.memory_limit is not applied: no memory controller");
    }
    if (!cg.pids && config_.executor_pids_limit > 0) {
      spdlog::warn("executor.pids_limit is not applied: no pids controller");
    }
    if (shim.empty()) {
      spdlog::warn("isolation: none: no fedgate-shim beside fedgate; ranks run as children of "
                   "the gateway, as {}, and stop with it", user->name);
    } else {
      spdlog::info("isolation: ranks run as {}{} under {}, in their job's folder under {}, with "
                   "an allowlisted environment; data_dir is private; {}",
                   user->name, user->switch_user ? "" : " (the gateway cannot switch users)",
                   shim, config_.executor_work_dir, cg.Describe());
    }
  }
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
  metrics_->Describe("fedgate_tls_cert_expiry_seconds", "gauge",
                     "When this gateway's certificate (tls.cert) expires, as Unix seconds.");
  metrics_->OnScrape([cert = config_.tls_cert](Metrics& m) {
    // Read at scrape time: the file is hot-reloaded when it is renewed.
    if (auto t = CertNotAfterUnix(cert); t.ok()) {
      m.Set("fedgate_tls_cert_expiry_seconds", {}, static_cast<double>(*t));
    }
  });

  auto ops = OpsServer::Start(config_.listen_ops, metrics_.get(), [this] { return ready_.load(); });
  if (!ops.ok()) return ops.status();
  ops_ = std::move(*ops);

  authz_ = std::make_unique<Authorizer>(
      config_.federation, config_.site,
      [core = core_.get()](std::string_view site) { return core->IsApprovedPeer(site); },
      metrics_.get(), config_.accept_jobs_from_federation, core_->revocation());
  const unsigned reload_s =
      static_cast<unsigned>(std::max<int64_t>(1, config_.tls_reload_interval_ms / 1000));
  client_certs_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      config_.tls_key, config_.tls_cert, config_.tls_ca, reload_s);
  bench_host_ = std::make_unique<BenchHost>();
  prober_ = std::make_unique<Prober>(core_.get(), metrics_.get(), client_certs_);
  peer_service_ = std::make_unique<PeerServiceImpl>(core_.get(), authz_.get(), metrics_.get(),
                                                    bench_host_.get(), participant_.get());
  auto audit = AuditLog::Open(config_.data_dir + "/audit.log");
  if (!audit.ok()) return audit.status();
  audit_ = std::move(*audit);
  admin_service_ = std::make_unique<AdminServiceImpl>(core_.get(), authz_.get(), metrics_.get(),
                                                      prober_.get(), participant_.get(), audit_.get());
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
    job_manager_->SetCoordinator(coordinator_.get());
    // fedctl usage: this site's ledger and that of every site that answers
    // this one's reservation calls (peers, and sites accepting jobs from the
    // federation); other sites known from relayed ads are reported unreachable.
    job_manager_->SetUsageGatherer(
        [this](int64_t since, int64_t until, const std::string& tenant) {
          JobManager::GatheredUsage g;
          std::vector<std::string> sites = {config_.site};
          const auto down = core_->DownPeers();
          const std::set<std::string> asked = core_->SitesForJobs();
          for (const auto& site : asked) {
            if (site == config_.site) continue;
            if (down.contains(site)) {
              g.unreachable.push_back(site);
            } else {
              sites.push_back(site);
            }
          }
          const v1::GetCapacityResponse capacity = core_->Capacity();
          for (const auto& s : capacity.sites()) {
            if (!asked.contains(s.site())) g.unreachable.push_back(s.site());
          }
          std::mutex mu;
          std::condition_variable cv;
          size_t left = sites.size();
          for (const auto& site : sites) {
            v1::ListUsageRequest req;
            req.set_since_unix_ms(since);
            req.set_until_unix_ms(until);
            req.set_tenant(tenant);
            participant_client_->ListUsage(
                site, req, 5000, [&, site](absl::StatusOr<v1::ListUsageResponse> r) {
                  std::lock_guard lock(mu);
                  if (!r.ok()) {
                    g.unreachable.push_back(site);
                  } else {
                    for (const auto& p : r->records()) {
                      g.records.push_back({p.job_id(), p.attempt(), p.epoch(), p.site(), p.node(),
                                           p.gpu_model(), p.tenant(), p.priority(), p.gpus(),
                                           p.start_unix_ms(), p.end_unix_ms(), p.reason()});
                    }
                  }
                  if (--left == 0) cv.notify_all();
                });
          }
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return left == 0; });
          std::sort(g.unreachable.begin(), g.unreachable.end());
          return g;
        },
        config_.pricing);
  }
  if (job_store_) {
    metrics_->Describe("fedgate_job_store_commits_total", "counter",
                       "Transactions (fsyncs) of the job store's writer.");
    metrics_->Describe("fedgate_job_store_largest_batch", "gauge",
                       "Most writes one job-store transaction carried.");
    metrics_->Describe("fedgate_coordinator_renew_passes_total", "counter",
                       "Passes of the coordinator's lease renewal over every running job.");
    metrics_->Describe("fedgate_coordinator_worst_renew_gap_seconds", "gauge",
                       "Longest time a slice on an answering site went without a renewal "
                       "(compare with fedgate_coordinator_lease_seconds).");
    metrics_->Describe("fedgate_coordinator_lease_seconds", "gauge",
                       "The lease of committed slices.");
    metrics_->Describe("fedgate_sqlite_memory_bytes", "gauge",
                       "Heap held by SQLite (page caches of every connection).");
    metrics_->Describe("fedgate_heap_bytes", "gauge",
                       "glibc malloc's heap: bytes in use, and bytes free but still held "
                       "(kept between live blocks, so not given back to the system); zeros "
                       "under another allocator (AddressSanitizer, tcmalloc).");
    metrics_->Describe("fedgate_jobs", "gauge", "Jobs coordinated here, by state.");
    metrics_->Describe("fedgate_job_scheduling_delay_seconds", "histogram",
                       "Wait from submit to RUNNING, per attempt, by tenant and priority.",
                       {1, 5, 15, 60, 300, 900, 3600, 4 * 3600});
    metrics_->Describe("fedgate_job_store_commit_seconds", "histogram",
                       "Duration of one job-store transaction (fsync included).",
                       {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5});
    metrics_->Describe("fedgate_job_gpus", "gauge",
                       "GPUs asked by jobs coordinated here that have not ended, by state "
                       "(PENDING, RESERVING, RUNNING), tenant and priority.");
    metrics_->Describe("fedgate_reservation_phase_seconds", "histogram",
                       "Duration of a two-phase reservation's phases (prepare on every site at "
                       "once, commit on every site at once), by result.",
                       {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
    metrics_->Describe("fedgate_reservations_total", "counter",
                       "Reservations that ended committed or aborted (a site refused or failed, "
                       "or the job ended meanwhile).");
    coordinator_->SetOnReservation([m = metrics_.get()](const char* phase, bool ok, double s) {
      if (phase[0] == 'p' || phase[0] == 'c') {
        m->Observe("fedgate_reservation_phase_seconds",
                   {{"phase", phase}, {"result", ok ? "ok" : "failed"}}, s);
      }
    });
    coordinator_->SetOnReservationEnd([m = metrics_.get()](bool committed) {
      m->Inc("fedgate_reservations_total", {{"result", committed ? "committed" : "aborted"}});
    });
    coordinator_->SetOnScheduled([m = metrics_.get()](double s, const JobRecord& j) {
      m->Observe("fedgate_job_scheduling_delay_seconds",
                 {{"tenant", j.tenant}, {"priority", j.spec.priority()}}, s);
    });
    metrics_->Describe("fedgate_job_store_batch_size", "histogram",
                       "Writes carried by one job-store transaction (group commit).",
                       {1, 2, 4, 8, 16, 32, 64, 128});
    job_store_->SetOnCommit([m = metrics_.get()](double s, size_t batch) {
      m->Observe("fedgate_job_store_commit_seconds", {}, s);
      m->Observe("fedgate_job_store_batch_size", {}, static_cast<double>(batch));
    });
    metrics_->Describe("fedgate_job_oldest_pending_seconds", "gauge",
                       "Age of the oldest PENDING job (0 when none waits).");
    metrics_->OnScrape([js = job_store_.get(), c = coordinator_.get(),
                        clock = clock_.get()](Metrics& m) {
      m.Set("fedgate_job_store_commits_total", {}, static_cast<double>(js->commits()));
      m.Set("fedgate_job_store_largest_batch", {}, static_cast<double>(js->largest_batch()));
      m.Set("fedgate_coordinator_renew_passes_total", {}, static_cast<double>(c->renew_passes()));
      m.Set("fedgate_coordinator_worst_renew_gap_seconds", {}, c->worst_renew_gap_ms() / 1000.0);
      m.Set("fedgate_coordinator_lease_seconds", {}, c->lease_ms() / 1000.0);
      m.Set("fedgate_sqlite_memory_bytes", {}, static_cast<double>(sqlite3_memory_used()));
      const struct mallinfo2 heap = mallinfo2();  // every arena, mmapped blocks included
      m.SetFamily("fedgate_heap_bytes",
                  {{{{"kind", "in_use"}}, static_cast<double>(heap.uordblks + heap.hblkhd)},
                   {{{"kind", "free"}}, static_cast<double>(heap.fordblks)}});
      if (auto counts = js->Count(); counts.ok()) {
        std::vector<std::pair<Labels, double>> by_state;
        for (const auto& [state, n] : counts->by_state) {
          by_state.push_back({{{"state", state}}, static_cast<double>(n)});
        }
        m.SetFamily("fedgate_jobs", by_state);
        std::vector<std::pair<Labels, double>> gpus;
        for (const auto& [key, n] : counts->active_gpus) {
          const auto& [state, tenant, priority] = key;
          gpus.push_back({{{"state", state}, {"tenant", tenant}, {"priority", priority}},
                          static_cast<double>(n)});
        }
        m.SetFamily("fedgate_job_gpus", gpus);
        const int64_t now = clock->NowMs();
        m.Set("fedgate_job_oldest_pending_seconds", {},
              counts->oldest_pending_created_ms
                  ? std::max<int64_t>(0, now - *counts->oldest_pending_created_ms) / 1000.0
                  : 0.0);
      }
    });
  }
  job_service_ = std::make_unique<JobServiceImpl>(core_.get(), job_manager_.get(), authz_.get(),
                                                  metrics_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      config_.listen_grpc,
      MakeServerCredentials(config_.tls_ca, config_.tls_cert, config_.tls_key, reload_s,
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
                                               config_.listen_grpc,
                                               " (address in use or TLS files unusable)"));
  }

  if (job_store_) {
    auto rest = RestServer::Start(config_, job_manager_.get(), metrics_.get());
    if (!rest.ok()) return rest.status();
    rest_ = std::move(*rest);
  }

  links_ = std::make_unique<PeerLinks>(core_.get(), client_certs_);
  if (config_.bench_probe_on_peer_up) {
    links_->SetOnLinkUp([p = prober_.get()](const std::string& site) { p->Enqueue(site); });
  }
  prober_->Start();
  core_->SetPeersChangedHook([links = links_.get()] { links->Reconcile(); });
  links_->Reconcile();
  advertiser_ = std::thread([this] { AdvertiseLoop(); });
  participant_->Start();
  health_->Start();
  if (coordinator_) coordinator_->Start();
  // The ports actually bound (a listen address may say port 0), for scripts
  // and tests: "grpc N", "http N", "ops N", one per line.
  const std::string ports = fedgate::StrCat("grpc ", grpc_port_, "\nhttp ", rest_ ? rest_->port() : 0,
                                            "\nops ", ops_->port(), "\n");
  if (auto st = WriteFileAtomic(config_.data_dir + "/ports", ports, 0644); !st.ok()) {
    spdlog::warn("cannot write {}/ports: {}", config_.data_dir, std::string(st.message()));
  }
  ready_ = true;
  spdlog::info("fedgate {} site {} (federation {}) serving gRPC on port {}, REST on port {}, ops "
               "on port {}; {} node(s), {} approved peer(s)",
               kVersion, config_.site, config_.federation, grpc_port_, rest_ ? rest_->port() : 0,
               ops_->port(),
               config_.nodes.size(), core_->Peers().size());
  return absl::OkStatus();
}

void Gateway::AdvertiseLoop() {
  while (!stopping_) {
    core_->WaitUntil(clock_->NowMs() + config_.advertise_interval_ms,
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
  // Finishes or cancels pending probes (and their admin calls) first.
  if (prober_) prober_->Stop();
  // Running slices elsewhere keep running within their lease; a restarted
  // coordinator picks them up again from the store.
  if (coordinator_) coordinator_->Stop();
  // Aborts sent by the coordinator end by their deadlines (a quarter lease).
  if (participant_client_ && !participant_client_->Drain(config_.jobs_lease_ms)) {
    spdlog::warn("shutting down with calls to participants still in flight");
  }
  if (core_ && links_) {
    spdlog::info("shutting down: withdrawing this site's ad from peers");
    core_->Withdraw();
    links_->Shutdown(1000);
  }
  if (rest_) rest_->Stop();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
  if (ops_) ops_->Stop();
  if (health_) health_->Stop();
  // Supervised ranks keep running; the restarted gateway re-attaches.
  if (participant_) participant_->Detach();
  spdlog::info("stopped");
}

}  // namespace fedgate::gateway
