// fedsim: replays a GPU job trace through fedgate's queue policy and
// placement on a simulated clock (DESIGN.md "fedsim").
//   fedsim --trace FILE --sites NAME=MODEL:GPUS,... --policy fifo|sjf|fedgate
//          [--limit N] [--start-hour H] [--estimate-noise F] [--seed S] [-o table|json]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "bench/fedsim/sim.h"

using namespace fedgate;

int main(int argc, char** argv) {
  CLI::App app{"fedsim: replay a job trace through fedgate's queue policy and placement"};
  std::string trace_path, sites_text, policy = "fedgate", output = "table";
  fedsim::SimOptions opts;
  app.add_option("--trace", trace_path, "trace CSV (columns time, duration, num_gpus; "
                                        "optional tenant, gpu_model, priority)")->required();
  app.add_option("--sites", sites_text, "NAME=MODEL:GPUS,... (nodes of 8 GPUs)")->required();
  app.add_option("--policy", policy, "fifo, sjf or fedgate (default fedgate)");
  app.add_option("--limit", opts.limit, "replay at most N jobs of the window");
  app.add_option("--start-hour", opts.start_hour, "replay jobs submitted from hour H on");
  app.add_option("--estimate-noise", opts.estimate_noise,
                 "estimates are the true duration x U[1-F, 1+F] (seeded)")->check(CLI::Range(0.0, 0.99));
  app.add_option("--aging", opts.aging, "fedgate's aging credit per second waited (default 0.01)");
  app.add_option("--seed", opts.seed, "seed of derived columns and noise (default 1)");
  app.add_option("-o,--output", output, "table or json")->check(CLI::IsMember({"table", "json"}));
  CLI11_PARSE(app, argc, argv);

  auto p = federation::ParseSchedPolicy(policy);
  if (!p.ok()) {
    std::fprintf(stderr, "fedsim: --policy: %s\n", std::string(p.status().message()).c_str());
    return 2;
  }
  opts.policy = *p;
  opts.progress = true;
  auto sites = fedsim::ParseSites(sites_text);
  if (!sites.ok()) {
    std::fprintf(stderr, "fedsim: %s\n", std::string(sites.status().message()).c_str());
    return 2;
  }
  std::ifstream f(trace_path);
  if (!f) {
    std::fprintf(stderr, "fedsim: cannot read trace %s\n", trace_path.c_str());
    return 2;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  fedsim::TraceInfo info;
  auto jobs = fedsim::ParseTrace(ss.str(), &info);
  if (!jobs.ok()) {
    std::fprintf(stderr, "fedsim: %s: %s\n", trace_path.c_str(), std::string(jobs.status().message()).c_str());
    return 1;
  }
  auto r = fedsim::Simulate(std::move(*jobs), info, *sites, opts);
  if (!r.ok()) {
    std::fprintf(stderr, "fedsim: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  if (output == "json") {
    std::printf(
        "{\"policy\": \"%s\", \"jobs\": %zu, \"avg_jct_seconds\": %.3f, \"p50_jct_seconds\": %.3f, "
        "\"p99_queue_seconds\": %.3f, \"makespan_seconds\": %.3f, \"gpu_utilization\": %.6f, "
        "\"avg_idle_gpus_while_waiting\": %.3f, \"avg_queue_seconds\": %.3f, \"left_out\": %zu, "
        "\"offered_load\": %.4f, \"capacity_gpus\": %u, \"jobs_per_second\": %.0f, "
        "\"derived\": \"%s\"}\n",
        r->policy.c_str(), r->jobs, r->avg_jct_s, r->p50_jct_s, r->p99_queue_s, r->makespan_s,
        r->gpu_utilization, r->avg_idle_gpus_waiting, r->avg_queue_s, r->left_out, r->offered_load,
        r->capacity, r->jobs_per_second, r->derived.c_str());
    return 0;
  }
  std::printf("# fedsim: %s, %zu jobs on %u GPUs (offered load %.2f), %zu left out (too large)\n",
              r->policy.c_str(), r->jobs, r->capacity, r->offered_load, r->left_out);
  std::printf("# %s\n", r->derived.c_str());
  std::printf("%-8s %12s %12s %14s %14s %8s %12s %12s\n", "policy", "avg_jct_s", "p50_jct_s",
              "p99_queue_s", "makespan_s", "util", "idle_gpus_w", "sim_jobs/s");
  std::printf("%-8s %12.0f %12.0f %14.0f %14.0f %8.3f %12.1f %12.0f\n", r->policy.c_str(),
              r->avg_jct_s, r->p50_jct_s, r->p99_queue_s, r->makespan_s, r->gpu_utilization,
              r->avg_idle_gpus_waiting, r->jobs_per_second);
  return 0;
}
