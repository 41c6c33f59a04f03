#include "gateway/jobs/participant.h"
#include "gateway/jobs/retention.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <cstring>
#include <set>
#include <cstdio>
#include <optional>
#include <fstream>
#include <sstream>

#include "federation/clock.h"
#include "federation/names.h"
#include "federation/preemption.h"
#include "federation/saturating.h"
#include "base/str_cat.h"
#include "gateway/jobs/crash_point.h"
#include "gateway/store/store.h"

namespace fedgate::gateway {
namespace {

std::map<std::string, uint32_t> NodeSizes(const Config& c) {
  std::map<std::string, uint32_t> out;
  for (const auto& n : c.nodes) out[n.name] = n.gpus;
  return out;
}

constexpr int64_t kKillGraceMs = 3000;
// How long a finished slice's state stays answerable, and its job's epoch
// and owner remembered.
constexpr int64_t kFinishedSliceKeepMs = 10 * 60 * 1000;

}  // namespace

Participant::Participant(const Config& config, const federation::Clock* clock, Store* store,
                         size_t max_finished)
    : config_(config),
      clock_(clock),
      max_finished_(max_finished),
      store_(store),
      ledger_(NodeSizes(config)) {
  // Configs from files always name one (config.cc); tests and tools may not.
  if (config_.executor_work_dir.empty()) config_.executor_work_dir = config_.data_dir + "/work";
  ledger_.SetPortRange(config_.executor_port_lo, config_.executor_port_hi);
  for (const auto& q : config_.tenants) (void)quota_.SetQuota(q);
}

void Participant::CleanUpAfterRestart() {
  if (store_ != nullptr) {
    for (const auto& n : config_.nodes) {
      auto v = store_->GetKv(StrCat("cordon/", n.name));
      if (v.ok() && v->has_value() && **v == "1") {
        std::lock_guard lock(mu_);
        ledger_.SetCordoned(n.name, true);
        spdlog::info("node {} stays cordoned (as before the restart)", n.name);
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto stored = store_ != nullptr ? store_->LoadSlices() : std::vector<StoredSlice>{};
  if (!stored.ok()) return;
  std::lock_guard lock(mu_);
  std::set<SliceKey> attached;
  for (const auto& ss : *stored) {
    // Supervised ranks outlived the gateway: follow them to their end.
    v1::SliceRecord rec;
    const bool parsed = !ss.detail.empty() && rec.ParseFromString(ss.detail);
    if (exec_.supervised() && parsed && ReattachLocked(ss.job_id, ss.attempt, ss.epoch, rec)) {
      attached.insert({ss.job_id, ss.epoch});
      continue;
    }
    // Its reservations go with it (the next sweep gives them back: no hold).
    if (parsed && !rec.backend_ids().empty()) {
      Allocs& stale = allocs_[{ss.job_id, ss.epoch}];
      for (const auto& [node, id] : rec.backend_ids()) stale[node] = {id, 0};
    }
    Slice s;
    s.key.set_job_id(ss.job_id);
    s.key.set_attempt(ss.attempt);
    s.key.set_epoch(ss.epoch);
    s.state = SliceState::FAILED;
    s.message = "the gateway restarted while the slice ran; its ranks were stopped";
    s.stopping = true;
    std::istringstream in(ss.procs);
    std::string entry;
    int killed = 0;
    while (std::getline(in, entry, ',')) {
      uint32_t rank = 0;
      long pid = 0;
      unsigned long long start = 0;
      if (std::sscanf(entry.c_str(), "%u:%ld:%llu", &rank, &pid, &start) != 3) continue;
      auto now_start = ProcStartTime(static_cast<pid_t>(pid));
      if (now_start && *now_start == start) {
        ::kill(-static_cast<pid_t>(pid), SIGKILL);
        ++killed;
      }
      RankProc p;
      p.rank = rank;
      p.exited = true;
      p.code = 128 + SIGKILL;
      s.ranks.push_back(p);
    }
    spdlog::warn("job {}: found {} rank(s) of a slice from before the restart; stopped {}",
                 ss.job_id, s.ranks.size(), killed);
    slices_[{ss.job_id, ss.epoch}] = std::move(s);
    (void)store_->DeleteSlice(ss.job_id, ss.epoch);
  }
  if (!attached.empty()) {
    spdlog::info("re-attached {} slice(s) in {:.1f} ms", attached.size(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                     .count());
  }
  QueueLeftoverCgroupsLocked();
  // Usage of slices that were stopped ends now (at most the open interval
  // of a crash is counted, never a finished record lost); re-attached ones
  // stay open until their ranks exit.
  if (store_ != nullptr) {
    // Only records still open overlap a window that starts now.
    auto open = store_->ListUsage(clock_->NowMs(), INT64_MAX, "");
    std::vector<federation::UsageRecord> closed;
    if (open.ok()) {
      for (const auto& r : *open) {
        if (r.end_ms != 0 || attached.contains({r.job_id, r.epoch})) continue;
        auto c = store_->CloseUsage(r.job_id, r.epoch, clock_->NowMs(),
                                    "gateway restarted: ranks stopped");
        if (c.ok()) closed.insert(closed.end(), c->begin(), c->end());
      }
    }
    if (!closed.empty()) {
      spdlog::info("closed {} usage record(s) of slices that ran before the restart", closed.size());
      if (on_usage_) on_usage_(closed);
    }
  }
}

bool Participant::ReattachLocked(const std::string& job_id, uint32_t attempt, uint64_t epoch,
                                 const v1::SliceRecord& rec) {
  federation::Hold h;
  h.job_id = job_id;
  h.attempt = attempt;
  h.epoch = epoch;
  h.coordinator = rec.coordinator();
  h.tenant = rec.tenant();
  h.priority = rec.priority();
  for (const auto& g : rec.gpus()) h.gpus.push_back({g.node(), {g.indices().begin(), g.indices().end()}});
  h.master_port = rec.master_port();
  if (!rec.backend_ids().empty()) {
    Allocs& allocs = allocs_[{job_id, epoch}];
    for (const auto& g : rec.gpus()) {
      auto j = rec.backend_ids().find(g.node());
      if (j != rec.backend_ids().end()) allocs[g.node()] = {j->second, static_cast<uint32_t>(g.indices_size())};
    }
  }
  const int64_t now = clock_->NowMs();
  if (auto st = ledger_.Restore(h, now); !st.ok()) {
    spdlog::error("job {}: cannot re-attach: {}", job_id, std::string(st.message()));
    return false;
  }
  Slice s;
  s.key.set_job_id(job_id);
  s.key.set_attempt(attempt);
  s.key.set_epoch(epoch);
  s.preemptible = rec.preemptible();
  s.started_at_ms = rec.started_at_unix_ms();
  s.cgroup = rec.cgroup();
  for (const auto& g : h.gpus) s.gpus_by_node[g.node] += g.indices.size();
  // A fresh lease: the coordinator's renewals find the slice again.
  s.lease_ms = federation::ClampMs(rec.lease_ms(), 1000, 60 * 60 * 1000);
  s.lease_deadline_ms = federation::SatAdd(now, s.lease_ms);
  size_t alive = 0;
  for (const auto& r : rec.ranks()) {
    RankProc p;
    p.rank = r.rank();
    p.pid = static_cast<pid_t>(r.pid());
    p.start_time = r.start_time();
    p.exit_file = r.exit_file();
    if (auto code = exec_.Poll(p.pid, p.exit_file, p.start_time)) {
      p.exited = true;
      p.code = *code;
    } else {
      ++alive;
    }
    if (!r.preempt_file().empty()) s.preempt_files.push_back(r.preempt_file());
    s.ranks.push_back(p);
  }
  spdlog::info("job {} attempt {}: re-attached to {} rank(s) ({} still running)", job_id, attempt,
               s.ranks.size(), alive);
  slices_[{job_id, epoch}] = std::move(s);
  return true;
}

std::string Participant::WorkDir(const std::string& job) const {
  return StrCat(config_.executor_work_dir, "/", job);
}

Participant::~Participant() { Stop(); }

void Participant::Start() {
  LoadQuotas();
  RefreshNodes();  // the backend's nodes first: re-attached holds land on them
  CleanUpAfterRestart();
  sweeper_ = std::thread([this] {
    int64_t next_retention = 0;
    auto next_nodes = std::chrono::steady_clock::now();
    while (!stop_) {
      Sweep();
      if (std::chrono::steady_clock::now() >= next_nodes) {
        RefreshNodes();
        next_nodes = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(config_.advertise_interval_ms);
      }
      // Once a minute (and at start): logs and job folders past retention.
      const int64_t wall = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
      if (wall >= next_retention) {
        std::set<std::string> live;
        {
          std::lock_guard lock(mu_);
          for (const auto& [key, s] : slices_) {
            if (!s.released) live.insert(key.first);
          }
          for (const auto& [key, h] : ledger_.holds()) live.insert(key.first);
        }
        ApplyRetention(config_.data_dir + "/jobs", config_.executor_work_dir, wall,
                       config_.retention_logs_ms, config_.retention_jobs_ms, live);
        next_retention = wall + 60'000;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

void Participant::Detach() {
  if (!exec_.supervised()) {
    Stop();
    return;
  }
  {
    std::lock_guard lock(mu_);
    detached_ = true;
  }
  if (stop_.exchange(true)) return;
  if (sweeper_.joinable()) sweeper_.join();
  spdlog::info("leaving {} slice(s) running under their shims", slices_.size());
}

void Participant::Stop() {
  {
    std::lock_guard lock(mu_);
    if (detached_) return;  // supervised ranks were left running on purpose
  }
  if (stop_.exchange(true)) return;
  if (sweeper_.joinable()) sweeper_.join();
  // Ranks are left running: they stop by themselves when their lease lapses
  // only while a gateway sweeps, so stop them here instead.
  std::lock_guard lock(mu_);
  for (auto& [key, s] : slices_) {
    if (s.state == SliceState::RUNNING) StopSliceLocked(&s, "gateway shutting down");
  }
  for (auto& [key, s] : slices_) {
    for (auto& r : s.ranks) {
      if (!r.exited) exec_.Signal(r.pid, SIGKILL);
    }
    KillCgroup(s.cgroup);
  }
  // Released slices' cgroups still waiting for their processes to exit.
  for (int i = 0; i < 50 && !cgroups_to_remove_.empty(); ++i) {
    RemoveCgroupsLocked();
    if (!cgroups_to_remove_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

absl::Status Participant::WriteLogOwner(const std::string& job, const std::string& from) {
  const std::string dir = StrCat(config_.data_dir, "/jobs/", job);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(dir + "/owner", std::ios::trunc);
  out << from << "\n";
  out.close();
  if (ec || !out) {
    return absl::InternalError(StrCat("cannot write ", dir, "/owner: ",
                                      ec ? ec.message() : std::strerror(errno)));
  }
  return absl::OkStatus();
}

// The highest attempt-N folder of a job's logs (0 when there is none).
uint32_t Participant::LatestAttempt(const std::string& dir) {
  uint32_t best = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename();
    if (name.rfind("attempt-", 0) != 0) continue;
    uint32_t n = 0;
    const char* first = name.data() + 8;
    const char* last = name.data() + name.size();
    auto [p, err] = std::from_chars(first, last, n);
    if (err == std::errc() && p == last) best = std::max(best, n);
  }
  return best;
}

std::string Participant::LogPath(const std::string& job, uint32_t attempt, uint32_t rank) const {
  return StrCat(config_.data_dir, "/jobs/", job, "/attempt-", attempt, "/rank-", rank, ".log");
}

namespace {
constexpr const char* kQuotasKey = "quotas";
constexpr const char* kQuotaHoldsKey = "quota_holds";
constexpr const char* kQuotaHoldPrefix = "quota_hold/";
}  // namespace

void Participant::LoadQuotas() {
  std::lock_guard lock(mu_);
  if (store_ == nullptr) return;
  // Quotas set with `fedctl quota set` override the config file's.
  if (auto v = store_->GetKv(kQuotasKey); v.ok() && v->has_value()) {
    v1::QuotasResponse stored;
    if (stored.ParseFromString(**v)) {
      for (const auto& t : stored.quotas()) {
        federation::TenantQuota q{t.tenant(), t.gpus(), {t.models().begin(), t.models().end()},
                                  t.borrow(), t.weight() > 0 ? t.weight() : 1};
        if (auto st = quota_.SetQuota(q); !st.ok()) {
          spdlog::error("stored quota of tenant {} ignored: {}", t.tenant(), std::string(st.message()));
        }
      }
    }
  }
  // Quota holds survive a restart: forgetting them would over-admit. Each
  // gets a fresh lease, so its coordinator's renewals can find it again.
  // (Before one row per hold, all holds were one record under "quota_holds".)
  std::vector<v1::QuotaHoldRecord> recs;
  if (auto v = store_->GetKv(kQuotaHoldsKey); v.ok() && v->has_value()) {
    v1::QuotaHoldRecords old;
    if (old.ParseFromString(**v)) recs.assign(old.holds().begin(), old.holds().end());
  }
  if (auto rows = store_->ListKv(kQuotaHoldPrefix); rows.ok()) {
    for (const auto& [k, v] : *rows) {
      v1::QuotaHoldRecord r;
      if (r.ParseFromString(v)) recs.push_back(r);
    }
  }
  const int64_t fresh = federation::SatAdd(clock_->NowMs(), 2 * config_.jobs_lease_ms);
  for (const auto& r : recs) {
    federation::QuotaHold h;
    h.job_id = r.key().job_id();
    h.attempt = r.key().attempt();
    h.epoch = r.key().epoch();
    h.coordinator = r.coordinator();
    h.tenant = r.tenant();
    h.gpus = {r.gpus().begin(), r.gpus().end()};
    h.cls = r.borrowed() ? federation::QuotaClass::kBorrowed : federation::QuotaClass::kGuaranteed;
    h.committed = r.committed();
    h.expires_at_ms = std::max(r.expires_at_unix_ms(), fresh);
    quota_.Restore(h);
    PersistQuotaHold(h);
  }
  (void)store_->DeleteKv(kQuotaHoldsKey);
  if (!recs.empty()) spdlog::info("restored {} quota hold(s)", recs.size());
  for (const auto& [t, q] : quota_.quotas()) {
    spdlog::info("governing tenant {}: {} GPU(s), borrow {}", t, q.gpus, q.borrow);
  }
}

// Only a commit must be durable before it answers: a prepared hold lost in
// a crash makes its commit fail (the job is reserved again), and a release
// lost in a crash only holds quota until the restored hold's lease lapses.
// So released holds' rows are deleted by the next sweep.
static std::string QuotaHoldRow(const std::string& job_id, uint64_t epoch) {
  return StrCat(kQuotaHoldPrefix, job_id, "/", epoch);
}

void Participant::PersistQuotaHold(const federation::QuotaHold& h) {
  if (store_ == nullptr) return;
  v1::QuotaHoldRecord r;
  r.mutable_key()->set_job_id(h.job_id);
  r.mutable_key()->set_attempt(h.attempt);
  r.mutable_key()->set_epoch(h.epoch);
  r.set_coordinator(h.coordinator);
  r.set_tenant(h.tenant);
  for (const auto& [m, g] : h.gpus) (*r.mutable_gpus())[m] = g;
  r.set_borrowed(h.cls == federation::QuotaClass::kBorrowed);
  r.set_committed(h.committed);
  r.set_expires_at_unix_ms(h.expires_at_ms);
  if (auto st = store_->PutKv(QuotaHoldRow(h.job_id, h.epoch), r.SerializeAsString()); !st.ok()) {
    spdlog::error("cannot store the quota hold of job {}: {}", h.job_id, std::string(st.message()));
    return;
  }
  std::lock_guard lock(stored_mu_);
  stored_quota_holds_.insert({h.job_id, h.epoch});
}

std::vector<std::pair<std::string, uint64_t>> Participant::ReleasedQuotaRowsLocked() {
  quota_dirty_ = false;
  std::vector<std::pair<std::string, uint64_t>> out;
  if (store_ == nullptr) return out;
  std::lock_guard lock(stored_mu_);
  for (const auto& key : stored_quota_holds_) {
    if (!quota_.holds().contains(key)) out.push_back(key);
  }
  return out;
}

void Participant::DeleteQuotaRows(const std::vector<std::pair<std::string, uint64_t>>& released) {
  if (released.empty()) return;
  std::vector<std::string> rows;
  for (const auto& [job, epoch] : released) rows.push_back(QuotaHoldRow(job, epoch));
  if (auto st = store_->DeleteKvs(rows); !st.ok()) {
    // They stay listed and are tried again by the next sweep that has any.
    spdlog::error("cannot delete {} released quota hold(s): {}", rows.size(),
                  std::string(st.message()));
    std::lock_guard lock(mu_);
    quota_dirty_ = true;
    return;
  }
  std::lock_guard lock(stored_mu_);
  for (const auto& key : released) stored_quota_holds_.erase(key);
}

v1::TenantQuota Participant::QuotaViewLocked(const federation::TenantQuota& q) const {
  v1::TenantQuota v;
  v.set_tenant(q.tenant);
  v.set_home(config_.site);
  v.set_gpus(q.gpus);
  for (const auto& [m, g] : q.models) (*v.mutable_models())[m] = g;
  v.set_borrow(q.borrow);
  v.set_weight(q.weight);
  const auto use = quota_.Use(q.tenant);
  v.set_used_gpus(use.guaranteed);
  v.set_borrowed_gpus(use.borrowed);
  return v;
}

std::vector<v1::TenantQuota> Participant::Quotas() {
  std::lock_guard lock(mu_);
  std::vector<v1::TenantQuota> out;
  for (const auto& [t, q] : quota_.quotas()) out.push_back(QuotaViewLocked(q));
  return out;
}

absl::StatusOr<v1::TenantQuota> Participant::SetQuota(const federation::TenantQuota& q) {
  if (auto st = federation::ValidateQuota(q); !st.ok()) return st;
  if (!federation::IsValidName(q.tenant)) {
    return absl::InvalidArgumentError(StrCat("invalid tenant name \"", q.tenant.substr(0, 64), "\""));
  }
  v1::TenantQuota view;
  {
    std::lock_guard lock(mu_);
    federation::QuotaLedger next = quota_;
    (void)next.SetQuota(q);
    v1::QuotasResponse all;
    for (const auto& [t, tq] : next.quotas()) {
      auto* v = all.add_quotas();
      v->set_tenant(tq.tenant);
      v->set_gpus(tq.gpus);
      for (const auto& [m, g] : tq.models) (*v->mutable_models())[m] = g;
      v->set_borrow(tq.borrow);
      v->set_weight(tq.weight);
    }
    // Durable first, like a cordon: a restart must not forget it.
    if (store_ != nullptr) {
      if (auto st = store_->PutKv(kQuotasKey, all.SerializeAsString()); !st.ok()) return st;
    }
    (void)quota_.SetQuota(q);
    view = QuotaViewLocked(q);
  }
  spdlog::info("quota of tenant {} set: {} GPU(s), borrow {}", q.tenant, q.gpus, q.borrow);
  if (on_change_) on_change_();
  return view;
}

federation::NodeExtras Participant::NodeExtras() {
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMs();
  federation::NodeExtras out;
  for (const auto& [key, s] : slices_) {
    if (!s.preemptible || s.stopping || s.state != SliceState::RUNNING ||
        now - s.started_at_ms < config_.preemption_min_runtime_ms) {
      continue;
    }
    for (const auto& [node, g] : s.gpus_by_node) out[node].preemptible += g;
  }
  for (const auto& [node, jobs] : ledger_.earmarks()) {
    for (const auto& [job, mark] : jobs) out[node].kept_for[job] = mark.first;
  }
  return out;
}

std::map<std::string, uint32_t> Participant::FreeGpus() {
  std::lock_guard lock(mu_);
  std::map<std::string, uint32_t> out;
  for (const auto& n : config_.nodes) out[n.name] = ledger_.FreeGpus(n.name);
  return out;
}

absl::StatusOr<std::vector<federation::UsageRecord>> Participant::Usage(int64_t since_ms,
                                                                       int64_t until_ms,
                                                                       const std::string& tenant) {
  if (store_ == nullptr) return std::vector<federation::UsageRecord>{};
  return store_->ListUsage(since_ms, until_ms, tenant);
}

absl::StatusOr<v1::ListUsageResponse> Participant::ListUsage(const std::string& /*from*/,
                                                             const v1::ListUsageRequest& req) {
  const int64_t until = req.until_unix_ms() > 0 ? req.until_unix_ms() : INT64_MAX;
  auto recs = Usage(req.since_unix_ms(), until, req.tenant());
  if (!recs.ok()) return recs.status();
  v1::ListUsageResponse out;
  out.set_now_unix_ms(clock_->NowMs());
  for (const auto& r : *recs) {
    auto* p = out.add_records();
    p->set_job_id(r.job_id);
    p->set_attempt(r.attempt);
    p->set_epoch(r.epoch);
    p->set_site(r.site);
    p->set_node(r.node);
    p->set_gpu_model(r.gpu_model);
    p->set_gpus(r.gpus);
    p->set_tenant(r.tenant);
    p->set_priority(r.priority);
    p->set_start_unix_ms(r.start_ms);
    p->set_end_unix_ms(r.end_ms);
    p->set_reason(r.reason);
  }
  return out;
}

const federation::Node* Participant::FindNode(const std::string& name) const {
  for (const auto& n : config_.nodes) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

v1::NodeView Participant::NodeLocked(const federation::Node& n) const {
  v1::NodeView v;
  v.set_name(n.name);
  v.set_gpu_model(n.gpu_model);
  v.set_gpus(n.gpus);
  v.set_free_gpus(ledger_.FreeGpus(n.name));
  if (auto u = ledger_.unhealthy().find(n.name); u != ledger_.unhealthy().end()) {
    for (uint32_t i : u->second) v.add_unhealthy_gpus(i);
  }
  v.set_cordoned(ledger_.cordoned(n.name));
  uint32_t running = 0;
  for (const auto& [key, h] : ledger_.holds()) {
    if (h.state == federation::HoldState::kPrepared) continue;
    for (const auto& g : h.gpus) running += g.node == n.name ? 1 : 0;
  }
  v.set_running_slices(running);
  return v;
}

std::vector<v1::NodeView> Participant::Nodes() {
  std::lock_guard lock(mu_);
  std::vector<v1::NodeView> out;
  for (const auto& n : config_.nodes) out.push_back(NodeLocked(n));
  return out;
}

absl::StatusOr<v1::NodeView> Participant::SetCordoned(const std::string& node, bool cordoned) {
  const federation::Node* n = FindNode(node);
  if (n == nullptr) return absl::NotFoundError(StrCat("no node \"", node.substr(0, 64), "\" at this site"));
  // Durable first: a restart must not quietly put a cordoned node back to work.
  if (store_ != nullptr) {
    if (auto st = store_->PutKv(StrCat("cordon/", node), cordoned ? "1" : "0"); !st.ok()) return st;
  }
  v1::NodeView v;
  {
    std::lock_guard lock(mu_);
    ledger_.SetCordoned(node, cordoned);
    v = NodeLocked(*n);
  }
  spdlog::info("node {} {}", node, cordoned ? "cordoned: it takes no new work" : "uncordoned");
  if (on_change_) on_change_();
  return v;
}

absl::StatusOr<uint32_t> Participant::StopSlicesOn(const std::string& node, const std::string& why) {
  if (FindNode(node) == nullptr) {
    return absl::NotFoundError(StrCat("no node \"", node.substr(0, 64), "\" at this site"));
  }
  std::lock_guard lock(mu_);
  uint32_t stopped = 0;
  for (const auto& [key, h] : ledger_.holds()) {
    if (h.state != federation::HoldState::kCommitted) continue;
    bool here = false;
    for (const auto& g : h.gpus) here = here || g.node == node;
    auto s = slices_.find(key);
    if (!here || s == slices_.end() || s->second.stopping) continue;
    StopSliceLocked(&s->second, why);
    ++stopped;
  }
  return stopped;
}

void Participant::SetUnhealthy(const std::map<std::string, std::set<uint32_t>>& failed,
                               const std::map<std::pair<std::string, uint32_t>, std::string>& why) {
  {
    std::lock_guard lock(mu_);
    for (const auto& n : config_.nodes) {
      auto it = failed.find(n.name);
      const std::set<uint32_t> bad = it == failed.end() ? std::set<uint32_t>{} : it->second;
      for (const auto& key : ledger_.SetUnhealthy(n.name, bad)) {
        auto s = slices_.find(key);
        if (s == slices_.end()) continue;
        // Name the GPU(s) of this slice that failed, so the job's reason says why.
        std::string gpus;
        if (const auto* hold = ledger_.Find(key.first, key.second)) {
          for (const auto& g : hold->gpus) {
            for (uint32_t i : g.indices) {
              if (g.node != n.name || !bad.contains(i)) continue;
              auto w = why.find({g.node, i});
              gpus += StrCat(gpus.empty() ? "" : ", ", g.node, ":", i,
                             w == why.end() || w->second.empty() ? "" : StrCat(" (", w->second, ")"));
            }
          }
        }
        StopSliceLocked(&s->second, StrCat("GPU ", gpus, " failed its health check"));
      }
    }
    ledger_.CheckInvariants();
  }
  if (on_change_) on_change_();
}

namespace {

absl::Status CheckJobId(const std::string& id) {
  if (federation::IsValidJobId(id)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("malformed job id \"", id.substr(0, 40), "\" (want j- and 16 hex digits)"));
}

// Bounds on what a coordinator may ask of this site.
constexpr int64_t kMinHoldTtlMs = 1000, kMaxHoldTtlMs = 10 * 60 * 1000;
constexpr int64_t kMinLeaseMs = 1000, kMaxLeaseMs = 60 * 60 * 1000;
constexpr uint32_t kMaxWorldSize = 1 << 20;
constexpr size_t kMaxCommandBytes = 64 << 10, kMaxEnvBytes = 256 << 10;
constexpr uint32_t kMaxLogChunk = 1 << 20;

}  // namespace

absl::StatusOr<v1::PrepareResponse> Participant::Prepare(const std::string& from,
                                                         const v1::PrepareRequest& req) {
  const auto& key = req.key();
  if (auto st = CheckJobId(key.job_id()); !st.ok()) return st;
  std::vector<federation::NodeRequest> want;
  for (const auto& n : req.nodes()) want.push_back({n.node(), n.gpus()});
  std::map<std::string, uint32_t> quota_gpus;
  for (const auto& [model, n] : req.quota_gpus()) {
    if (n == 0 || n > kMaxWorldSize) {
      return absl::InvalidArgumentError(StrCat("quota_gpus.", model.substr(0, 64), " out of range"));
    }
    quota_gpus[model] = n;
  }
  const int64_t ttl = federation::ClampMs(req.hold_ttl_ms(), kMinHoldTtlMs, kMaxHoldTtlMs);
  v1::PrepareResponse resp;
  absl::Status preempting;  // not OK when victims are being stopped for this job
  bool quota_changed = false;  // a quota-only prepare (the tenant's home site)
  {
    std::lock_guard lock(mu_);
    const int64_t now = clock_->NowMs();
    if (!quota_gpus.empty()) {
      // The tenant's quota first: this site is its home.
      auto q = quota_.Prepare(key.job_id(), key.attempt(), key.epoch(), from, req.tenant(),
                              quota_gpus, now, ttl);
      if (!q.ok()) return q.status();
      resp.set_quota_class(federation::QuotaClassName(q->cls));
      if (want.empty()) {
        quota_changed = true;
        spdlog::info("job {} attempt {} epoch {}: holding {} GPU(s) of tenant {}'s quota ({})",
                     key.job_id(), key.attempt(), key.epoch(), q->total(), req.tenant(),
                     resp.quota_class());
      }
    }
  }
  // The tenant's use reaches the ad with the next advertise interval: a
  // re-advertise here (a store write for the ad's seq) would sit on every
  // reservation's critical path, and the home site decides anyway.
  if (quota_changed) return resp;
  {
    std::lock_guard lock(mu_);
    const int64_t now = clock_->NowMs();
    std::vector<federation::ReservationLedger::HoldKey> stopped;
    auto hold = ledger_.Prepare(key.job_id(), key.attempt(), key.epoch(),
                                {from, req.tenant(), req.priority()}, want, now, ttl, &stopped,
                                req.pick_master_port());
    if (!quota_gpus.empty() && !hold.ok()) {
      (void)quota_.Abort(key.job_id(), key.epoch(), from);
    }
    if (!hold.ok() && !(req.preempt() && absl::IsResourceExhausted(hold.status()))) {
      return hold.status();
    }
    if (!hold.ok()) {
      preempting = PreemptLocked(key.job_id(), want, hold.status());
    } else {
      // A newer epoch proves its coordinator moved on from older slices.
      for (const auto& k : stopped) {
        auto it = slices_.find(k);
        if (it != slices_.end()) StopSliceLocked(&it->second, "replaced by a newer attempt");
      }
      for (const auto& g : hold->gpus) {
        auto* h = resp.add_holds();
        h->set_node(g.node);
        for (uint32_t i : g.indices) h->add_indices(i);
      }
      resp.set_master_port(hold->master_port);
    }
  }
  if (!preempting.ok()) {
    if (on_change_) on_change_();  // victims leave the preemptible count
    return preempting;
  }
  bool reserved = false;  // a duplicate Prepare: the backend holds it already
  {
    std::lock_guard lock(mu_);
    reserved = allocs_.contains({key.job_id(), key.epoch()});
  }
  if (!reserved && backend_->Kind() != "process") {
    // The hold becomes real where a resource manager must agree (Slurm: an
    // allocation per node), so nobody else takes the GPUs before the
    // commit. Outside the lock: it takes time.
    std::map<std::string, uint32_t> gpus;
    for (const auto& h : resp.holds()) gpus[h.node()] += h.indices_size();
    auto allocs = backend_->Reserve(StrCat("fedgate-", key.job_id(), "-", key.attempt()), gpus,
                                    req.tenant(), exec_.user());
    std::lock_guard lock(mu_);
    const federation::Hold* h = ledger_.Find(key.job_id(), key.epoch());
    if (!allocs.ok() || h == nullptr) {
      // Refused, or aborted meanwhile: what was reserved is given back by
      // the next sweep, and the hold goes.
      if (allocs.ok()) allocs_[{key.job_id(), key.epoch()}] = std::move(*allocs);
      if (h != nullptr && h->state == federation::HoldState::kPrepared) {
        ledger_.Release(key.job_id(), key.epoch());
      }
      const absl::Status failed =
          allocs.ok() ? absl::AbortedError("aborted while the backend reserved") : allocs.status();
      spdlog::warn("job {}: {}", key.job_id(), std::string(failed.message()));
      return failed;
    }
    allocs_[{key.job_id(), key.epoch()}] = std::move(*allocs);
  }
  CrashPoint("participant-after-prepare");
  spdlog::info("job {} attempt {} epoch {}: holding GPUs for {}", key.job_id(), key.attempt(),
               key.epoch(), from);
  if (on_change_) on_change_();
  return resp;
}

absl::Status Participant::PreemptLocked(const std::string& job_id,
                                        const std::vector<federation::NodeRequest>& want,
                                        const absl::Status& refused) {
  const int64_t now = clock_->NowMs();
  std::map<std::string, uint32_t> asked, deficit;
  for (const auto& w : want) asked[w.node] += w.gpus;
  size_t waiting = 0;
  for (const auto& [node, n] : asked) {
    // GPUs this job will have once the victims it already chose have exited.
    uint32_t coming = 0;
    for (const auto& [key, s] : slices_) {
      if (s.preempted_by != job_id || s.released) continue;
      auto g = s.gpus_by_node.find(node);
      if (g != s.gpus_by_node.end()) {
        coming += g->second;
        ++waiting;
      }
    }
    const uint32_t have = ledger_.FreeGpusFor(node, job_id) + coming;
    if (n > have) deficit[node] = n - have;
  }
  const int64_t keep_until = federation::SatAdd(now, config_.preemption_grace_ms + 60'000);
  if (deficit.empty()) {
    for (const auto& [node, n] : asked) ledger_.Earmark(job_id, node, n, keep_until);
    return absl::UnavailableError(StrCat("preempting: waiting for ", waiting,
                                         " preempted slice(s) to stop; their GPUs are kept for job ",
                                         job_id));
  }
  std::vector<federation::VictimCandidate> candidates;
  std::map<std::string, SliceKey> by_id;
  for (const auto& [key, s] : slices_) {
    if (!s.preemptible || s.stopping || s.state != SliceState::RUNNING || key.first == job_id ||
        now - s.started_at_ms < config_.preemption_min_runtime_ms) {
      continue;
    }
    uint32_t gpus = 0;
    for (const auto& [node, g] : s.gpus_by_node) gpus += g;
    const std::string id = StrCat(key.first, "@", key.second);
    candidates.push_back({id, s.gpus_by_node, gpus * (now - s.started_at_ms) / 1000.0});
    by_id[id] = key;
  }
  auto victims = federation::ChooseVictims(candidates, deficit);
  if (!victims) {
    return absl::ResourceExhaustedError(
        StrCat(refused.message(), " (", candidates.size(),
               " preemptible slice(s) here do not free enough)"));
  }
  const int64_t deadline_s = (now + config_.preemption_grace_ms) / 1000;
  std::string names;
  for (const auto& id : *victims) {
    Slice& v = slices_.at(by_id.at(id));
    // The deadline first, then SIGTERM: a rank that traps it can read it.
    for (const auto& f : v.preempt_files) std::ofstream(f, std::ios::trunc) << deadline_s << "\n";
    v.preempted_by = job_id;
    StopSliceLocked(&v, StrCat("preempted by ", job_id), config_.preemption_grace_ms);
    names += StrCat(names.empty() ? "" : ", ", v.key.job_id());
  }
  for (const auto& [node, n] : asked) ledger_.Earmark(job_id, node, n, keep_until);
  spdlog::info("job {}: preempting {} slice(s) here ({}); SIGKILL after {} ms", job_id,
               victims->size(), names, config_.preemption_grace_ms);
  return absl::UnavailableError(StrCat("preempting ", victims->size(), " slice(s) (", names,
                                       "); their GPUs are kept for job ", job_id));
}

absl::StatusOr<v1::CommitResponse> Participant::Commit(const std::string& from,
                                                       const v1::CommitRequest& req) {
  const auto& key = req.key();
  if (auto st = CheckJobId(key.job_id()); !st.ok()) return st;
  if (req.command().empty()) return absl::InvalidArgumentError("commit without a command");
  size_t command_bytes = 0, env_bytes = 0;
  for (const auto& a : req.command()) command_bytes += a.size();
  for (const auto& [k, v] : req.env()) env_bytes += k.size() + v.size();
  if (command_bytes > kMaxCommandBytes || env_bytes > kMaxEnvBytes) {
    return absl::InvalidArgumentError("command or env too large");
  }
  if (req.world_size() == 0 || req.world_size() > kMaxWorldSize) {
    return absl::InvalidArgumentError(StrCat("world_size ", req.world_size(), " out of range"));
  }
  if (req.master_port() == 0 || req.master_port() > 65535) {
    return absl::InvalidArgumentError(StrCat("master_port ", req.master_port(), " out of range"));
  }
  std::unique_lock lock(mu_);
  if (auto st = ledger_.CheckOwner(key.job_id(), from); !st.ok()) return st;
  if (quota_.Find(key.job_id(), key.epoch()) != nullptr) {
    // The tenant's home site: from now on the quota hold lives on its lease.
    auto q = quota_.Commit(key.job_id(), key.attempt(), key.epoch(), from, clock_->NowMs(),
                           federation::ClampMs(req.lease_ms(), kMinLeaseMs, kMaxLeaseMs));
    if (!q.ok()) return q.status();
    if (req.ranks_size() == 0) {
      // Quota only: durable before the answer, but the write (an fsync) need
      // not hold up every other reservation waiting for the ledger.
      lock.unlock();
      PersistQuotaHold(*q);
      return v1::CommitResponse();
    }
    PersistQuotaHold(*q);
  } else if (req.ranks_size() == 0) {
    return absl::NotFoundError(
        StrCat("no live quota hold of job ", key.job_id(), " at epoch ", key.epoch()));
  }
  if (slices_.contains({key.job_id(), key.epoch()})) {
    return v1::CommitResponse();  // a duplicate commit: already running
  }
  const federation::Hold* held = ledger_.Find(key.job_id(), key.epoch());
  if (held == nullptr || held->attempt != key.attempt()) {
    return absl::NotFoundError(
        StrCat("no live hold of job ", key.job_id(), " at epoch ", key.epoch()));
  }
  // The GPUs come from the hold: each node's ranks take its held indices in
  // order, and there must be exactly as many ranks as held GPUs.
  std::map<std::string, std::vector<uint32_t>> gpus;
  for (const auto& g : held->gpus) gpus[g.node] = g.indices;
  std::map<std::string, size_t> used;
  std::set<uint32_t> ranks;
  std::vector<uint32_t> gpu_of(req.ranks_size());
  for (int i = 0; i < req.ranks_size(); ++i) {
    const auto& r = req.ranks(i);
    auto it = gpus.find(r.node());
    if (it == gpus.end() || used[r.node()] >= it->second.size()) {
      return absl::InvalidArgumentError(
          StrCat("rank ", r.rank(), " on node \"", r.node().substr(0, 64),
                 "\" has no held GPU there"));
    }
    if (r.rank() >= req.world_size() || !ranks.insert(r.rank()).second ||
        r.local_rank() >= r.local_world_size() || r.local_world_size() > req.world_size()) {
      return absl::InvalidArgumentError(StrCat("rank ", r.rank(), " is out of range or repeated"));
    }
    gpu_of[i] = it->second[used[r.node()]++];
  }
  for (const auto& [node, idx] : gpus) {
    if (used[node] != idx.size()) {
      return absl::InvalidArgumentError(StrCat(used[node], " rank(s) for the ", idx.size(),
                                               " GPU(s) held on node ", node));
    }
  }
  // Who may read this job's logs once its slices are forgotten: a file
  // beside them, not a map in memory that would grow with every job.
  if (auto st = WriteLogOwner(key.job_id(), from); !st.ok()) return st;
  auto hold = ledger_.Commit(key.job_id(), key.attempt(), key.epoch(), from, clock_->NowMs());
  if (!hold.ok()) return hold.status();
  std::map<std::string, std::string> node_addr;
  for (const auto& n : config_.nodes) node_addr[n.name] = n.address;
  Slice s;
  s.key = key;
  s.preemptible = req.preemptible();
  s.started_at_ms = clock_->NowMs();
  for (const auto& g : hold->gpus) s.gpus_by_node[g.node] += g.indices.size();
  s.lease_ms = federation::ClampMs(req.lease_ms(), kMinLeaseMs, kMaxLeaseMs);
  s.lease_deadline_ms = federation::SatAdd(clock_->NowMs(), s.lease_ms);
  // The job's working directory, its ranks' HOME: theirs, outside data_dir.
  const std::string work = WorkDir(key.job_id());
  {
    std::error_code ec;
    std::filesystem::create_directories(work, ec);
    std::filesystem::permissions(work, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace, ec);
    const RankUser& user = exec_.user();
    if (user.switch_user && ::chown(work.c_str(), user.uid, user.gid) != 0) {
      return absl::InternalError(StrCat("cannot hand ", work, " to ", user.name, ": ",
                                        std::strerror(errno)));
    }
  }
  std::vector<std::pair<std::string, std::string>> base;
  for (const auto& [k, v] : req.env()) base.emplace_back(k, v);
  s.cgroup = CreateSliceCgroup(cgroups_, StrCat(key.job_id(), "-", key.epoch()),
                               config_.executor_memory_limit, config_.executor_pids_limit);
  v1::SliceRecord rec;
  rec.set_cgroup(s.cgroup);
  rec.set_coordinator(from);
  rec.set_tenant(hold->tenant);
  rec.set_priority(hold->priority);
  for (const auto& g : hold->gpus) {
    auto* n = rec.add_gpus();
    n->set_node(g.node);
    for (uint32_t i : g.indices) n->add_indices(i);
  }
  rec.set_lease_ms(s.lease_ms);
  rec.set_preemptible(s.preemptible);
  rec.set_started_at_unix_ms(s.started_at_ms);
  rec.set_master_port(hold->master_port);
  const Allocs reservation = allocs_.contains({key.job_id(), key.epoch()})
                                 ? allocs_.at({key.job_id(), key.epoch()})
                                 : Allocs{};
  for (const auto& [node, alloc] : reservation) (*rec.mutable_backend_ids())[node] = alloc.first;
  for (int i = 0; i < req.ranks_size(); ++i) {
    const auto& r = req.ranks(i);
    auto env = base;
    env.emplace_back("MASTER_ADDR", req.master_addr());
    env.emplace_back("MASTER_PORT", std::to_string(req.master_port()));
    env.emplace_back("WORLD_SIZE", std::to_string(req.world_size()));
    env.emplace_back("RANK", std::to_string(r.rank()));
    env.emplace_back("LOCAL_RANK", std::to_string(r.local_rank()));
    env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(r.local_world_size()));
    env.emplace_back("GROUP_RANK", std::to_string(r.group_rank()));
    env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(gpu_of[i]));
    env.emplace_back("FEDGATE_JOB_ID", key.job_id());
    env.emplace_back("FEDGATE_SITE", config_.site);
    env.emplace_back("FEDGATE_ATTEMPT", std::to_string(key.attempt()));
    env.emplace_back("FEDGATE_NODE_ADDR", node_addr[r.node()]);
    // Written with the deadline (Unix seconds) before a preemption's SIGTERM,
    // where the rank can read it (data_dir is not readable to ranks).
    const std::string log = LogPath(key.job_id(), key.attempt(), r.rank());
    const std::string preempt_file =
        StrCat(work, "/.fedgate-preempt-", key.attempt(), "-", r.rank());
    env.emplace_back("FEDGATE_PREEMPT_FILE", preempt_file);
    s.preempt_files.push_back(preempt_file);
    auto argv = backend_->RankCommand(reservation, r.node(),
                                      StrCat("fedgate-", key.job_id(), "-rank-", r.rank()),
                                      {req.command().begin(), req.command().end()}, &env);
    if (!argv.ok()) return argv.status();
    RankProcessSpec spec{std::move(*argv), RankEnv(env, work, exec_.user().name), log,
                         log.substr(0, log.size() - 4) + ".exit", work, s.cgroup};
    auto pid = exec_.Launch(spec);
    RankProc p;
    p.rank = r.rank();
    p.exit_file = spec.exit_file;
    if (!pid.ok()) {
      p.exited = true;
      p.code = 127;
      std::ofstream(spec.log_path, std::ios::app) << "fedgate: " << pid.status().message() << "\n";
    } else {
      p.pid = *pid;
      p.start_time = ProcStartTime(p.pid).value_or(0);
    }
    auto* rr = rec.add_ranks();
    rr->set_rank(p.rank);
    rr->set_pid(p.pid);
    rr->set_start_time(p.start_time);
    rr->set_exit_file(p.exit_file);
    rr->set_preempt_file(preempt_file);
    s.ranks.push_back(p);
  }
  spdlog::info("job {} attempt {}: started {} rank(s) here as {}", key.job_id(), key.attempt(),
               s.ranks.size(), exec_.user().name);
  if (store_ != nullptr) {
    std::string procs;
    for (const auto& p : s.ranks) {
      if (p.pid <= 0) continue;
      procs += StrCat(procs.empty() ? "" : ",", p.rank, ":", p.pid, ":", p.start_time);
    }
    if (auto st = store_->PutSlice({key.job_id(), key.attempt(), key.epoch(), procs,
                                    rec.SerializeAsString()});
        !st.ok()) {
      spdlog::error("cannot record the ranks of job {}: {}", key.job_id(),
                    std::string(st.message()));
    }
  }
  if (store_ != nullptr) {
    // Metering: one open record per node, durable before the commit answers.
    std::vector<federation::UsageRecord> usage;
    for (const auto& g : hold->gpus) {
      federation::UsageRecord u;
      u.job_id = key.job_id();
      u.attempt = key.attempt();
      u.epoch = key.epoch();
      u.site = config_.site;
      u.node = g.node;
      if (const auto* n = FindNode(g.node)) u.gpu_model = n->gpu_model;
      u.gpus = static_cast<uint32_t>(g.indices.size());
      u.tenant = hold->tenant;
      u.priority = hold->priority.empty() ? "guaranteed" : hold->priority;
      u.start_ms = clock_->NowMs();
      usage.push_back(std::move(u));
    }
    if (auto st = store_->OpenUsage(usage); !st.ok()) {
      spdlog::error("cannot record the usage of job {}: {}", key.job_id(), std::string(st.message()));
    }
  }
  slices_[{key.job_id(), key.epoch()}] = std::move(s);
  CrashPoint("participant-after-commit");
  return v1::CommitResponse();
}

void Participant::StopSliceLocked(Slice* s, const std::string& why, int64_t grace_ms) {
  if (s->stopping) return;
  s->stopping = true;
  s->message = why;
  if (s->state == SliceState::RUNNING) s->state = SliceState::FAILED;
  ledger_.MarkStopping(s->key.job_id(), s->key.epoch());
  for (auto& r : s->ranks) {
    if (!r.exited) exec_.Signal(r.pid, SIGTERM);
  }
  s->kill_at_ms = federation::SatAdd(clock_->NowMs(), grace_ms > 0 ? grace_ms : kKillGraceMs);
  spdlog::info("job {}: stopping its ranks here: {}", s->key.job_id(), why);
}

absl::StatusOr<v1::AbortResponse> Participant::Abort(const std::string& from,
                                                     const v1::AbortRequest& req) {
  const auto& key = req.key();
  if (auto st = CheckJobId(key.job_id()); !st.ok()) return st;
  bool gpus_moved = false;  // only then is the ad out of date
  {
    std::lock_guard lock(mu_);
    const size_t quota_holds = quota_.holds().size();
    if (auto st = quota_.Abort(key.job_id(), key.epoch(), from); !st.ok()) return st;
    quota_dirty_ = quota_dirty_ || quota_.holds().size() != quota_holds;
    const size_t gpu_holds = ledger_.holds().size();
    auto stopping = ledger_.Abort(key.job_id(), key.attempt(), key.epoch(), from);
    if (!stopping.ok()) return stopping.status();
    gpus_moved = !stopping->empty() || ledger_.holds().size() != gpu_holds;
    const int64_t grace = federation::ClampMs(req.grace_ms(), 0, 10 * 60 * 1000);
    for (const auto& k : *stopping) {
      auto it = slices_.find(k);
      if (it != slices_.end()) {
        StopSliceLocked(&it->second, StrCat("aborted: ", req.reason().substr(0, 512)), grace);
      }
    }
  }
  if (gpus_moved && on_change_) on_change_();
  return v1::AbortResponse();
}

absl::StatusOr<v1::SliceStatusResponse> Participant::Status(const std::string& from,
                                                            const v1::SliceStatusRequest& req) {
  if (auto st = CheckJobId(req.key().job_id()); !st.ok()) return st;
  v1::SliceStatusResponse resp;
  std::lock_guard lock(mu_);
  if (auto st = ledger_.CheckOwner(req.key().job_id(), from); !st.ok()) return st;
  auto it = slices_.find({req.key().job_id(), req.key().epoch()});
  // A quota hold (this site is the tenant's home) lives on the same lease.
  const federation::QuotaHold* quota =
      quota_.Renew(req.key().job_id(), req.key().epoch(), clock_->NowMs(),
                   federation::ClampMs(req.lease_ms(), kMinLeaseMs, kMaxLeaseMs));
  if (it == slices_.end()) {
    if (ledger_.Find(req.key().job_id(), req.key().epoch()) != nullptr) {
      resp.set_state(SliceState::HELD);
    } else if (quota != nullptr) {
      resp.set_state(quota->committed ? SliceState::RUNNING : SliceState::HELD);
      resp.set_message(StrCat("holds ", quota->total(), " GPU(s) of tenant ", quota->tenant,
                              "'s quota (", federation::QuotaClassName(quota->cls), ")"));
    } else {
      resp.set_state(SliceState::UNKNOWN);
    }
    return resp;
  }
  Slice& s = it->second;
  if (s.state == SliceState::RUNNING && !s.stopping) {
    s.lease_ms = federation::ClampMs(req.lease_ms(), kMinLeaseMs, kMaxLeaseMs);
    s.lease_deadline_ms = federation::SatAdd(clock_->NowMs(), s.lease_ms);
  }
  resp.set_state(s.state);
  resp.set_message(s.message);
  resp.set_preempted_by(s.preempted_by);
  if (s.released) s.reported = true;  // the coordinator has its final state
  for (const auto& r : s.ranks) {
    if (r.exited) (*resp.mutable_exit_codes())[r.rank] = r.code;
  }
  return resp;
}

absl::StatusOr<v1::ReadLogResponse> Participant::ReadLog(const std::string& from,
                                                         const v1::ReadLogRequest& req) {
  if (auto st = CheckJobId(req.job_id()); !st.ok()) return st;
  {
    std::lock_guard lock(mu_);
    if (auto st = ledger_.CheckOwner(req.job_id(), from); !st.ok()) return st;
  }
  const std::string dir = StrCat(config_.data_dir, "/jobs/", req.job_id());
  std::string owner;
  std::getline(std::ifstream(dir + "/owner"), owner);
  if (owner.empty()) {
    return absl::NotFoundError(StrCat("no ranks of job ", req.job_id(), " ran at this site"));
  }
  if (owner != from) {
    return absl::PermissionDeniedError(
        StrCat("job ", req.job_id(), " is coordinated by ", owner, ", not by ", from));
  }
  uint32_t attempt = req.attempt();
  if (attempt == 0) attempt = LatestAttempt(dir);
  const std::string path = LogPath(req.job_id(), attempt, req.rank());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(StrCat("rank ", req.rank(), " of job ", req.job_id(),
                                      " attempt ", attempt, " is not here"));
  }
  struct stat st{};
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint32_t max = req.max_bytes() == 0 ? kMaxLogChunk : std::min(req.max_bytes(), kMaxLogChunk);
  const uint64_t offset = std::min<uint64_t>(req.offset(), size);
  std::string buf(std::min<uint64_t>(max, size - offset), '\0');
  ssize_t got = buf.empty() ? 0 : ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
  ::close(fd);
  if (got < 0) return absl::InternalError(StrCat("reading ", path, ": ", std::strerror(errno)));
  buf.resize(static_cast<size_t>(got));
  v1::ReadLogResponse resp;
  resp.set_content(std::move(buf));
  resp.set_offset(offset);
  resp.set_size_bytes(size);
  return resp;
}

void Participant::Sweep() {
  bool changed = false;
  std::vector<Allocs> stale;
  std::vector<std::pair<std::string, uint64_t>> released_rows;
  {
    std::lock_guard lock(mu_);
    const int64_t now = clock_->NowMs();
    if (!ledger_.ExpireHolds(now).empty()) changed = true;
    if (auto lapsed = quota_.Expire(now); !lapsed.empty()) {
      for (const auto& [job, epoch] : lapsed) {
        spdlog::info("job {} epoch {}: quota hold released (prepare or lease lapsed)", job, epoch);
      }
      quota_dirty_ = true;
      changed = true;
    }
    // Deleted after the ledger lock is let go: one transaction for all of
    // them, and Prepare calls do not wait behind the fsync.
    if (quota_dirty_) released_rows = ReleasedQuotaRowsLocked();
    quota_.Prune(federation::SatSub(now, kFinishedSliceKeepMs));
    RemoveCgroupsLocked();
    for (auto it = slices_.begin(); it != slices_.end();) {
      Slice& s = it->second;
      const std::string& job = s.key.job_id();
      bool all_exited = true, any_failed = false;
      for (auto& r : s.ranks) {
        if (!r.exited) {
          if (auto code = exec_.Poll(r.pid, r.exit_file, r.start_time)) {
            r.exited = true;
            r.code = *code;
            spdlog::info("job {} rank {} exited with {}", job, r.rank, r.code);
          }
        }
        all_exited = all_exited && r.exited;
        any_failed = any_failed || (r.exited && r.code != 0);
      }
      if (s.state == SliceState::RUNNING && any_failed && !s.stopping) {
        StopSliceLocked(&s, "a rank failed");
      }
      if (s.state == SliceState::RUNNING && !s.stopping && now > s.lease_deadline_ms) {
        // The coordinator went silent past the lease: stop and free the GPUs.
        StopSliceLocked(&s, "lease expired: the coordinator stopped renewing it");
      }
      if (s.stopping && !all_exited && now > s.kill_at_ms) {
        for (auto& r : s.ranks) {
          if (!r.exited) exec_.Signal(r.pid, SIGKILL);
        }
        KillCgroup(s.cgroup);  // also what left the ranks' process groups
      }
      if (all_exited && s.state == SliceState::RUNNING && !s.stopping) {
        s.state = any_failed ? SliceState::FAILED : SliceState::SUCCEEDED;
      }
      // The GPUs are free only once every rank of the slice has exited.
      if (all_exited && !s.released) {
        ledger_.Release(job, s.key.epoch());
        // Stray processes of the slice go with it.
        if (!RemoveCgroup(s.cgroup)) cgroups_to_remove_.emplace_back(s.cgroup, 0);
        if (store_ != nullptr) {
          (void)store_->DeleteSlice(job, s.key.epoch());
          const std::string why = s.stopping ? s.message
                                  : s.state == SliceState::SUCCEEDED ? "succeeded"
                                                                     : "a rank failed";
          auto closed = store_->CloseUsage(job, s.key.epoch(), now, why);
          if (closed.ok() && on_usage_) on_usage_(*closed);
        }
        s.released = true;
        s.ended_at_ms = now;
        s.DropRunningState();
        changed = true;
      }
      // A finished slice is kept while its coordinator may still ask.
      if (s.released && now - s.ended_at_ms > kFinishedSliceKeepMs) {
        it = slices_.erase(it);
      } else {
        ++it;
      }
    }
    // Only slices whose coordinator already saw their end count against the
    // cap: one it has not asked about yet (a coordinator restarting) stays
    // for the whole window, so a finished job is never reported lost.
    size_t finished = 0;
    for (const auto& [k, sl] : slices_) finished += sl.reported ? 1 : 0;
    if (finished > max_finished_) {
      std::vector<std::pair<int64_t, SliceKey>> oldest;
      for (const auto& [k, sl] : slices_) {
        if (sl.reported) oldest.emplace_back(sl.ended_at_ms, k);
      }
      std::sort(oldest.begin(), oldest.end());
      for (size_t i = 0; i < finished - max_finished_; ++i) slices_.erase(oldest[i].second);
    }
    // Under heavy churn the window shrinks instead of memory growing; idle
    // ledger entries (epochs, owners) are kept for twice as many jobs.
    ledger_.Prune(federation::SatSub(now, kFinishedSliceKeepMs), 2 * max_finished_);
    ledger_.CheckInvariants();
    stale = StaleAllocsLocked();
  }
  DeleteQuotaRows(released_rows);
  for (const auto& a : stale) backend_->Release(a);
  if (changed && on_change_) on_change_();
}

void Participant::QueueLeftoverCgroupsLocked() {
  if (cgroups_.root.empty()) return;
  std::set<std::string> live;
  for (const auto& [key, s] : slices_) {
    if (!s.released && !s.cgroup.empty()) live.insert(s.cgroup);
  }
  // What the run before left (killed with its slices running, or before a
  // removal finished), less the slices re-attached.
  for (std::string& path : SliceCgroupsOfJobs(cgroups_.root, config_.data_dir + "/jobs")) {
    if (!live.contains(path)) cgroups_to_remove_.emplace_back(std::move(path), 0);
  }
  if (!cgroups_to_remove_.empty()) {
    spdlog::info("removing {} slice cgroup(s) left by the previous run", cgroups_to_remove_.size());
  }
}

void Participant::RemoveCgroupsLocked() {
  // A minute of sweeps; what is still there then holds a process the
  // kernel cannot kill (uninterruptible sleep), which an operator must see.
  const int max_tries = 600;
  std::erase_if(cgroups_to_remove_, [max_tries](auto& entry) {
    auto& [path, tries] = entry;
    if (RemoveCgroup(path)) return true;
    if (++tries < max_tries) return false;
    spdlog::warn("cannot remove cgroup {}: its processes did not exit within a minute of "
                 "cgroup.kill ({})", path, std::strerror(errno));
    return true;
  });
}

std::vector<Participant::Allocs> Participant::StaleAllocsLocked() {
  std::vector<Allocs> out;
  for (auto it = allocs_.begin(); it != allocs_.end();) {
    if (ledger_.holds().contains(it->first)) {
      ++it;
      continue;
    }
    out.push_back(std::move(it->second));
    it = allocs_.erase(it);
  }
  return out;
}

void Participant::RefreshNodes() {
  auto asked = backend_->Nodes();  // outside the lock: it asks the resource manager
  if (asked.ok() && !*asked) return;
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    std::map<std::string, uint32_t> before, after, sizes;
    for (const auto& n : config_.nodes) before[n.name] = ledger_.FreeGpus(n.name);
    if (!asked.ok()) {
      // Its resource manager does not answer: offer nothing until it does
      // (a hold could not be made real anyway). Logged by the backend.
      for (const auto& n : config_.nodes) ledger_.SetExternal(n.name, n.gpus);
      for (const auto& n : config_.nodes) after[n.name] = ledger_.FreeGpus(n.name);
      changed = after != before;
    }
    const std::vector<SiteBackend::NodeState> none;
    std::vector<federation::Node> list;
    for (const auto& st : asked.ok() ? **asked : none) {
      sizes[st.node.name] = st.node.gpus;
      list.push_back(st.node);
      // What the resource manager's own users hold: allocated GPUs not ours.
      uint32_t ours = 0;
      for (const auto& [key, allocs] : allocs_) {
        if (auto a = allocs.find(st.node.name); a != allocs.end()) ours += a->second.second;
      }
      ledger_.SetExternal(st.node.name, !st.usable            ? st.node.gpus
                                        : st.allocated > ours ? st.allocated - ours
                                                              : 0);
    }
    if (asked.ok() && (list.size() != config_.nodes.size() ||
        !std::equal(list.begin(), list.end(), config_.nodes.begin(), [](const auto& a, const auto& b) {
          return a.name == b.name && a.gpus == b.gpus && a.address == b.address;
        }))) {
      config_.nodes = std::move(list);
      ledger_.SetNodes(sizes);
    }
    if (asked.ok()) {
      for (const auto& n : config_.nodes) after[n.name] = ledger_.FreeGpus(n.name);
      changed = after != before;  // re-advertise only when what is offered moved
    }
  }
  if (changed && on_change_) on_change_();
}

}  // namespace fedgate::gateway
