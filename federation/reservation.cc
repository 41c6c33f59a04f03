#include "federation/reservation.h"

#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <set>

#include "federation/saturating.h"
#include "base/str_cat.h"

namespace fedgate::federation {

ReservationLedger::ReservationLedger(std::map<std::string, uint32_t> nodes)
    : nodes_(std::move(nodes)) {}

uint32_t ReservationLedger::FreeGpus(const std::string& node) const {
  return FreeGpusFor(node, "");
}

uint32_t ReservationLedger::FreeGpusFor(const std::string& node, const std::string& job_id) const {
  uint32_t free = RawFree(node);
  if (auto e = earmarks_.find(node); e != earmarks_.end()) {
    for (const auto& [job, mark] : e->second) {
      if (job != job_id) free -= std::min(free, mark.first);
    }
  }
  return free;
}

void ReservationLedger::Earmark(const std::string& job_id, const std::string& node, uint32_t gpus,
                                int64_t until_ms) {
  if (!nodes_.contains(node) || gpus == 0) return;
  auto& mark = earmarks_[node][job_id];
  mark.first = std::min(nodes_[node], std::max(mark.first, gpus));
  mark.second = std::max(mark.second, until_ms);
}

uint32_t ReservationLedger::RawFree(const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || cordoned_.contains(node)) return 0;
  std::set<uint32_t> out;  // held or unhealthy
  for (const auto& [key, h] : holds_) {
    for (const auto& g : h.gpus) {
      if (g.node == node) out.insert(g.indices.begin(), g.indices.end());
    }
  }
  if (auto u = unhealthy_.find(node); u != unhealthy_.end()) out.insert(u->second.begin(), u->second.end());
  uint32_t free = it->second - static_cast<uint32_t>(std::min<size_t>(out.size(), it->second));
  if (auto e = external_.find(node); e != external_.end()) free -= std::min(free, e->second);
  return free;
}

void ReservationLedger::SetNodes(const std::map<std::string, uint32_t>& nodes) {
  std::map<std::string, uint32_t> next = nodes;
  for (const auto& [key, h] : holds_) {
    for (const auto& g : h.gpus) {
      uint32_t need = 0;
      for (uint32_t i : g.indices) need = std::max(need, i + 1);
      auto& n = next[g.node];
      n = std::max(n, need);
    }
  }
  nodes_ = std::move(next);
}

std::vector<ReservationLedger::HoldKey> ReservationLedger::SetUnhealthy(
    const std::string& node, const std::set<uint32_t>& gpus) {
  std::vector<HoldKey> hit;
  auto n = nodes_.find(node);
  if (n == nodes_.end()) return hit;
  std::set<uint32_t> bad;
  for (uint32_t i : gpus) {
    if (i < n->second) bad.insert(i);
  }
  if (bad.empty()) {
    unhealthy_.erase(node);
    return hit;
  }
  for (auto it = holds_.begin(); it != holds_.end();) {
    bool uses = false;
    for (const auto& g : it->second.gpus) {
      if (g.node != node) continue;
      for (uint32_t i : g.indices) uses = uses || bad.contains(i);
    }
    // A prepared hold on a failed GPU is dropped (its Commit finds nothing
    // and the coordinator reserves again); a running slice must be stopped.
    if (uses && it->second.state == HoldState::kPrepared) {
      it = holds_.erase(it);
      continue;
    }
    if (uses && it->second.state == HoldState::kCommitted) hit.push_back(it->first);
    ++it;
  }
  unhealthy_[node] = std::move(bad);
  return hit;
}

void ReservationLedger::SetCordoned(const std::string& node, bool cordoned) {
  if (cordoned && nodes_.contains(node)) {
    cordoned_.insert(node);
  } else {
    cordoned_.erase(node);
  }
}

uint32_t ReservationLedger::TotalFree() const {
  uint32_t total = 0;
  for (const auto& [node, n] : nodes_) total += FreeGpus(node);
  return total;
}

absl::Status ReservationLedger::CheckOwner(const std::string& job_id,
                                           const std::string& coordinator) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.owner.coordinator == coordinator) return absl::OkStatus();
  return absl::PermissionDeniedError(StrCat("job ", job_id, " is coordinated by ",
                                            it->second.owner.coordinator, ", not by ",
                                            coordinator));
}

