// Placement latency for a 64-GPU job (Google Benchmark). Sites have 2 nodes
// with 4-8 free GPUs each, mixed models, links at random speeds looked up in a
// LinkMatrix by site id as the gateway's Plan does.
//   BM_Place64Gpus/N        3/4 of all N*(N-1)/2 pairs measured (10-1000 sites)
//   BM_Place64GpusSparse/N  each site measured to 32 random others: a
//                           10 000-site world with 3/4 of all pairs would
//                           hold 37 million links, which no federation
//                           measures (each is a bandwidth test).
#include <benchmark/benchmark.h>

#include <map>
#include <random>

#include "federation/link_matrix.h"
#include "federation/placement.h"

namespace {

using namespace fedgate::federation;

struct World {
  std::vector<SiteOffer> offers;
  LinkMatrix links{3600 * 1000};  // what the gateway's Plan reads
};

// links_per_site 0: 3/4 of all pairs; otherwise that many random partners each.
World Make(int sites, unsigned seed, int links_per_site) {
  std::mt19937 rng(seed);
  World w;
  const char* models[] = {"A100-80GB", "H100"};
  for (int s = 0; s < sites; ++s) {
    SiteOffer o{"site-" + std::to_string(s), true, {}, {}};
    for (int n = 0; n < 2; ++n) {
      o.nodes.push_back({"n" + std::to_string(n), models[rng() % 2], 80,
                         static_cast<uint32_t>(4 + rng() % 5)});
    }
    w.offers.push_back(o);
  }
  std::uniform_real_distribution<double> gbps(0.05, 100);
  auto add = [&](int a, int b) {
    fedgate::v1::Link l;
    l.set_from("site-" + std::to_string(a));
    l.set_to("site-" + std::to_string(b));
    l.set_gbps(gbps(rng));
    l.set_measured_at_unix_ms(1000);
    w.links.Merge(l);
  };
  if (links_per_site > 0) {
    for (int a = 0; a < sites; ++a) {
      for (int i = 0; i < links_per_site; ++i) {
        const int b = static_cast<int>(rng() % sites);
        if (b != a) add(a, b);
      }
    }
    return w;
  }
  for (int a = 0; a < sites; ++a) {
    for (int b = a + 1; b < sites; ++b) {
      if (rng() % 4 != 0) add(a, b);
    }
  }
  return w;
}

void Run(benchmark::State& state, int links_per_site) {
  const int sites = static_cast<int>(state.range(0));
  World w = Make(sites, 42, links_per_site);
  JobRequest job;
  job.gpus = 64;
  size_t calls = 0, placed_sites = 0;
  for (auto _ : state) {
    // Resolving the ids is part of each placement, as in the gateway.
    std::vector<std::optional<uint32_t>> ids;
    ids.reserve(w.offers.size());
    for (const auto& o : w.offers) ids.push_back(w.links.SiteId(o.site));
    auto links = [&](size_t a, size_t b) -> std::optional<double> {
      ++calls;
      if (!ids[a] || !ids[b]) return std::nullopt;
      return w.links.PairGbps(*ids[a], *ids[b], 2000);
    };
    auto r = PlaceByIndex(job, w.offers, links);
    benchmark::DoNotOptimize(r);
    placed_sites = r.placement ? r.placement->sites.size() : 0;
  }
  state.counters["sites_used"] = static_cast<double>(placed_sites);
  state.counters["link_lookups"] = static_cast<double>(calls) / static_cast<double>(state.iterations());
}

void BM_Place64Gpus(benchmark::State& state) { Run(state, 0); }
void BM_Place64GpusSparse(benchmark::State& state) { Run(state, 32); }
BENCHMARK(BM_Place64Gpus)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Place64GpusSparse)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
