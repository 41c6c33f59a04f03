#include "federation/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/str_cat.h"

namespace fedgate::federation {

absl::StatusOr<SchedPolicy> ParseSchedPolicy(const std::string& name) {
  if (name == "fifo") return SchedPolicy::kFifo;
  if (name == "sjf") return SchedPolicy::kSjf;
  if (name == "fedgate") return SchedPolicy::kFedgate;
  return absl::InvalidArgumentError(StrCat("unknown policy \"", name, "\" (fifo, sjf or fedgate)"));
}

const char* SchedPolicyName(SchedPolicy p) {
  switch (p) {
    case SchedPolicy::kFifo: return "fifo";
    case SchedPolicy::kSjf: return "sjf";
    case SchedPolicy::kFedgate: return "fedgate";
  }
  return "?";
}

void FairShare::Add(const std::string& tenant, double gpu_seconds, int64_t at_ms) {
  Entry& e = usage_[tenant];
  // Decay what was there to `at_ms`, then add.
  if (e.at_ms != 0 && at_ms > e.at_ms) {
    e.value *= std::exp2(-static_cast<double>(at_ms - e.at_ms) / static_cast<double>(half_life_ms_));
  }
  // Use that ended before the entry's time decays to it first (out-of-order
  // adds, as when usage is reloaded after a restart).
  if (e.at_ms != 0 && at_ms < e.at_ms) {
    gpu_seconds *= std::exp2(-static_cast<double>(e.at_ms - at_ms) / static_cast<double>(half_life_ms_));
  }
  e.at_ms = std::max(e.at_ms, at_ms);
  e.value += gpu_seconds;
}

double FairShare::Usage(const std::string& tenant, int64_t now_ms) const {
  auto it = usage_.find(tenant);
  if (it == usage_.end()) return 0;
  double v = it->second.value;
  if (now_ms > it->second.at_ms) {
    v *= std::exp2(-static_cast<double>(now_ms - it->second.at_ms) / static_cast<double>(half_life_ms_));
  }
  auto w = weights_.find(tenant);
  const double weight = w == weights_.end() || w->second <= 0 ? 1.0 : w->second;
  return v / weight;
}

Scheduler::Key Scheduler::KeyOf(const SchedJob& j) const {
  const double per_gpu = static_cast<double>(j.estimated_ms) / std::max<uint32_t>(1, j.gpus);
  switch (policy_) {
    case SchedPolicy::kFifo:
      return {0, static_cast<double>(j.submitted_ms), j.submitted_ms, j.id};
    case SchedPolicy::kSjf:
      return {0, per_gpu, j.submitted_ms, j.id};
    case SchedPolicy::kFedgate:
      // score(now) = per_gpu - aging * (now - submitted): the same `now` for
      // every job, so per_gpu + aging * submitted orders them at any time.
      return {j.spot ? 1 : 0, per_gpu + aging_ * static_cast<double>(j.submitted_ms), j.submitted_ms,
              j.id};
  }
  return {};
}

void Scheduler::Enqueue(const SchedJob& job) {
  Remove(job.id);
  jobs_[job.id] = job;
  order_.insert(KeyOf(job));
}

void Scheduler::Remove(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  order_.erase(KeyOf(it->second));
  jobs_.erase(it);
}

std::vector<const SchedJob*> Scheduler::Visit(int64_t now_ms, const FairShare* share) const {
  std::vector<const SchedJob*> out;
  out.reserve(order_.size());
  for (auto it = order_.begin(); it != order_.end();) {
    // A run of equal (class, score): the tenant with the least decayed
    // usage goes first (fedgate), then the earlier submit.
    auto end = it;
    const size_t first = out.size();
    while (end != order_.end() && std::get<0>(*end) == std::get<0>(*it) &&
           std::get<1>(*end) == std::get<1>(*it)) {
      out.push_back(&jobs_.at(std::get<3>(*end)));
      ++end;
    }
    if (policy_ == SchedPolicy::kFedgate && share != nullptr && out.size() - first > 1) {
      std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                       [&](const SchedJob* a, const SchedJob* b) {
                         const double ua = share->Usage(a->tenant, now_ms);
                         const double ub = share->Usage(b->tenant, now_ms);
                         if (ua != ub) return ua < ub;
                         return a->submitted_ms < b->submitted_ms;
                       });
    }
    it = end;
  }
  return out;
}

