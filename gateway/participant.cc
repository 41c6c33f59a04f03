#include "gateway/participant.h"

#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <fstream>
#include <sstream>

#include "federation/clock.h"
#include "federation/str_cat.h"
#include "gateway/crash_point.h"
#include "gateway/store.h"

namespace fedgate::gateway {
namespace {

std::map<std::string, uint32_t> NodeSizes(const Config& c) {
  std::map<std::string, uint32_t> out;
  for (const auto& n : c.nodes) out[n.name] = n.gpus;
  return out;
}

// A port that is free on this host right now; rank 0 binds it itself.
uint32_t PickFreePort() {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin6_port);
}

constexpr int64_t kKillGraceMs = 3000;

}  // namespace

// The start time of a process (clock ticks since boot), to tell a rank from
// an unrelated process that reused its pid.
std::optional<uint64_t> ProcStartTime(pid_t pid) {
  std::ifstream f(StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(f, stat)) return std::nullopt;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) {  // field 22 is starttime
    if (!(rest >> field)) return std::nullopt;
  }
  return std::stoull(field);
}

Participant::Participant(const Config& config, const federation::Clock* clock, Store* store)
    : config_(config), clock_(clock), store_(store), ledger_(NodeSizes(config)) {}

void Participant::CleanUpAfterRestart() {
  auto stored = store_ != nullptr ? store_->LoadSlices() : std::vector<StoredSlice>{};
  if (!stored.ok()) return;
  std::lock_guard lock(mu_);
  for (const auto& ss : *stored) {
    Slice s;
    s.key.set_job_id(ss.job_id);
    s.key.set_attempt(ss.attempt);
    s.key.set_epoch(ss.epoch);
    s.state = "failed";
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
    latest_attempt_[ss.job_id] = ss.attempt;
    slices_[ss.job_id] = std::move(s);
    (void)store_->DeleteSlice(ss.job_id);
  }
}

Participant::~Participant() { Stop(); }

