#include "federation/reservation.h"

#include <cstdio>
#include <cstdlib>
#include <set>

#include "federation/str_cat.h"

namespace fedgate::federation {

ReservationLedger::ReservationLedger(std::map<std::string, uint32_t> nodes)
    : nodes_(std::move(nodes)) {}

uint32_t ReservationLedger::FreeGpus(const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return 0;
  uint32_t used = 0;
  for (const auto& [job, h] : holds_) {
    for (const auto& g : h.gpus) {
      if (g.node == node) used += static_cast<uint32_t>(g.indices.size());
    }
  }
  return it->second - used;
}

uint32_t ReservationLedger::TotalFree() const {
  uint32_t total = 0;
  for (const auto& [node, n] : nodes_) total += FreeGpus(node);
  return total;
}

absl::StatusOr<Hold> ReservationLedger::Prepare(const std::string& job_id, uint32_t attempt,
                                                uint64_t epoch,
                                                const std::vector<NodeRequest>& want,
                                                int64_t now_ms, int64_t ttl_ms) {
  auto newest = newest_epoch_.find(job_id);
  if (newest != newest_epoch_.end() && epoch < newest->second) {
    return absl::FailedPreconditionError(StrCat("stale epoch ", epoch, " for job ", job_id,
                                                ": epoch ", newest->second, " already seen"));
  }
  auto held = holds_.find(job_id);
  if (held != holds_.end()) {
    Hold& h = held->second;
    if (h.epoch == epoch && h.attempt == attempt) return h;  // a duplicate
    if (h.state == HoldState::kCommitted) {
      return absl::FailedPreconditionError(
          StrCat("job ", job_id, " is committed at epoch ", h.epoch, "; release it first"));
    }
  }
  if (newest != newest_epoch_.end() && epoch == newest->second && held == holds_.end()) {
    return absl::FailedPreconditionError(
        StrCat("epoch ", epoch, " of job ", job_id, " was aborted or expired"));
  }
  // A newer epoch replaces the older, uncommitted hold: count its GPUs as free.
  std::map<std::string, uint32_t> free;
  for (const auto& [node, n] : nodes_) free[node] = FreeGpus(node);
  if (held != holds_.end()) {
    for (const auto& g : held->second.gpus) free[g.node] += static_cast<uint32_t>(g.indices.size());
  }
  std::map<std::string, uint32_t> asked;
  for (const auto& w : want) {
    if (!nodes_.contains(w.node)) {
      return absl::InvalidArgumentError(StrCat("no node \"", w.node, "\" at this site"));
    }
    asked[w.node] += w.gpus;
  }
  for (const auto& [node, n] : asked) {
    if (n > free[node]) {
      return absl::ResourceExhaustedError(
          StrCat("node ", node, " has ", free[node], " free GPU(s), ", n, " asked"));
    }
  }
  // Pick the lowest free indices on each node.
  std::map<std::string, std::set<uint32_t>> taken;
  for (const auto& [job, h] : holds_) {
    if (job == job_id) continue;
    for (const auto& g : h.gpus) taken[g.node].insert(g.indices.begin(), g.indices.end());
  }
  Hold h;
  h.job_id = job_id;
  h.attempt = attempt;
  h.epoch = epoch;
  h.state = HoldState::kHeld;
  h.expires_at_ms = now_ms + ttl_ms;
  for (const auto& [node, n] : asked) {
    NodeGpus g{node, {}};
    for (uint32_t i = 0; i < nodes_[node] && g.indices.size() < n; ++i) {
      if (!taken[node].contains(i)) g.indices.push_back(i);
    }
    h.gpus.push_back(std::move(g));
  }
  holds_[job_id] = h;
  newest_epoch_[job_id] = epoch;
  CheckInvariants();
  return h;
}

absl::StatusOr<Hold> ReservationLedger::Commit(const std::string& job_id, uint32_t attempt,
                                               uint64_t epoch, int64_t now_ms) {
  auto newest = newest_epoch_.find(job_id);
  if (newest != newest_epoch_.end() && epoch < newest->second) {
    return absl::FailedPreconditionError(StrCat("stale epoch ", epoch, " for job ", job_id));
  }
  auto it = holds_.find(job_id);
  if (it == holds_.end() || it->second.epoch != epoch || it->second.attempt != attempt) {
    return absl::NotFoundError(StrCat("no hold of job ", job_id, " at epoch ", epoch));
  }
  Hold& h = it->second;
  if (h.state == HoldState::kHeld && now_ms > h.expires_at_ms) {
    holds_.erase(it);
    return absl::NotFoundError(StrCat("the hold of job ", job_id, " expired"));
  }
  h.state = HoldState::kCommitted;
  return h;
}

absl::Status ReservationLedger::Abort(const std::string& job_id, uint32_t /*attempt*/,
                                      uint64_t epoch) {
  auto newest = newest_epoch_.find(job_id);
  if (newest != newest_epoch_.end() && epoch < newest->second) {
    return absl::FailedPreconditionError(StrCat("stale epoch ", epoch, " for job ", job_id));
  }
  auto it = holds_.find(job_id);
  if (it != holds_.end() && it->second.epoch <= epoch) holds_.erase(it);
  newest_epoch_[job_id] = epoch;
  return absl::OkStatus();
}

void ReservationLedger::Release(const std::string& job_id) { holds_.erase(job_id); }

std::vector<std::string> ReservationLedger::ExpireHolds(int64_t now_ms) {
  std::vector<std::string> out;
  for (auto it = holds_.begin(); it != holds_.end();) {
    if (it->second.state == HoldState::kHeld && now_ms > it->second.expires_at_ms) {
      out.push_back(it->first);
      it = holds_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void ReservationLedger::CheckInvariants() const {
  std::map<std::string, std::set<uint32_t>> seen;
  for (const auto& [job, h] : holds_) {
    for (const auto& g : h.gpus) {
      auto node = nodes_.find(g.node);
      for (uint32_t i : g.indices) {
        if (node == nodes_.end() || i >= node->second || !seen[g.node].insert(i).second) {
          std::fprintf(stderr, "FATAL: reservation invariant broken: GPU %s/%u given twice or "
                               "out of range (job %s)\n",
                       g.node.c_str(), i, job.c_str());
          std::abort();
        }
      }
    }
  }
}

}  // namespace fedgate::federation