std::vector<std::string> Scheduler::Order(int64_t now_ms, const FairShare* share) const {
  std::vector<std::string> out;
  for (const auto* j : Visit(now_ms, share)) out.push_back(j->id);
  return out;
}

uint32_t Scheduler::Usable(const SchedJob& job, const GpusByModel& pool) {
  uint32_t n = 0;
  for (const auto& [model, count] : pool) {
    if (model == "*" || job.models.empty() ||
        std::find(job.models.begin(), job.models.end(), model) != job.models.end()) {
      n += count;
    }
  }
  return n;
}

PassResult Scheduler::Pass(int64_t now_ms, GpusByModel free, std::vector<RunningJob> running,
                           const TryStart& try_start, const FairShare* share) {
  PassResult res;
  auto total = [&] {
    uint32_t n = 0;
    for (const auto& [m, c] : free) n += c;
    return n;
  };
  const SchedJob* head = nullptr;  // holds the reservation (fedgate)
  int64_t shadow_ms = 0;           // its reserved start
  uint32_t extra = 0;              // GPUs it leaves spare at that time
  std::vector<const SchedJob*> visit = Visit(now_ms, share);
  std::vector<std::string> started;
  for (const SchedJob* job : visit) {
    if (total() == 0) break;
    const uint32_t usable = Usable(*job, free);
    const bool may_delay_head = head != nullptr && now_ms + job->estimated_ms > shadow_ms;
    if (head != nullptr && usable >= job->gpus && may_delay_head) {
      // Starting it would still leave the head its GPUs only if it takes
      // no more than the spare ones (counted as if all were the head's kind).
      const bool overlaps = job->models.empty() || head->models.empty() ||
                            std::any_of(job->models.begin(), job->models.end(), [&](const auto& m) {
                              return std::find(head->models.begin(), head->models.end(), m) !=
                                     head->models.end();
                            });
      if (overlaps && job->gpus > extra) {
        res.held_back.push_back(job->id);
        continue;
      }
    }
    std::optional<GpusByModel> taken;
    if (usable >= job->gpus) taken = try_start(*job);
    if (taken) {
      started.push_back(job->id);
      for (const auto& [m, c] : *taken) {
        auto f = free.find(m);
        if (f != free.end()) f->second -= std::min(f->second, c);
      }
      running.push_back({now_ms + job->estimated_ms, *taken});
      if (head != nullptr && may_delay_head) extra -= std::min(extra, Usable(*head, *taken));
      continue;
    }
    if (head != nullptr) continue;  // a backfill candidate that did not fit
    if (policy_ == SchedPolicy::kFifo) break;
    if (policy_ == SchedPolicy::kSjf) continue;
    // fedgate: the first job that cannot start reserves its earliest start.
    std::sort(running.begin(), running.end(),
              [](const RunningJob& a, const RunningJob& b) { return a.estimated_end_ms < b.estimated_end_ms; });
    uint32_t avail = usable;
    for (const auto& r : running) {
      avail += Usable(*job, r.gpus);
      if (avail >= job->gpus) {
        head = job;
        shadow_ms = std::max(now_ms, r.estimated_end_ms);
        extra = avail - job->gpus;
        break;
      }
    }
    // A job that asks more than could ever free up reserves nothing.
    if (head != nullptr) {
      res.reserved_for = head->id;
      res.reserved_at_ms = shadow_ms;
    }
  }
  for (const auto& id : started) Remove(id);
  res.started = std::move(started);
  return res;
}

}  // namespace fedgate::federation