void Participant::Start() {
  CleanUpAfterRestart();
  sweeper_ = std::thread([this] {
    while (!stop_) {
      Sweep();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

void Participant::Stop() {
  if (stop_.exchange(true)) return;
  if (sweeper_.joinable()) sweeper_.join();
  // Ranks are left running: they stop by themselves when their lease lapses
  // only while a gateway sweeps, so stop them here instead.
  std::lock_guard lock(mu_);
  for (auto& [job, s] : slices_) {
    if (s.state == "running") StopSliceLocked(&s, "gateway shutting down");
  }
  for (auto& [job, s] : slices_) {
    for (auto& r : s.ranks) {
      if (!r.exited) exec_.Signal(r.pid, SIGKILL);
    }
  }
}

std::string Participant::LogPath(const std::string& job, uint32_t attempt, uint32_t rank) const {
  return StrCat(config_.data_dir, "/jobs/", job, "/attempt-", attempt, "/rank-", rank, ".log");
}

std::map<std::string, uint32_t> Participant::FreeGpus() {
  std::lock_guard lock(mu_);
  std::map<std::string, uint32_t> out;
  for (const auto& n : config_.nodes) out[n.name] = ledger_.FreeGpus(n.name);
  return out;
}

absl::StatusOr<v1::PrepareResponse> Participant::Prepare(const v1::PrepareRequest& req) {
  std::vector<federation::NodeRequest> want;
  for (const auto& n : req.nodes()) want.push_back({n.node(), n.gpus()});
  v1::PrepareResponse resp;
  {
    std::lock_guard lock(mu_);
    auto hold = ledger_.Prepare(req.key().job_id(), req.key().attempt(), req.key().epoch(), want,
                                clock_->NowMs(), std::max<int64_t>(req.hold_ttl_ms(), 1000));
    if (!hold.ok()) return hold.status();
    for (const auto& g : hold->gpus) {
      auto* h = resp.add_holds();
      h->set_node(g.node);
      for (uint32_t i : g.indices) h->add_indices(i);
    }
  }
  if (req.pick_master_port()) resp.set_master_port(PickFreePort());
  CrashPoint("participant-after-prepare");
  spdlog::info("job {} attempt {} epoch {}: holding GPUs for {}", req.key().job_id(),
               req.key().attempt(), req.key().epoch(), req.site());
  if (on_change_) on_change_();
  return resp;
}

absl::Status Participant::Commit(const v1::CommitRequest& req) {
  const auto& key = req.key();
  std::lock_guard lock(mu_);
  auto existing = slices_.find(key.job_id());
  if (existing != slices_.end() && existing->second.key.epoch() == key.epoch() &&
      existing->second.key.attempt() == key.attempt()) {
    return absl::OkStatus();  // a duplicate commit: already running
  }
  auto hold = ledger_.Commit(key.job_id(), key.attempt(), key.epoch(), clock_->NowMs());
  if (!hold.ok()) return hold.status();
  std::map<std::string, std::string> node_addr;
  for (const auto& n : config_.nodes) node_addr[n.name] = n.address;
  Slice s;
  s.key = key;
  s.lease_ms = std::max<int64_t>(req.lease_ms(), 1000);
  s.lease_deadline_ms = clock_->NowMs() + s.lease_ms;
  std::vector<std::pair<std::string, std::string>> base;
  for (const auto& [k, v] : req.env()) base.emplace_back(k, v);
  for (const auto& r : req.ranks()) {
    auto env = base;
    env.emplace_back("MASTER_ADDR", req.master_addr());
    env.emplace_back("MASTER_PORT", std::to_string(req.master_port()));
    env.emplace_back("WORLD_SIZE", std::to_string(req.world_size()));
    env.emplace_back("RANK", std::to_string(r.rank()));
    env.emplace_back("LOCAL_RANK", std::to_string(r.local_rank()));
    env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(r.local_world_size()));
    env.emplace_back("GROUP_RANK", std::to_string(r.group_rank()));
    env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(r.gpu()));
    env.emplace_back("FEDGATE_JOB_ID", key.job_id());
    env.emplace_back("FEDGATE_SITE", config_.site);
    env.emplace_back("FEDGATE_ATTEMPT", std::to_string(key.attempt()));
    env.emplace_back("FEDGATE_NODE_ADDR", node_addr[r.node()]);
    RankProcessSpec spec{{req.command().begin(), req.command().end()}, MergeEnv(env),
                         LogPath(key.job_id(), key.attempt(), r.rank())};
    auto pid = exec_.Launch(spec);
    RankProc p;
    p.rank = r.rank();
    if (!pid.ok()) {
      p.exited = true;
      p.code = 127;
      std::ofstream(spec.log_path, std::ios::app) << "fedgate: " << pid.status().message() << "\n";
    } else {
      p.pid = *pid;
    }
    s.ranks.push_back(p);
  }
  spdlog::info("job {} attempt {}: started {} rank(s) here", key.job_id(), key.attempt(),
               s.ranks.size());
  if (store_ != nullptr) {
    std::string procs;
    for (const auto& p : s.ranks) {
      if (p.pid <= 0) continue;
      procs += StrCat(procs.empty() ? "" : ",", p.rank, ":", p.pid, ":",
                      ProcStartTime(p.pid).value_or(0));
    }
    if (auto st = store_->PutSlice({key.job_id(), key.attempt(), key.epoch(), procs}); !st.ok()) {
      spdlog::error("cannot record the ranks of job {}: {}", key.job_id(),
                    std::string(st.message()));
    }
  }
  latest_attempt_[key.job_id()] = key.attempt();
  if (existing != slices_.end()) StopSliceLocked(&existing->second, "replaced by a newer attempt");
  slices_[key.job_id()] = std::move(s);
  CrashPoint("participant-after-commit");
  return absl::OkStatus();
}

void Participant::StopSliceLocked(Slice* s, const std::string& why) {
  if (s->stopping) return;
  s->stopping = true;
  s->message = why;
  if (s->state == "running") s->state = "failed";
  for (auto& r : s->ranks) {
    if (!r.exited) exec_.Signal(r.pid, SIGTERM);
  }
  s->kill_at_ms = clock_->NowMs() + kKillGraceMs;
  spdlog::info("job {}: stopping its ranks here: {}", s->key.job_id(), why);
}

absl::Status Participant::Abort(const v1::AbortRequest& req) {
  const auto& key = req.key();
  {
    std::lock_guard lock(mu_);
    if (auto st = ledger_.Abort(key.job_id(), key.attempt(), key.epoch()); !st.ok()) return st;
    auto it = slices_.find(key.job_id());
    if (it != slices_.end() && it->second.key.epoch() <= key.epoch()) {
      StopSliceLocked(&it->second, StrCat("aborted: ", req.reason()));
    }
  }
  if (on_change_) on_change_();
  return absl::OkStatus();
}

v1::SliceStatusResponse Participant::Status(const v1::SliceStatusRequest& req) {
  v1::SliceStatusResponse resp;
  std::lock_guard lock(mu_);
  auto it = slices_.find(req.key().job_id());
  if (it == slices_.end() || it->second.key.epoch() != req.key().epoch()) {
    auto held = ledger_.holds().find(req.key().job_id());
    resp.set_state(held != ledger_.holds().end() && held->second.epoch == req.key().epoch()
                       ? "held"
                       : "unknown");
    return resp;
  }
  Slice& s = it->second;
  if (s.state == "running" && !s.stopping) {
    s.lease_ms = std::max<int64_t>(req.lease_ms(), 1000);
    s.lease_deadline_ms = clock_->NowMs() + s.lease_ms;
  }
  resp.set_state(s.state);
  resp.set_message(s.message);
  for (const auto& r : s.ranks) {
    if (r.exited) (*resp.mutable_exit_codes())[r.rank] = r.code;
  }
  return resp;
}

absl::StatusOr<v1::ReadLogResponse> Participant::ReadLog(const std::string& job_id,
                                                         uint32_t rank) {
  uint32_t attempt = 0;
  {
    std::lock_guard lock(mu_);
    auto it = latest_attempt_.find(job_id);
    if (it == latest_attempt_.end()) {
      return absl::NotFoundError(StrCat("no ranks of job ", job_id, " ran at this site"));
    }
    attempt = it->second;
  }
  std::ifstream f(LogPath(job_id, attempt, rank), std::ios::binary);
  if (!f) return absl::NotFoundError(StrCat("rank ", rank, " of job ", job_id, " is not here"));
  std::ostringstream ss;
  ss << f.rdbuf();
  v1::ReadLogResponse resp;
  std::string content = ss.str();
  constexpr size_t kMax = 4 << 20;
  if (content.size() > kMax) {
    content = content.substr(content.size() - kMax);
    resp.set_truncated(true);
  }
  resp.set_content(std::move(content));
  return resp;
}

void Participant::Sweep() {
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    const int64_t now = clock_->NowMs();
    if (!ledger_.ExpireHolds(now).empty()) changed = true;
    for (auto& [job, s] : slices_) {
      bool all_exited = true, any_failed = false;
      for (auto& r : s.ranks) {
        if (!r.exited) {
          if (auto code = exec_.Poll(r.pid)) {
            r.exited = true;
            r.code = *code;
            spdlog::info("job {} rank {} exited with {}", job, r.rank, r.code);
          }
        }
        all_exited = all_exited && r.exited;
        any_failed = any_failed || (r.exited && r.code != 0);
      }
      if (s.state == "running" && any_failed && !s.stopping) {
        StopSliceLocked(&s, "a rank failed");
      }
      if (s.state == "running" && !s.stopping && now > s.lease_deadline_ms) {
        // The coordinator went silent past the lease: stop and free the GPUs.
        StopSliceLocked(&s, "lease expired: the coordinator stopped renewing it");
      }
      if (s.stopping && !all_exited && now > s.kill_at_ms) {
        for (auto& r : s.ranks) {
          if (!r.exited) exec_.Signal(r.pid, SIGKILL);
        }
      }
      if (all_exited && s.state == "running" && !s.stopping) {
        s.state = any_failed ? "failed" : "succeeded";
      }
      if (all_exited && ledger_.holds().contains(job) &&
          ledger_.holds().at(job).epoch == s.key.epoch()) {
        ledger_.Release(job);
        if (store_ != nullptr) (void)store_->DeleteSlice(job);
        changed = true;
      }
    }
    ledger_.CheckInvariants();
  }
  if (changed && on_change_) on_change_();
}

}  // namespace fedgate::gateway
