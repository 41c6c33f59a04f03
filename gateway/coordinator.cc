#include "gateway/coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "federation/duration.h"
#include "federation/queue_policy.h"
#include "federation/str_cat.h"
#include "gateway/core.h"
#include "gateway/crash_point.h"
#include "gateway/participant.h"
#include "gateway/tls.h"

namespace fedgate::gateway {
namespace {

constexpr int64_t kHoldTtlMs = 30000;
constexpr int kRpcTimeoutS = 5;

void Deadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kRpcTimeoutS));
}

absl::Status FromGrpc(const grpc::Status& st) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
}

v1::ReservationKey Key(const JobRecord& job, uint64_t epoch) {
  v1::ReservationKey k;
  k.set_job_id(job.id);
  k.set_attempt(job.attempt);
  k.set_epoch(epoch);
  return k;
}

}  // namespace

Coordinator::Coordinator(GatewayCore* core, JobStore* store, Participant* local,
                         std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider)
    : core_(core),
      store_(store),
      local_(local),
      lease_ms_(std::max<int64_t>(3000, 5 * core->config().advertise_interval_ms)),
      provider_(std::move(provider)) {}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Start() { thread_ = std::thread([this] { Loop(); }); }

void Coordinator::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<v1::PeerService::Stub> Coordinator::Stub(const std::string& site) {
  std::string endpoint;
  for (const auto& p : core_->Peers()) {
    if (p.site == site) endpoint = p.endpoint;
  }
  if (endpoint.empty()) return nullptr;
  std::lock_guard lock(stubs_mu_);
  auto& slot = stubs_[site];
  if (!slot.second || slot.first != endpoint) {
    auto creds = MakePeerGatewayCredentials(provider_, core_->config().federation, site);
    slot = {endpoint, std::shared_ptr<v1::PeerService::Stub>(v1::PeerService::NewStub(
                          grpc::CreateCustomChannel(endpoint, creds, DefaultChannelArgs())))};
  }
  return slot.second;
}

void Coordinator::Forget(const std::string& site, const grpc::Status& st) {
  if (st.error_code() != grpc::StatusCode::UNAVAILABLE &&
      st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return;
  }
  std::lock_guard lock(stubs_mu_);
  stubs_.erase(site);
}

absl::StatusOr<v1::PrepareResponse> Coordinator::Prepare(const std::string& site,
                                                         v1::PrepareRequest req) {
  req.set_site(core_->config().site);
  if (site == core_->config().site) return local_->Prepare(req);
  auto stub = Stub(site);
  if (stub == nullptr) return absl::FailedPreconditionError(StrCat(site, " is not a peer"));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::PrepareResponse resp;
  const grpc::Status st = stub->Prepare(&ctx, req, &resp);
  Forget(site, st);
  if (!st.ok()) return FromGrpc(st);
  return resp;
}

absl::Status Coordinator::Commit(const std::string& site, v1::CommitRequest req) {
  req.set_site(core_->config().site);
  if (site == core_->config().site) return local_->Commit(req);
  auto stub = Stub(site);
  if (stub == nullptr) return absl::FailedPreconditionError(StrCat(site, " is not a peer"));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::CommitResponse resp;
  const grpc::Status st = stub->Commit(&ctx, req, &resp);
  Forget(site, st);
  return FromGrpc(st);
}

absl::Status Coordinator::Abort(const std::string& site, v1::AbortRequest req) {
  req.set_site(core_->config().site);
  if (site == core_->config().site) return local_->Abort(req);
  auto stub = Stub(site);
  if (stub == nullptr) return absl::FailedPreconditionError(StrCat(site, " is not a peer"));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::AbortResponse resp;
  const grpc::Status st = stub->Abort(&ctx, req, &resp);
  Forget(site, st);
  return FromGrpc(st);
}

absl::StatusOr<v1::SliceStatusResponse> Coordinator::Status(const std::string& site,
                                                            v1::SliceStatusRequest req) {
  req.set_site(core_->config().site);
  if (site == core_->config().site) return local_->Status(req);
  auto stub = Stub(site);
  if (stub == nullptr) return absl::FailedPreconditionError(StrCat(site, " is not a peer"));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::SliceStatusResponse resp;
  const grpc::Status st = stub->SliceStatus(&ctx, req, &resp);
  Forget(site, st);
  if (!st.ok()) return FromGrpc(st);
  return resp;
}