void ReservationLedger::Reassign(const std::string& job_id, const std::string& coordinator) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second.owner.coordinator = coordinator;
  for (auto h = holds_.lower_bound({job_id, 0}); h != holds_.end() && h->first.first == job_id;
       ++h) {
    h->second.coordinator = coordinator;
  }
}

absl::Status ReservationLedger::CheckEpoch(const std::string& job_id, uint64_t epoch) const {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end() && epoch < it->second.newest_epoch) {
    return absl::FailedPreconditionError(StrCat("stale epoch ", epoch, " for job ", job_id,
                                                ": epoch ", it->second.newest_epoch,
                                                " already seen"));
  }
  return absl::OkStatus();
}

ReservationLedger::JobEntry& ReservationLedger::Touch(const std::string& job_id,
                                                      const std::string& coordinator,
                                                      int64_t now_ms) {
  auto [it, fresh] = jobs_.try_emplace(job_id);
  if (fresh) it->second.owner.coordinator = coordinator;
  it->second.last_seen_ms = std::max(it->second.last_seen_ms, now_ms);
  return it->second;
}

const Hold* ReservationLedger::Find(const std::string& job_id, uint64_t epoch) const {
  auto it = holds_.find({job_id, epoch});
  if (it == holds_.end() || it->second.state == HoldState::kStopping) return nullptr;
  return &it->second;
}

absl::Status ReservationLedger::Extend(const std::string& job_id, uint32_t attempt,
                                      uint64_t epoch, int64_t now_ms, int64_t ttl_ms) {
  auto it = holds_.find({job_id, epoch});
  if (it == holds_.end() || it->second.state != HoldState::kPrepared ||
      it->second.attempt != attempt || it->second.expires_at_ms <= now_ms) {
    return absl::NotFoundError(
        StrCat("no prepared hold of job ", job_id, " at epoch ", epoch, " to keep"));
  }
  it->second.expires_at_ms = std::max(it->second.expires_at_ms, SatAdd(now_ms, ttl_ms));
  return absl::OkStatus();
}

