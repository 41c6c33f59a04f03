// Placement latency for a 64-GPU job at 10, 100 and 1000 sites (Google
// Benchmark). Sites have 2 nodes with 4-8 free GPUs each, mixed models, 3/4 of
// the links measured at random speeds.
#include <benchmark/benchmark.h>

#include <map>
#include <random>

#include "federation/placement.h"

namespace {

using namespace fedgate::federation;

struct World {
  std::vector<SiteOffer> offers;
  std::map<std::pair<int, int>, double> links;
};

World Make(int sites, unsigned seed) {
  std::mt19937 rng(seed);
  World w;
  const char* models[] = {"A100-80GB", "H100"};
  for (int s = 0; s < sites; ++s) {
    SiteOffer o{"site-" + std::to_string(s), true, {}};
    for (int n = 0; n < 2; ++n) {
      o.nodes.push_back({"n" + std::to_string(n), models[rng() % 2], 80,
                         static_cast<uint32_t>(4 + rng() % 5)});
    }
    w.offers.push_back(o);
  }
  std::uniform_real_distribution<double> gbps(0.05, 100);
  for (int a = 0; a < sites; ++a) {
    for (int b = a + 1; b < sites; ++b) {
      if (rng() % 4 != 0) w.links[{a, b}] = gbps(rng);
    }
  }
  return w;
}

void BM_Place64Gpus(benchmark::State& state) {
  const int sites = static_cast<int>(state.range(0));
  World w = Make(sites, 42);
  auto links = [&](const std::string& a, const std::string& b) -> std::optional<double> {
    int x = std::stoi(a.substr(5)), y = std::stoi(b.substr(5));
    auto it = w.links.find({std::min(x, y), std::max(x, y)});
    if (it == w.links.end()) return std::nullopt;
    return it->second;
  };
  JobRequest job;
  job.gpus = 64;
  size_t placed_sites = 0;
  for (auto _ : state) {
    auto r = Place(job, w.offers, links);
    benchmark::DoNotOptimize(r);
    placed_sites = r.placement ? r.placement->sites.size() : 0;
  }
  state.counters["sites_used"] = static_cast<double>(placed_sites);
}
BENCHMARK(BM_Place64Gpus)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
