// Placement latency for a 64-GPU job at 10, 100 and 1000 sites (Google
// Benchmark). Sites have 2 nodes with 4-8 free GPUs each, mixed models, 3/4 of
// the links measured at random speeds, looked up in a LinkMatrix as the
// gateway's Plan does.
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
      if (rng() % 4 != 0) {
        fedgate::v1::Link l;
        l.set_from("site-" + std::to_string(a));
        l.set_to("site-" + std::to_string(b));
        l.set_gbps(gbps(rng));
        l.set_measured_at_unix_ms(1000);
        w.links.Merge(l);
      }
    }
  }
  return w;
}

void BM_Place64Gpus(benchmark::State& state) {
  const int sites = static_cast<int>(state.range(0));
  World w = Make(sites, 42);
  size_t calls = 0;
  auto links = [&](const std::string& a, const std::string& b) -> std::optional<double> {
    ++calls;
    return w.links.PairGbps(a, b, 2000);
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
  state.counters["link_lookups"] = static_cast<double>(calls) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_Place64Gpus)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