absl::StatusOr<Hold> ReservationLedger::Prepare(const std::string& job_id, uint32_t attempt,
                                                uint64_t epoch, const HoldOwner& owner,
                                                const std::vector<NodeRequest>& want,
                                                int64_t now_ms, int64_t ttl_ms,
                                                std::vector<HoldKey>* stopped, bool want_port) {
  if (auto st = CheckOwner(job_id, owner.coordinator); !st.ok()) return st;
  if (auto st = CheckEpoch(job_id, epoch); !st.ok()) return st;
  if (const Hold* same = Find(job_id, epoch)) {
    if (same->attempt == attempt) return *same;  // a duplicate
    return absl::FailedPreconditionError(
        StrCat("epoch ", epoch, " of job ", job_id, " is held for attempt ", same->attempt));
  }
  auto known = jobs_.find(job_id);
  if (known != jobs_.end() && epoch == known->second.newest_epoch) {
    return absl::FailedPreconditionError(
        StrCat("epoch ", epoch, " of job ", job_id, " was aborted or expired"));
  }
  // Older live holds of the job: a prepared one gives its GPUs to this one;
  // a committed one is stopping from now on and keeps its GPUs until its
  // ranks exited (counted as used below).
  std::map<std::string, uint32_t> reusable;
  std::vector<HoldKey> replaced;
  for (auto it = holds_.lower_bound({job_id, 0}); it != holds_.end() && it->first.first == job_id;
       ++it) {
    if (it->second.state == HoldState::kPrepared) {
      for (const auto& g : it->second.gpus) reusable[g.node] += g.indices.size();
      replaced.push_back(it->first);
    }
  }
  std::map<std::string, uint32_t> asked;
  for (const auto& w : want) {
    if (!nodes_.contains(w.node)) {
      return absl::InvalidArgumentError(StrCat("no node \"", w.node, "\" at this site"));
    }
    if (w.gpus == 0 || w.gpus > nodes_[w.node]) {
      return absl::InvalidArgumentError(
          StrCat(w.gpus, " GPU(s) asked of node ", w.node, " (it has ", nodes_[w.node], ")"));
    }
    asked[w.node] += w.gpus;
  }
  if (asked.empty()) return absl::InvalidArgumentError("no GPUs asked");
  for (const auto& [node, n] : asked) {
    const uint32_t free = FreeGpusFor(node, job_id) + reusable[node];
    if (n > free) {
      return absl::ResourceExhaustedError(
          StrCat("node ", node, " has ", free, " free GPU(s), ", n, " asked"));
    }
  }
  // The next port of the range no other live hold has (round robin, so a
  // port just given back is not handed out again at once).
  uint32_t port = 0;
  if (want_port) {
    std::set<uint32_t> used;
    for (const auto& [key, h] : holds_) {
      if (key.first != job_id || h.state != HoldState::kPrepared) used.insert(h.master_port);
    }
    const uint32_t span = port_hi_ - port_lo_ + 1;
    for (uint32_t i = 0; i < span && port == 0; ++i) {
      const uint32_t p = port_lo_ + (next_port_ - port_lo_ + i) % span;
      if (!used.contains(p) && !(port_in_use_ && port_in_use_(want, p))) port = p;
    }
    if (port == 0) {
      return absl::ResourceExhaustedError(StrCat("no free MASTER_PORT in ", port_lo_, "-", port_hi_,
                                                 " (executor.port_range; held here or in use on the node)"));
    }
    next_port_ = port == port_hi_ ? port_lo_ : port + 1;
  }
  for (const auto& k : replaced) holds_.erase(k);
  for (const auto& [node, n] : asked) {
    if (auto e = earmarks_.find(node); e != earmarks_.end()) {
      e->second.erase(job_id);
      if (e->second.empty()) earmarks_.erase(e);
    }
  }
  for (auto it = holds_.lower_bound({job_id, 0}); it != holds_.end() && it->first.first == job_id;
       ++it) {
    if (it->second.state == HoldState::kCommitted) {
      it->second.state = HoldState::kStopping;
      if (stopped != nullptr) stopped->push_back(it->first);
    }
  }
  // Pick the lowest free indices on each node.
  std::map<std::string, std::set<uint32_t>> taken;
  for (const auto& [key, h] : holds_) {
    for (const auto& g : h.gpus) taken[g.node].insert(g.indices.begin(), g.indices.end());
  }
  for (const auto& [node, bad] : unhealthy_) taken[node].insert(bad.begin(), bad.end());
  Hold h;
  h.job_id = job_id;
  h.attempt = attempt;
  h.epoch = epoch;
  h.coordinator = owner.coordinator;
  h.tenant = owner.tenant;
  h.priority = owner.priority;
  h.state = HoldState::kPrepared;
  h.expires_at_ms = SatAdd(now_ms, ttl_ms);
  h.master_port = port;
  for (const auto& [node, n] : asked) {
    NodeGpus g{node, {}};
    for (uint32_t i = 0; i < nodes_[node] && g.indices.size() < n; ++i) {
      if (!taken[node].contains(i)) g.indices.push_back(i);
    }
    h.gpus.push_back(std::move(g));
  }
  holds_[{job_id, epoch}] = h;
  JobEntry& e = Touch(job_id, owner.coordinator, now_ms);
  e.newest_epoch = epoch;
  if (e.owner.tenant.empty()) e.owner.tenant = owner.tenant;
  CheckInvariants();
  return h;
}

absl::StatusOr<Hold> ReservationLedger::Commit(const std::string& job_id, uint32_t attempt,
                                               uint64_t epoch, const std::string& coordinator,
                                               int64_t now_ms) {
  if (auto st = CheckOwner(job_id, coordinator); !st.ok()) return st;
  if (auto st = CheckEpoch(job_id, epoch); !st.ok()) return st;
  auto it = holds_.find({job_id, epoch});
  if (it == holds_.end() || it->second.attempt != attempt ||
      it->second.state == HoldState::kStopping) {
    return absl::NotFoundError(StrCat("no live hold of job ", job_id, " at epoch ", epoch));
  }
  Hold& h = it->second;
  if (h.state == HoldState::kPrepared && now_ms > h.expires_at_ms) {
    holds_.erase(it);
    return absl::NotFoundError(StrCat("the hold of job ", job_id, " expired"));
  }
  h.state = HoldState::kCommitted;
  Touch(job_id, coordinator, now_ms);
  return h;
}

