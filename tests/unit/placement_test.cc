#include "federation/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

namespace fedgate::federation {
namespace {

// ---- An independent brute-force enumerator (not the production search) ----

struct BruteBest {
  bool found = false;
  std::vector<std::string> sites;  // sorted
  uint32_t count = 0;
  double bottleneck = 0;
  uint32_t leftover = 0;
};

uint32_t MatchingFree(const JobRequest& job, const SiteOffer& o) {
  uint32_t free = 0;
  for (const auto& n : o.nodes) {
    const bool model = job.gpu_models.empty() ||
                       std::count(job.gpu_models.begin(), job.gpu_models.end(), n.gpu_model) > 0;
    if (model && n.gpu_memory_gib >= job.min_gpu_memory_gib) free += n.free_gpus;
  }
  return free;
}

BruteBest Brute(const JobRequest& job, const std::vector<SiteOffer>& offers, const PairGbps& links) {
  BruteBest best;
  const int n = static_cast<int>(offers.size());
  const uint32_t min_per = std::max<uint32_t>(1, job.min_gpus_per_site);
  for (int mask = 1; mask < (1 << n); ++mask) {
    std::vector<int> members;
    for (int i = 0; i < n; ++i) {
      if (mask & (1 << i)) members.push_back(i);
    }
    if (job.max_sites > 0 && members.size() > job.max_sites) continue;
    bool ok = true;
    uint32_t free = 0;
    std::vector<std::string> names;
    for (int i : members) {
      const auto& o = offers[i];
      const bool allowed =
          job.allowed_sites.empty() ||
          std::count(job.allowed_sites.begin(), job.allowed_sites.end(), o.site) > 0;
      const bool avoided =
          std::count(job.avoided_sites.begin(), job.avoided_sites.end(), o.site) > 0;
      const uint32_t f = MatchingFree(job, o);
      if (!o.up || !allowed || avoided || f < min_per) ok = false;
      free += f;
      names.push_back(o.site);
    }
    if (!ok || free < job.gpus || min_per * members.size() > job.gpus) continue;
    double bottleneck = INFINITY;
    for (size_t a = 0; a < members.size() && ok; ++a) {
      for (size_t b = a + 1; b < members.size(); ++b) {
        auto g = links(offers[members[a]].site, offers[members[b]].site);
        if (job.min_link_gbps > 0 && (!g || *g < job.min_link_gbps)) ok = false;
        bottleneck = std::min(bottleneck, g ? *g : 0.0);
      }
    }
    if (!ok) continue;
    std::sort(names.begin(), names.end());
    const uint32_t count = static_cast<uint32_t>(members.size());
    const uint32_t leftover = free - job.gpus;
    auto key = std::make_tuple(count, -bottleneck, leftover, names);
    auto best_key = std::make_tuple(best.count, -best.bottleneck, best.leftover, best.sites);
    if (!best.found || key < best_key) {
      best = {true, names, count, bottleneck, leftover};
    }
  }
  return best;
}

// ---- Random small federations ----

struct World {
  std::vector<SiteOffer> offers;
  std::map<std::pair<std::string, std::string>, double> links;
  JobRequest job;
};

World RandomWorld(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  World w;
  const int sites = pick(1, 6);
  const char* models[] = {"A100-80GB", "H100", "L40S"};
  for (int s = 0; s < sites; ++s) {
    SiteOffer o;
    o.site = "s" + std::to_string(s);
    o.up = pick(0, 9) > 0;
    const int nodes = pick(1, 3);
    for (int k = 0; k < nodes; ++k) {
      o.nodes.push_back({o.site + "-n" + std::to_string(k), models[pick(0, 2)],
                         static_cast<uint32_t>(pick(0, 1) ? 80 : 40),
                         static_cast<uint32_t>(pick(0, 8))});
    }
    w.offers.push_back(o);
  }
  const double levels[] = {0.04, 0.1, 0.4, 1, 10};
  for (int a = 0; a < sites; ++a) {
    for (int b = 0; b < sites; ++b) {
      if (a != b && pick(0, 3) > 0) {
        w.links[{"s" + std::to_string(a), "s" + std::to_string(b)}] = levels[pick(0, 4)];
      }
    }
  }
  JobRequest& j = w.job;
  j.gpus = static_cast<uint32_t>(pick(1, 24));
  if (pick(0, 2) == 0) j.gpu_models = {models[pick(0, 2)]};
  if (pick(0, 3) == 0) j.min_gpu_memory_gib = 80;
  if (pick(0, 2) == 0) j.max_sites = static_cast<uint32_t>(pick(1, 3));
  if (pick(0, 3) == 0) j.min_gpus_per_site = static_cast<uint32_t>(pick(1, 6));
  if (pick(0, 3) == 0) j.min_link_gbps = levels[pick(0, 3)];
  if (pick(0, 5) == 0) j.avoided_sites = {"s" + std::to_string(pick(0, sites - 1))};
  if (pick(0, 6) == 0) j.allowed_sites = {"s0", "s1", "s2"};
  return w;
}

PairGbps LinksOf(const World& w) {
  return [&w](const std::string& a, const std::string& b) -> std::optional<double> {
    auto ab = w.links.find({a, b});
    auto ba = w.links.find({b, a});
    if (ab != w.links.end() && ba != w.links.end()) return std::min(ab->second, ba->second);
    if (ab != w.links.end()) return ab->second;
    if (ba != w.links.end()) return ba->second;
    return std::nullopt;
  };
}

void CheckSlices(const World& w, const Placement& p) {
  uint32_t next_rank = 0;
  std::map<std::string, uint32_t> per_site;
  for (const auto& s : p.slices) {
    ASSERT_EQ(s.first_rank, next_rank) << "ranks are contiguous, site by site";
    next_rank += s.gpus;
    per_site[s.site] += s.gpus;
    const NodeOffer* node = nullptr;
    for (const auto& o : w.offers) {
      for (const auto& n : o.nodes) {
        if (o.site == s.site && n.name == s.node) node = &n;
      }
    }
    ASSERT_NE(node, nullptr);
    EXPECT_LE(s.gpus, node->free_gpus);
    EXPECT_GE(node->gpu_memory_gib, w.job.min_gpu_memory_gib);
    if (!w.job.gpu_models.empty()) {
      EXPECT_EQ(node->gpu_model, w.job.gpu_models[0]);
    }
  }
  EXPECT_EQ(next_rank, w.job.gpus);
  for (const auto& [site, g] : per_site) EXPECT_GE(g, std::max(1u, w.job.min_gpus_per_site));
  EXPECT_EQ(per_site.size(), p.sites.size());
}

TEST(Placement, MatchesBruteForceOnThousandsOfRandomFederations) {
  const unsigned base = std::random_device{}();
  std::printf("[ seed ] placement base seed %u (case seed = base + i)\n", base);
  int placed = 0;
  for (unsigned i = 0; i < 3000; ++i) {
    std::mt19937 rng(base + i);
    World w = RandomWorld(rng);
    auto links = LinksOf(w);
    auto got = Place(w.job, w.offers, links);
    auto want = Brute(w.job, w.offers, links);
    SCOPED_TRACE("case seed " + std::to_string(base + i));
    ASSERT_EQ(got.placement.has_value(), want.found);
    ASSERT_EQ(got.explanation.size(), w.offers.size()) << "every site is explained";
    if (!want.found) continue;
    ++placed;
    std::vector<std::string> sites = got.placement->sites;
    std::sort(sites.begin(), sites.end());
    EXPECT_EQ(sites.size(), want.count);
    EXPECT_EQ(got.placement->bottleneck_gbps, want.bottleneck);
    EXPECT_EQ(got.placement->leftover_gpus, want.leftover);
    EXPECT_EQ(sites, want.sites) << "stable tie-break";
    CheckSlices(w, *got.placement);
  }
  std::printf("[ seed ] %d of 3000 random jobs were placeable\n", placed);
  EXPECT_GT(placed, 500) << "the generator should make most cases placeable";
}

TEST(Placement, ExplainsEverySite) {
  std::vector<SiteOffer> offers = {
      {"cn-beijing", true, {{"bj-1", "A100-80GB", 80, 8}}, {}},
      {"cn-shanghai", true, {{"sh-1", "A100-80GB", 80, 4}, {"sh-2", "H100", 80, 4}}, {}},
      {"cn-shenzhen", true, {{"sz-1", "H100", 80, 16}}, {}},
      {"cn-wuhan", false, {{"wh-1", "A100-80GB", 80, 8}}, {}},
      {"cn-xian", true, {{"xa-1", "A100-80GB", 40, 8}}, {}},
  };
  JobRequest job;
  job.gpus = 12;
  job.gpu_models = {"A100-80GB"};
  job.min_gpu_memory_gib = 80;
  auto r = Place(job, offers, [](auto&, auto&) { return std::nullopt; });
  ASSERT_TRUE(r.placement.has_value());
  EXPECT_EQ(r.placement->sites, (std::vector<std::string>{"cn-beijing", "cn-shanghai"}));
  ASSERT_EQ(r.placement->slices.size(), 2u);
  EXPECT_EQ(r.placement->slices[0].node, "bj-1");
  EXPECT_EQ(r.placement->slices[0].gpus, 8u);
  EXPECT_EQ(r.placement->slices[1].node, "sh-1");
  EXPECT_EQ(r.placement->slices[1].first_rank, 8u);
  std::map<std::string, SiteExplanation> e;
  for (const auto& x : r.explanation) e[x.site] = x;
  EXPECT_TRUE(e["cn-beijing"].used);
  EXPECT_TRUE(e["cn-shanghai"].used);
  EXPECT_NE(e["cn-shenzhen"].reason.find("no GPU of model A100-80GB"), std::string::npos);
  EXPECT_NE(e["cn-wuhan"].reason.find("down"), std::string::npos);
  EXPECT_NE(e["cn-xian"].reason.find("80 GiB"), std::string::npos);

  job.gpus = 30;
  r = Place(job, offers, [](auto&, auto&) { return std::nullopt; });
  EXPECT_FALSE(r.placement.has_value());
  EXPECT_NE(r.summary.find("cannot place 30"), std::string::npos) << r.summary;
}

TEST(Placement, PrefersTheFasterPairAndHonoursMinLink) {
  std::vector<SiteOffer> offers = {
      {"a", true, {{"a1", "H100", 80, 4}}, {}},
      {"b", true, {{"b1", "H100", 80, 4}}, {}},
      {"c", true, {{"c1", "H100", 80, 4}}, {}},
  };
  std::map<std::pair<std::string, std::string>, double> g = {
      {{"a", "b"}, 0.38}, {{"a", "c"}, 0.09}, {{"b", "c"}, 0.04}};
  auto links = [&](const std::string& x, const std::string& y) -> std::optional<double> {
    auto it = g.find({std::min(x, y), std::max(x, y)});
    if (it == g.end()) return std::nullopt;
    return it->second;
  };
  JobRequest job;
  job.gpus = 6;
  auto r = Place(job, offers, links);
  ASSERT_TRUE(r.placement);
  EXPECT_EQ(r.placement->sites, (std::vector<std::string>{"a", "b"}));
  EXPECT_DOUBLE_EQ(r.placement->bottleneck_gbps, 0.38);
  g[{"a", "b"}] = 0.019;  // the a-b link degraded
  r = Place(job, offers, links);
  ASSERT_TRUE(r.placement);
  EXPECT_EQ(r.placement->sites, (std::vector<std::string>{"a", "c"}));
  job.min_link_gbps = 0.5;
  r = Place(job, offers, links);
  EXPECT_FALSE(r.placement.has_value()) << "no pair reaches 0.5 Gbit/s";
}

TEST(Placement, GreedyBeyondTheExactBudgetStillPlacesValidly) {
  std::vector<SiteOffer> offers;
  for (int i = 0; i < 40; ++i) {
    offers.push_back({"s" + std::to_string(i), true, {{"n", "H100", 80, 4}}, {}});
  }
  JobRequest job;
  job.gpus = 20;  // needs 5 sites: C(40,5) is beyond a budget of 1000
  auto r = Place(job, offers, [](auto&, auto&) { return std::optional<double>(1.0); }, 1000);
  ASSERT_TRUE(r.placement.has_value());
  EXPECT_EQ(r.placement->sites.size(), 5u);
  uint32_t total = 0;
  for (const auto& s : r.placement->slices) total += s.gpus;
  EXPECT_EQ(total, 20u);
}

// The greedy search as first written: every step looks up the link from the
// site just added to every other candidate. Place prunes candidates whose
// bottleneck fell to 0; it must still pick exactly what this full scan picks.
std::vector<std::string> FullScanGreedy(const JobRequest& job, const std::vector<SiteOffer>& offers,
                                        const PairGbps& links) {
  const uint32_t min_per = std::max<uint32_t>(1, job.min_gpus_per_site);
  struct E {
    std::string site;
    uint32_t free;
  };
  std::vector<E> el;
  for (const auto& o : offers) {
    const uint32_t f = MatchingFree(job, o);
    if (o.up && f >= min_per) el.push_back({o.site, f});
  }
  std::sort(el.begin(), el.end(), [](const E& a, const E& b) { return a.site < b.site; });
  const int n = static_cast<int>(el.size());
  auto ok_bw = [&](int a, int b) {
    auto g = links(el[a].site, el[b].site);
    return std::make_pair(job.min_link_gbps <= 0 || (g && *g >= job.min_link_gbps), g ? *g : 0.0);
  };
  std::vector<int> seeds(n);
  for (int i = 0; i < n; ++i) seeds[i] = i;
  std::stable_sort(seeds.begin(), seeds.end(), [&](int a, int b) { return el[a].free > el[b].free; });
  seeds.resize(std::min(n, 8));
  std::vector<uint32_t> frees;
  for (const auto& e : el) frees.push_back(e.free);
  std::sort(frees.rbegin(), frees.rend());
  uint64_t top = 0;
  const int max_k = job.max_sites == 0 ? n : std::min<int>(n, static_cast<int>(job.max_sites));
  for (int k = 1; k <= max_k; ++k) {
    top += frees[k - 1];
    if (top < job.gpus) continue;
    if (static_cast<uint64_t>(min_per) * k > job.gpus) break;
    std::optional<std::tuple<double, uint64_t, std::vector<std::string>>> best;  // -bw, leftover, names
    for (int seed : seeds) {
      std::vector<int> idx = {seed};
      std::vector<double> reach(n, INFINITY);
      std::vector<char> usable(n, 1);
      usable[seed] = 0;
      int added = seed;
      while (static_cast<int>(idx.size()) < k) {
        int pick = -1;
        double pick_bw = -1;
        for (int c = 0; c < n; ++c) {
          if (!usable[c]) continue;
          auto [ok, g] = ok_bw(added, c);
          if (!ok) {
            usable[c] = 0;
            continue;
          }
          reach[c] = std::min(reach[c], g);
          if (reach[c] > pick_bw || (reach[c] == pick_bw && el[c].free > el[pick].free)) {
            pick = c;
            pick_bw = reach[c];
          }
        }
        if (pick < 0) break;
        idx.push_back(pick);
        usable[pick] = 0;
        added = pick;
      }
      if (static_cast<int>(idx.size()) != k) continue;
      uint64_t free = 0;
      double bw = INFINITY;
      bool ok = true;
      for (size_t a = 0; a < idx.size(); ++a) {
        free += el[idx[a]].free;
        for (size_t b = a + 1; b < idx.size(); ++b) {
          auto [link_ok, g] = ok_bw(idx[a], idx[b]);
          ok = ok && link_ok;
          bw = std::min(bw, g);
        }
      }
      if (!ok || free < job.gpus) continue;
      std::vector<std::string> names;
      for (int i : idx) names.push_back(el[i].site);
      std::sort(names.begin(), names.end());
      auto key = std::make_tuple(-bw, free - job.gpus, names);
      if (!best || key < *best) best = key;
    }
    if (best) return std::get<2>(*best);
  }
  return {};
}

TEST(Placement, PrunedGreedyPicksWhatAFullScanPicks) {
  const unsigned base = std::random_device{}();
  std::printf("[ seed ] greedy base seed %u (case seed = base + i)\n", base);
  int placed = 0;
  for (unsigned i = 0; i < 300; ++i) {
    std::mt19937 rng(base + i);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    World w;
    const int sites = pick(10, 60);
    const int link_percent = pick(0, 2) == 0 ? 100 : pick(2, 30);  // dense or sparse views
    for (int s = 0; s < sites; ++s) {
      SiteOffer o{"s" + std::to_string(s), pick(0, 19) > 0, {}, {}};
      for (int k = 0; k < pick(1, 2); ++k) {
        o.nodes.push_back({"n" + std::to_string(k), pick(0, 3) ? "H100" : "L40S", 80,
                           static_cast<uint32_t>(pick(0, 8))});
      }
      w.offers.push_back(o);
    }
    const double levels[] = {0, 0.1, 0.4, 1, 10, 25};  // 0: a measured dead link
    for (int a = 0; a < sites; ++a) {
      for (int b = 0; b < sites; ++b) {
        if (a != b && pick(1, 100) <= link_percent) {
          w.links[{"s" + std::to_string(a), "s" + std::to_string(b)}] = levels[pick(0, 5)];
        }
      }
    }
    w.job.gpus = static_cast<uint32_t>(pick(4, 60));
    if (pick(0, 2) == 0) w.job.gpu_models = {"H100"};
    if (pick(0, 3) == 0) w.job.min_gpus_per_site = static_cast<uint32_t>(pick(1, 4));
    if (pick(0, 3) == 0) w.job.min_link_gbps = levels[pick(1, 3)];
    if (pick(0, 3) == 0) w.job.max_sites = static_cast<uint32_t>(pick(2, 8));
    SCOPED_TRACE("case seed " + std::to_string(base + i));
    auto links = LinksOf(w);
    auto got = Place(w.job, w.offers, links, /*exact_budget=*/0);  // greedy at every size
    auto want = FullScanGreedy(w.job, w.offers, links);
    ASSERT_EQ(got.placement.has_value(), !want.empty());
    if (want.empty()) continue;
    ++placed;
    auto sites_got = got.placement->sites;
    std::sort(sites_got.begin(), sites_got.end());
    EXPECT_EQ(sites_got, want);
    CheckSlices(w, *got.placement);
  }
  std::printf("[ seed ] %d of 300 greedy cases were placeable\n", placed);
  EXPECT_GT(placed, 100) << "the generator should make many cases placeable";
}

}  // namespace
}  // namespace fedgate::federation
