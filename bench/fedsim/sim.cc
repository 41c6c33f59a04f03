#include "bench/fedsim/sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <queue>
#include <set>

#include "base/str_cat.h"
#include "base/text.h"
#include "federation/names.h"
#include "federation/placement.h"

namespace fedgate::fedsim {
namespace {

using federation::GpusByModel;
using federation::SchedJob;

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform [0, 1) draw for (seed, row, purpose): the same row gets the same
// tenant, class and noise whatever the policy, limit or window.
double Uniform(uint64_t seed, int line, uint64_t purpose) {
  const uint64_t h = SplitMix(SplitMix(seed ^ (purpose * 0x100000001b3ULL)) ^ static_cast<uint64_t>(line));
  return static_cast<double>(h >> 11) / static_cast<double>(1ULL << 53);
}

constexpr int kTenants = 8;
constexpr double kSpotShare = 0.2;

std::string ZipfTenant(double u) {
  double norm = 0;
  for (int k = 1; k <= kTenants; ++k) norm += 1.0 / k;
  double acc = 0;
  for (int k = 1; k <= kTenants; ++k) {
    acc += 1.0 / k / norm;
    if (u < acc) return StrCat("tenant-", k);
  }
  return StrCat("tenant-", kTenants);
}

struct Node {
  std::string name;
  std::string site;
  std::string model;
  uint32_t free = 0;
};

}  // namespace

absl::StatusOr<std::vector<SiteSpec>> ParseSites(const std::string& text) {
  std::vector<SiteSpec> out;
  std::set<std::string> names;
  for (std::string_view item : Split(text, ',')) {
    item = Trim(item);
    const size_t eq = item.find('='), colon = item.rfind(':');
    if (eq == std::string_view::npos || colon == std::string_view::npos || colon < eq) {
      return absl::InvalidArgumentError(
          StrCat("--sites: \"", item, "\" is not NAME=MODEL:GPUS"));
    }
    SiteSpec s{std::string(item.substr(0, eq)), std::string(item.substr(eq + 1, colon - eq - 1)), 0};
    const std::string_view n = item.substr(colon + 1);
    uint64_t gpus = 0;
    for (char c : n) {
      if (c < '0' || c > '9' || gpus > 1000000) return absl::InvalidArgumentError(StrCat("--sites: bad GPU count in \"", item, "\""));
      gpus = gpus * 10 + static_cast<uint64_t>(c - '0');
    }
    if (n.empty() || gpus == 0) return absl::InvalidArgumentError(StrCat("--sites: bad GPU count in \"", item, "\""));
    if (!federation::IsValidName(s.name) || s.model.empty()) {
      return absl::InvalidArgumentError(StrCat("--sites: bad site name or model in \"", item, "\""));
    }
    if (!names.insert(s.name).second) return absl::InvalidArgumentError(StrCat("--sites: site ", s.name, " twice"));
    s.gpus = static_cast<uint32_t>(gpus);
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<SimResult> Simulate(std::vector<TraceJob> jobs, const TraceInfo& info,
                                   const std::vector<SiteSpec>& sites, const SimOptions& opts) {
  const auto wall0 = std::chrono::steady_clock::now();
  SimResult res;
  res.policy = federation::SchedPolicyName(opts.policy);
  res.derived = StrCat(
      "tenant: ", info.has_tenant ? "from the trace" : "Zipf(s=1) over tenant-1..tenant-8, drawn from (seed, line)",
      "; priority: ", info.has_priority ? "from the trace" : "20% spot, drawn from (seed, line)",
      "; gpu_model: ", info.has_model ? "from the trace" : "any (the trace has none)",
      "; estimate: duration x U[1-F, 1+F] from (seed, line), F = ", opts.estimate_noise,
      "; nodes of ", opts.gpus_per_node, " GPUs; aging ", opts.aging);

  // The window: jobs submitted from start_hour on, at most `limit`.
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit_s < b.submit_s; });
  const double from = opts.start_hour * 3600;
  std::vector<TraceJob> window;
  for (auto& j : jobs) {
    if (j.submit_s < from) continue;
    if (opts.limit > 0 && window.size() >= opts.limit) break;
    window.push_back(std::move(j));
  }
  // Nodes, and how many GPUs of each model exist.
  std::vector<Node> nodes;
  std::map<std::string, std::vector<size_t>> site_nodes;
  GpusByModel total_by_model;
  for (const auto& s : sites) {
    for (uint32_t left = s.gpus, i = 1; left > 0; ++i) {
      const uint32_t n = std::min(left, opts.gpus_per_node);
      site_nodes[s.name].push_back(nodes.size());
      nodes.push_back({StrCat(s.name, "-n", i), s.name, s.model, n});
      left -= n;
    }
    total_by_model[s.model] += s.gpus;
    res.capacity += s.gpus;
  }

  struct Live {
    TraceJob trace;
    SchedJob sched;
    double start_s = -1, end_s = -1;
    std::vector<std::pair<size_t, uint32_t>> held;  // node index, GPUs
  };
  std::vector<Live> live;
  live.reserve(window.size());
  double gpu_seconds = 0, first_submit = 0, last_submit = 0;
  for (auto& t : window) {
    SchedJob s;
    s.id = std::to_string(live.size());
    s.tenant = !t.tenant.empty() ? t.tenant : ZipfTenant(Uniform(opts.seed, t.line, 1));
    s.spot = !t.priority.empty() ? t.priority == "spot" : Uniform(opts.seed, t.line, 2) < kSpotShare;
    if (!t.gpu_model.empty()) s.models = {t.gpu_model};
    s.gpus = t.gpus;
    const double noise = opts.estimate_noise * (2 * Uniform(opts.seed, t.line, 3) - 1);
    s.estimated_ms = static_cast<int64_t>(std::llround(std::max(1.0, t.duration_s * (1 + noise)) * 1000));
    s.submitted_ms = static_cast<int64_t>(std::llround((t.submit_s - from) * 1000));
    if (federation::Scheduler::Usable(s, total_by_model) < s.gpus) {
      ++res.left_out;
      continue;
    }
    gpu_seconds += t.gpus * t.duration_s;
    if (live.empty()) first_submit = t.submit_s;
    last_submit = t.submit_s;
    live.push_back({std::move(t), std::move(s), -1, -1, {}});
  }
  if (live.empty()) return absl::InvalidArgumentError("no job of the trace window fits these sites");
  res.offered_load = last_submit > first_submit
                         ? gpu_seconds / (res.capacity * (last_submit - first_submit))
                         : 0;

  federation::Scheduler sched(opts.policy, opts.aging);
  federation::FairShare share;
  GpusByModel free = total_by_model;
  uint32_t free_total = res.capacity;
  // Completions: (end ms, live index).
  using Done = std::pair<int64_t, size_t>;
  std::priority_queue<Done, std::vector<Done>, std::greater<>> ends;
  std::map<size_t, federation::RunningJob> running;  // for reservations (fedgate)
  size_t next = 0, finished = 0;
  int64_t now = live.front().sched.submitted_ms;
  double idle_integral = 0, wait_time = 0;
  auto last_progress = std::chrono::steady_clock::now();

  auto try_start = [&](const SchedJob& j) -> std::optional<GpusByModel> {
    std::vector<federation::SiteOffer> offers;
    for (const auto& s : sites) {
      federation::SiteOffer o{s.name, true, {}, {}};
      for (size_t i : site_nodes[s.name]) {
        if (nodes[i].free > 0) o.nodes.push_back({nodes[i].name, nodes[i].model, 80, nodes[i].free});
      }
      if (!o.nodes.empty()) offers.push_back(std::move(o));
    }
    federation::JobRequest req;
    req.gpus = j.gpus;
    req.gpu_models = j.models;
    auto placed = federation::Place(req, offers, [](const std::string&, const std::string&) {
      return std::optional<double>();
    });
    if (!placed.placement) return std::nullopt;
    Live& l = live[std::stoul(j.id)];
    GpusByModel taken;
    for (const auto& slice : placed.placement->slices) {
      for (size_t i : site_nodes[slice.site]) {
        if (nodes[i].name != slice.node) continue;
        nodes[i].free -= slice.gpus;
        l.held.push_back({i, slice.gpus});
        taken[nodes[i].model] += slice.gpus;
      }
    }
    for (const auto& [m, c] : taken) free[m] -= c;
    free_total -= j.gpus;
    l.start_s = now / 1000.0;
    const int64_t end = now + static_cast<int64_t>(std::llround(l.trace.duration_s * 1000));
    l.end_s = end / 1000.0;
    ends.push({end, std::stoul(j.id)});
    running[std::stoul(j.id)] = {now + j.estimated_ms, taken};
    res.start_order.push_back(l.trace.line);
    return taken;
  };

  while (finished < live.size()) {
    int64_t t = INT64_MAX;
    if (next < live.size()) t = live[next].sched.submitted_ms;
    if (!ends.empty()) t = std::min(t, ends.top().first);
    if (t == INT64_MAX) return absl::InternalError("jobs wait but nothing runs or arrives");
    if (sched.size() > 0) {
      idle_integral += static_cast<double>(free_total) * static_cast<double>(t - now);
      wait_time += static_cast<double>(t - now);
    }
    now = t;
    while (!ends.empty() && ends.top().first == now) {
      const size_t i = ends.top().second;
      ends.pop();
      Live& l = live[i];
      for (const auto& [node, g] : l.held) {
        nodes[node].free += g;
        free[nodes[node].model] += g;
        free_total += g;
      }
      running.erase(i);
      share.Add(l.sched.tenant, l.trace.gpus * l.trace.duration_s, now);
      ++finished;
    }
    while (next < live.size() && live[next].sched.submitted_ms == now) {
      sched.Enqueue(live[next].sched);
      ++next;
    }
    if (free_total > 0 && sched.size() > 0) {
      std::vector<federation::RunningJob> run;
      if (opts.policy == federation::SchedPolicy::kFedgate) {
        run.reserve(running.size());
        for (const auto& [i, r] : running) run.push_back(r);
      }
      sched.Pass(now, free, std::move(run), try_start, &share);
    }
    if (opts.progress && std::chrono::steady_clock::now() - last_progress > std::chrono::seconds(5)) {
      last_progress = std::chrono::steady_clock::now();
      std::fprintf(stderr, "fedsim %s: %zu/%zu jobs finished, %zu queued, simulated day %.1f\n",
                   res.policy.c_str(), finished, live.size(), sched.size(), now / 86400000.0);
    }
  }

  std::vector<double> jct, queue;
  double busy = 0, last_end = 0;
  for (const auto& l : live) {
    jct.push_back(l.end_s - (l.trace.submit_s - from));
    queue.push_back(l.start_s - (l.trace.submit_s - from));
    busy += l.trace.gpus * (l.end_s - l.start_s);
    last_end = std::max(last_end, l.end_s);
  }
  auto pct = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p * v.size())) - (p > 0 ? 1 : 0));
    return v[k];
  };
  res.jobs = live.size();
  for (double x : jct) res.avg_jct_s += x / jct.size();
  for (double x : queue) res.avg_queue_s += x / queue.size();
  res.p50_jct_s = pct(jct, 0.5);
  res.p99_queue_s = pct(queue, 0.99);
  res.makespan_s = last_end - (first_submit - from);
  res.gpu_utilization = res.makespan_s > 0 ? busy / (res.capacity * res.makespan_s) : 0;
  res.avg_idle_gpus_waiting = wait_time > 0 ? idle_integral / wait_time : 0;
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  res.jobs_per_second = res.wall_s > 0 ? res.jobs / res.wall_s : 0;
  return res;
}

}  // namespace fedgate::fedsim