absl::StatusOr<std::vector<ReservationLedger::HoldKey>> ReservationLedger::Abort(
    const std::string& job_id, uint32_t /*attempt*/, uint64_t epoch,
    const std::string& coordinator) {
  if (auto st = CheckOwner(job_id, coordinator); !st.ok()) return st;
  if (auto st = CheckEpoch(job_id, epoch); !st.ok()) return st;
  std::vector<HoldKey> stopping;
  for (auto it = holds_.lower_bound({job_id, 0});
       it != holds_.end() && it->first.first == job_id && it->first.second <= epoch;) {
    if (it->second.state == HoldState::kPrepared) {
      it = holds_.erase(it);
      continue;
    }
    if (it->second.state == HoldState::kCommitted) {
      it->second.state = HoldState::kStopping;
      stopping.push_back(it->first);
    }
    ++it;
  }
  JobEntry& e = Touch(job_id, coordinator, 0);
  e.newest_epoch = std::max(e.newest_epoch, epoch);
  return stopping;
}

absl::Status ReservationLedger::Restore(const Hold& hold, int64_t now_ms) {
  std::map<std::string, std::set<uint32_t>> taken;
  for (const auto& [key, h] : holds_) {
    for (const auto& g : h.gpus) taken[g.node].insert(g.indices.begin(), g.indices.end());
  }
  for (const auto& g : hold.gpus) {
    auto n = nodes_.find(g.node);
    for (uint32_t i : g.indices) {
      if (n == nodes_.end() || i >= n->second || !taken[g.node].insert(i).second) {
        return absl::FailedPreconditionError(
            StrCat("GPU ", g.node, "/", i, " of job ", hold.job_id, " cannot be restored"));
      }
    }
  }
  Hold h = hold;
  h.state = HoldState::kCommitted;
  holds_[{h.job_id, h.epoch}] = h;
  JobEntry& e = Touch(h.job_id, h.coordinator, now_ms);
  e.newest_epoch = std::max(e.newest_epoch, h.epoch);
  if (e.owner.tenant.empty()) e.owner.tenant = h.tenant;
  CheckInvariants();
  return absl::OkStatus();
}

void ReservationLedger::MarkStopping(const std::string& job_id, uint64_t epoch) {
  auto it = holds_.find({job_id, epoch});
  if (it != holds_.end() && it->second.state == HoldState::kCommitted) {
    it->second.state = HoldState::kStopping;
  }
}

void ReservationLedger::Release(const std::string& job_id, uint64_t epoch) {
  holds_.erase({job_id, epoch});
}

std::vector<std::string> ReservationLedger::ExpireHolds(int64_t now_ms) {
  std::vector<std::string> out;
  for (auto n = earmarks_.begin(); n != earmarks_.end();) {
    std::erase_if(n->second, [&](const auto& kv) { return now_ms > kv.second.second; });
    n = n->second.empty() ? earmarks_.erase(n) : std::next(n);
  }
  for (auto it = holds_.begin(); it != holds_.end();) {
    if (it->second.state == HoldState::kPrepared && now_ms > it->second.expires_at_ms) {
      out.push_back(it->first.first);
      it = holds_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void ReservationLedger::Prune(int64_t before_ms, size_t max_jobs) {
  std::set<std::string> held;
  for (const auto& [key, h] : holds_) held.insert(key.first);
  std::vector<std::pair<int64_t, std::string>> idle;  // last seen, job
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (held.contains(it->first)) {
      ++it;
    } else if (it->second.last_seen_ms < before_ms) {
      it = jobs_.erase(it);
    } else {
      idle.emplace_back(it->second.last_seen_ms, it->first);
      ++it;
    }
  }
  if (jobs_.size() <= max_jobs) return;
  std::sort(idle.begin(), idle.end());
  for (const auto& [seen, job] : idle) {
    if (jobs_.size() <= max_jobs) break;
    jobs_.erase(job);
  }
}

void ReservationLedger::CheckInvariants() const {
  std::map<std::string, std::set<uint32_t>> seen;
  for (const auto& [key, h] : holds_) {
    for (const auto& g : h.gpus) {
      auto node = nodes_.find(g.node);
      for (uint32_t i : g.indices) {
        if (node == nodes_.end() || i >= node->second || !seen[g.node].insert(i).second) {
          std::fprintf(stderr, "FATAL: reservation invariant broken: GPU %s/%u given twice or "
                               "out of range (job %s)\n",
                       g.node.c_str(), i, key.first.c_str());
          std::abort();
        }
      }
    }
  }
}

}  // namespace fedgate::federation