void Coordinator::Loop() {
  federation::ShortestJobFirst policy;
  while (!stop_) {
    auto jobs = store_->ListActive(1000);
    if (jobs.ok()) {
      std::vector<federation::QueuedJob> queued;
      std::map<std::string, JobRecord> pending;
      for (auto& j : *jobs) {
        if (j.state == "RUNNING" || j.state == "RESERVING") {
          Drive(j);
        } else if (j.state == "PENDING") {
          auto ms = federation::ParseDurationMs(j.spec.estimated_duration());
          queued.push_back({j.id, j.spec.gpus(), ms.ok() ? *ms : 3600000,
                            j.spec.priority() == "spot", j.created_at_unix_ms});
          pending[j.id] = j;
        }
      }
      // Only this site and its approved peers can be asked to run ranks:
      // every other known site is avoided. Computed once per pass.
      std::vector<std::string> unreachable;
      if (!queued.empty()) {
        std::set<std::string> reachable = {core_->config().site};
        for (const auto& p : core_->Peers()) reachable.insert(p.site);
        const auto capacity = core_->Capacity();
        for (const auto& s : capacity.sites()) {
          if (!reachable.contains(s.site())) unreachable.push_back(s.site());
        }
      }
      for (const auto& id : policy.Order(queued, core_->clock()->NowMs())) {
        if (stop_) break;
        TryStart(pending[id], unreachable);
      }
    }
    for (int i = 0; i < 5 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void Coordinator::TryStart(JobRecord job, const std::vector<std::string>& unreachable) {
  v1::RunPlan run;
  run.ParseFromString(job.run);
  v1::JobSpec spec = job.spec;
  for (const auto& s : unreachable) spec.add_avoided_sites(s);
  v1::JobSpec avoiding = spec;
  for (const auto& s : run.avoided_sites()) avoiding.add_avoided_sites(s);
  auto plan = core_->Plan(avoiding);
  // Sites that failed an earlier attempt are avoided while another placement
  // exists; if none does, a failed site that is back up (fresh ad) may serve.
  if (plan.ok() && !plan->placeable() && run.avoided_sites_size() > 0) plan = core_->Plan(spec);
  const int64_t now = core_->clock()->NowMs();
  if (!plan.ok() || !plan->placeable()) {
    const std::string reason = plan.ok() ? StrCat("waiting for capacity: ", plan->summary())
                                         : std::string(plan.status().message());
    if (reason != job.reason) {
      job.reason = reason;
      job.updated_at_unix_ms = now;
      (void)store_->Save(job);
    }
    return;
  }
  // The virtual cluster: ranks site by site, node by node.
  const uint64_t epoch = last_epoch_ = std::max<uint64_t>(last_epoch_ + 1, now);
  v1::RunPlan next;
  next.set_epoch(epoch);
  next.set_world_size(job.spec.gpus());
  *next.mutable_avoided_sites() = run.avoided_sites();
  std::map<std::string, v1::SiteRun*> by_site;
  uint32_t group = 0;
  for (const auto& sl : plan->slices()) {
    if (!by_site.contains(sl.site())) {
      by_site[sl.site()] = next.add_sites();
      by_site[sl.site()]->set_site(sl.site());
    }
    for (uint32_t g = 0; g < sl.gpus(); ++g) {
      auto* r = by_site[sl.site()]->add_ranks();
      r->set_rank(sl.first_rank() + g);
      r->set_local_rank(g);
      r->set_local_world_size(sl.gpus());
      r->set_group_rank(group);
      r->set_node(sl.node());
    }
    ++group;
  }
  const auto& first = plan->slices(0);
  next.set_master_addr(core_->NodeAddress(first.site(), first.node()));
  const uint32_t previous_attempt = job.attempt;
  job.attempt = previous_attempt + 1;
  job.state = "RESERVING";
  job.reason = StrCat("reserving on ", next.sites_size(), " site(s)");
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = now;
  if (!store_->Save(job).ok()) return;
  CrashPoint("coordinator-after-reserving");

  // Phase one: hold GPUs everywhere; rank 0's site also picks MASTER_PORT.
  std::string failed;
  for (auto& site : *next.mutable_sites()) {
    v1::PrepareRequest req;
    *req.mutable_key() = Key(job, epoch);
    std::map<std::string, uint32_t> per_node;
    for (const auto& r : site.ranks()) per_node[r.node()]++;
    for (const auto& [node, n] : per_node) {
      auto* a = req.add_nodes();
      a->set_node(node);
      a->set_gpus(n);
    }
    req.set_hold_ttl_ms(kHoldTtlMs);
    req.set_pick_master_port(&site == &next.sites(0));
    auto resp = Prepare(site.site(), req);
    if (!resp.ok()) {
      failed = StrCat(site.site(), ": ", resp.status().message());
      break;
    }
    if (req.pick_master_port()) next.set_master_port(resp->master_port());
    std::map<std::string, std::vector<uint32_t>> gpus;
    for (const auto& h : resp->holds()) gpus[h.node()].assign(h.indices().begin(), h.indices().end());
    std::map<std::string, size_t> used;
    for (auto& r : *site.mutable_ranks()) r.set_gpu(gpus[r.node()].at(used[r.node()]++));
    CrashPoint("coordinator-after-prepare");
  }
  if (!failed.empty()) {
    for (const auto& site : next.sites()) {
      v1::AbortRequest a;
      *a.mutable_key() = Key(job, epoch);
      a.set_reason("reservation failed");
      (void)Abort(site.site(), a);
    }
    job.attempt = previous_attempt;
    job.state = "PENDING";
    job.reason = StrCat("reservation failed at ", failed, "; will retry");
    job.updated_at_unix_ms = core_->clock()->NowMs();
    (void)store_->Save(job);
    spdlog::warn("job {}: {}", job.id, job.reason);
    return;
  }
  // The decision, durable before any commit.
  job.state = "RUNNING";
  job.reason = StrCat("running on ", next.sites_size(), " site(s), attempt ", job.attempt);
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = core_->clock()->NowMs();
  if (!store_->Save(job).ok()) return;
  spdlog::info("job {} attempt {}: committed on {} site(s), master {}:{}", job.id, job.attempt,
               next.sites_size(), next.master_addr(), next.master_port());
  CrashPoint("coordinator-after-decision");
  for (const auto& site : next.sites()) {
    if (auto st = CommitSite(job, next, site); !st.ok()) {
      Fail(job, next, StrCat("commit failed at ", site.site(), ": ", st.message()), site.site());
      return;
    }
    last_ok_[job.id][site.site()] = core_->clock()->NowMs();
    CrashPoint("coordinator-after-first-commit");
  }
}

absl::Status Coordinator::CommitSite(const JobRecord& job, const v1::RunPlan& run,
                                     const v1::SiteRun& site) {
  v1::CommitRequest c;
  *c.mutable_key() = Key(job, run.epoch());
  *c.mutable_ranks() = site.ranks();
  c.set_world_size(run.world_size());
  c.set_master_addr(run.master_addr());
  c.set_master_port(run.master_port());
  *c.mutable_command() = job.spec.command();
  *c.mutable_env() = job.spec.env();
  c.set_lease_ms(lease_ms_);
  return Commit(site.site(), c);
}

void Coordinator::Drive(JobRecord job) {
  v1::RunPlan run;
  run.ParseFromString(job.run);
  if (job.state == "RESERVING") {
    // A reservation interrupted by a restart of this coordinator: undo it.
    for (const auto& site : run.sites()) {
      v1::AbortRequest a;
      *a.mutable_key() = Key(job, run.epoch());
      a.set_reason("the coordinator restarted during the reservation");
      (void)Abort(site.site(), a);
    }
    job.attempt = job.attempt > 0 ? job.attempt - 1 : 0;
    job.state = "PENDING";
    job.reason = "reservation interrupted by a coordinator restart; will retry";
    job.updated_at_unix_ms = core_->clock()->NowMs();
    (void)store_->Save(job);
    return;
  }
  const int64_t now = core_->clock()->NowMs();
  auto& seen = last_ok_[job.id];
  int succeeded = 0;
  for (const auto& site : run.sites()) {
    v1::SliceStatusRequest req;
    *req.mutable_key() = Key(job, run.epoch());
    req.set_lease_ms(lease_ms_);
    auto st = Status(site.site(), req);
    if (!seen.contains(site.site())) seen[site.site()] = now;  // e.g. after a restart
    if (!st.ok()) {
      if (now - seen[site.site()] > lease_ms_) {
        Fail(job, run, StrCat("site ", site.site(), " silent for ", (now - seen[site.site()]) / 1000,
                              " s: ", st.status().message()),
             site.site());
        return;
      }
      continue;
    }
    seen[site.site()] = now;
    if (st->state() == "held") {
      // The decision is durable but this site never got its commit (the
      // coordinator restarted in between): re-drive it.
      spdlog::info("job {}: re-sending the commit to {}", job.id, site.site());
      if (auto c = CommitSite(job, run, site); !c.ok()) {
        Fail(job, run, StrCat("commit failed at ", site.site(), ": ", c.message()), site.site());
        return;
      }
      continue;
    }
    if (st->state() == "succeeded") {
      ++succeeded;
    } else if (st->state() == "failed" || st->state() == "unknown") {
      std::string codes;
      for (const auto& [rank, code] : st->exit_codes()) {
        if (code != 0) codes += StrCat(codes.empty() ? "" : ", ", "rank ", rank, " exit ", code);
      }
      // Only a silent site is avoided next time: ranks that exited non-zero,
      // a slice stopped by its lease, or a slice lost in a gateway restart
      // say nothing against the site.
      const bool lost = st->state() == "unknown";
      Fail(job, run,
           StrCat("site ", site.site(), ": ", lost ? "lost the slice (gateway restarted?)" : "",
                  st->message(), codes.empty() ? "" : StrCat(" (", codes, ")")),
           "");
      return;
    }
  }
  if (succeeded == run.sites_size()) {
    job.state = "SUCCEEDED";
    job.reason = StrCat("all ", run.world_size(), " rank(s) exited 0 on ", run.sites_size(),
                        " site(s)");
    job.updated_at_unix_ms = now;
    (void)store_->Save(job);
    last_ok_.erase(job.id);
    spdlog::info("job {} succeeded", job.id);
  }
}

void Coordinator::Fail(JobRecord job, const v1::RunPlan& run, const std::string& reason,
                       const std::string& bad_site) {
  AbortRun(job, reason);
  v1::RunPlan next = run;
  if (!bad_site.empty()) next.add_avoided_sites(bad_site);
  job.run = next.SerializeAsString();
  job.updated_at_unix_ms = core_->clock()->NowMs();
  const uint32_t max_attempts = std::max<uint32_t>(1, job.spec.max_attempts());
  if (job.attempt >= max_attempts) {
    job.state = "FAILED";
    job.reason = StrCat("attempt ", job.attempt, " of ", max_attempts, " failed: ", reason);
  } else {
    job.state = "PENDING";
    job.reason = StrCat("attempt ", job.attempt, " failed: ", reason, "; retrying",
                        bad_site.empty() ? "" : StrCat(" without ", bad_site));
  }
  (void)store_->Save(job);
  last_ok_.erase(job.id);
  spdlog::warn("job {}: {}", job.id, job.reason);
}

void Coordinator::AbortRun(const JobRecord& job, const std::string& reason) {
  v1::RunPlan run;
  if (!run.ParseFromString(job.run)) return;
  for (const auto& site : run.sites()) {
    v1::AbortRequest a;
    *a.mutable_key() = Key(job, run.epoch());
    a.set_reason(reason);
    if (auto st = Abort(site.site(), a); !st.ok()) {
      spdlog::warn("job {}: abort at {} failed: {} (its lease will stop it)", job.id, site.site(),
                   std::string(st.message()));
    }
  }
}

absl::StatusOr<v1::ReadLogResponse> Coordinator::ReadLog(const JobRecord& job, uint32_t rank) {
  v1::RunPlan run;
  run.ParseFromString(job.run);
  for (const auto& site : run.sites()) {
    for (const auto& r : site.ranks()) {
      if (r.rank() != rank) continue;
      if (site.site() == core_->config().site) return local_->ReadLog(job.id, rank);
      auto stub = Stub(site.site());
      if (stub == nullptr) return absl::UnavailableError(StrCat(site.site(), " is not a peer"));
      v1::ReadLogRequest req;
      req.set_site(core_->config().site);
      req.set_job_id(job.id);
      req.set_rank(rank);
      grpc::ClientContext ctx;
      Deadline(&ctx);
      v1::ReadLogResponse resp;
      if (auto st = FromGrpc(stub->ReadLog(&ctx, req, &resp)); !st.ok()) return st;
      return resp;
    }
  }
  return absl::NotFoundError(job.run.empty() ? StrCat("job ", job.id, " has not run yet")
                                             : StrCat("job ", job.id, " has no rank ", rank));
}

}  // namespace fedgate::gateway
