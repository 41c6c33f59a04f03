#include "federation/placement.h"

#include "federation/mig.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "base/str_cat.h"
#include "federation/dataset.h"

namespace fedgate::federation {
namespace {

constexpr size_t kGreedySeeds = 8;
// The exact search's pair table is n*n doubles: 700 sites, 3.9 MB.
constexpr int kMaxMemoSites = 700;

struct Eligible {
  std::string site;
  size_t offer = 0;  // index into the offers, for link lookups
  uint32_t free = 0;  // GPUs matching the job's models and memory
  std::vector<NodeOffer> nodes;  // matching nodes only
};

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string JoinModels(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& m : v) out += (out.empty() ? "" : ", ") + m;
  return out;
}

struct Candidate {
  std::vector<int> idx;  // into eligible, sorted by site name
  Score score;
  std::string key;  // joined site names, for the stable tie-break
};

bool CandidateBetter(const Candidate& a, const Candidate& b) {
  if (Better(a.score, b.score)) return true;
  if (Better(b.score, a.score)) return false;
  return a.key < b.key;
}

}  // namespace

bool Better(const Score& a, const Score& b) {
  if (a.sites != b.sites) return a.sites < b.sites;
  if (a.staging_seconds != b.staging_seconds) return a.staging_seconds < b.staging_seconds;
  if (a.bottleneck_gbps != b.bottleneck_gbps) return a.bottleneck_gbps > b.bottleneck_gbps;
  return a.leftover_gpus < b.leftover_gpus;
}

PlacementResult Place(const JobRequest& job, const std::vector<SiteOffer>& offers,
                      const PairGbps& links, uint64_t exact_budget) {
  return PlaceByIndex(
      job, offers,
      [&](size_t a, size_t b) { return links(offers[a].site, offers[b].site); }, exact_budget);
}

namespace {

// The objective without preferred_sites.
PlacementResult PlaceAny(const JobRequest& job, const std::vector<SiteOffer>& offers,
                         const OfferPairGbps& links, uint64_t exact_budget) {
  PlacementResult result;
  std::string missing;
  const auto staging = job.datasets.empty()
                           ? std::vector<SiteStaging>(offers.size())
                           : StagingPerOffer(job.datasets, offers, links, &missing);
  if (!missing.empty()) {
    for (const auto& o : offers) result.explanation.push_back({o.site, false, StrCat("no site up holds dataset ", missing)});
    result.summary = StrCat("cannot place ", job.gpus, " GPU(s) now: no site up holds dataset ", missing);
    return result;
  }
  std::map<std::string, std::string> why_not;
  std::vector<Eligible> eligible;
  const uint32_t min_per_site = std::max<uint32_t>(1, job.min_gpus_per_site);

  for (size_t oi = 0; oi < offers.size(); ++oi) {
    const auto& o = offers[oi];
    if (!o.up) {
      why_not[o.site] = "down (no recent ad)";
      continue;
    }
    if (!job.allowed_sites.empty() && !Contains(job.allowed_sites, o.site)) {
      why_not[o.site] = "not in allowed_sites";
      continue;
    }
    if (Contains(job.avoided_sites, o.site)) {
      why_not[o.site] = "in avoided_sites";
      continue;
    }
    Eligible e{o.site, oi, 0, {}};
    bool model_seen = false, memory_ok = false;
    for (const auto& n : o.nodes) {
      // A MIG job only on slices of its profile (gpu_models then name their
      // GPUs' model); a whole-GPU job never on a slice.
      const std::string profile = MigProfileOf(n.gpu_model);
      if (profile != job.mig_profile) continue;
      const std::string base = profile.empty() ? n.gpu_model
                                               : n.gpu_model.substr(0, n.gpu_model.size() - profile.size() - 5);
      if (!job.gpu_models.empty() && !Contains(job.gpu_models, base)) continue;
      model_seen = true;
      if (n.gpu_memory_gib < job.min_gpu_memory_gib) continue;
      memory_ok = true;
      if (n.free_gpus == 0) continue;
      e.free += n.free_gpus;
      e.nodes.push_back(n);
    }
    if (!model_seen) {
      why_not[o.site] = job.mig_profile.empty()
                            ? StrCat("no GPU of model ", JoinModels(job.gpu_models))
                            : StrCat("no MIG slice of profile ", job.mig_profile,
                                     job.gpu_models.empty() ? "" : " on " + JoinModels(job.gpu_models));
    } else if (!memory_ok) {
      why_not[o.site] = StrCat("no GPU with at least ", job.min_gpu_memory_gib, " GiB");
    } else if (e.free == 0) {
      why_not[o.site] = "no matching GPU free";
    } else if (e.free < min_per_site) {
      why_not[o.site] = StrCat("only ", e.free, " matching GPU(s) free, min_gpus_per_site is ",
                               min_per_site);
    } else {
      eligible.push_back(std::move(e));
    }
  }
  std::sort(eligible.begin(), eligible.end(),
            [](const Eligible& a, const Eligible& b) { return a.site < b.site; });
  const int n = static_cast<int>(eligible.size());

  // Pairwise bandwidth of eligible sites. The exact search revisits each pair
  // many times, so while it runs (n is small then) lookups are memoised in a
  // dense table; the greedy search looks each pair up about once.
  constexpr double kNotLooked = -2, kUnknown = -1;
  std::vector<double> memo;
  auto lookup = [&](int i, int j) -> double {
    auto g = links(eligible[i].offer, eligible[j].offer);
    return g ? *g : kUnknown;
  };
  auto raw = [&](int i, int j) -> double {
    if (memo.empty()) return lookup(i, j);
    if (i > j) std::swap(i, j);
    double& cell = memo[static_cast<size_t>(i) * n + j];
    if (cell == kNotLooked) cell = lookup(i, j);
    return cell;
  };
  // (bandwidth with unknown as 0, whether the pair meets min_link_gbps)
  auto pair = [&](int i, int j) -> std::pair<double, bool> {
    const double g = raw(i, j);
    if (g < 0) return {0.0, job.min_link_gbps <= 0};
    return {g, job.min_link_gbps <= 0 || g >= job.min_link_gbps};
  };
  auto bw_of = [&](int i, int j) { return pair(i, j).first; };
  auto link_ok_of = [&](int i, int j) { return pair(i, j).second; };

  auto evaluate = [&](const std::vector<int>& idx) -> std::optional<Candidate> {
    uint64_t free = 0;
    for (int i : idx) free += eligible[i].free;
    if (free < job.gpus) return std::nullopt;
    if (static_cast<uint64_t>(min_per_site) * idx.size() > job.gpus) return std::nullopt;
    double bottleneck = std::numeric_limits<double>::infinity();
    for (size_t a = 0; a < idx.size(); ++a) {
      for (size_t b = a + 1; b < idx.size(); ++b) {
        if (!link_ok_of(idx[a], idx[b])) return std::nullopt;
        bottleneck = std::min(bottleneck, bw_of(idx[a], idx[b]));
      }
    }
    double stage = 0;
    for (int i : idx) stage = std::max(stage, staging[eligible[i].offer].seconds);
    Candidate c;
    c.idx = idx;
    std::sort(c.idx.begin(), c.idx.end());
    c.score = {static_cast<uint32_t>(idx.size()), stage, bottleneck,
               static_cast<uint32_t>(free - job.gpus)};
    for (int i : c.idx) c.key += eligible[i].site + "\n";
    return c;
  };

  std::optional<Candidate> best;
  const int max_k = job.max_sites == 0 ? n : std::min<int>(n, static_cast<int>(job.max_sites));
  // Free GPUs of the k largest sites bound what k sites can offer.
  std::vector<uint32_t> frees;
  for (const auto& e : eligible) frees.push_back(e.free);
  std::sort(frees.rbegin(), frees.rend());
  uint64_t top = 0;
  for (int k = 1; k <= max_k && !best; ++k) {
    top += frees[k - 1];
    if (top < job.gpus) continue;
    if (static_cast<uint64_t>(min_per_site) * k > job.gpus) break;
    // Count k-subsets, capped, to choose exact or greedy search.
    double combos = 1;
    for (int i = 0; i < k; ++i) combos = combos * (n - i) / (i + 1);
    if (combos <= static_cast<double>(exact_budget)) {
      // (a k-site job on nearly all of many sites also searches exactly, but
      // visits few pairs: no table then)
      if (k >= 2 && memo.empty() && n <= kMaxMemoSites) {
        memo.assign(static_cast<size_t>(n) * n, kNotLooked);
      }
      std::vector<int> idx(k);
      std::function<void(int, int)> rec = [&](int start, int depth) {
        if (depth == k) {
          if (auto c = evaluate(idx); c && (!best || CandidateBetter(*c, *best))) best = c;
          return;
        }
        for (int i = start; i <= n - (k - depth); ++i) {
          idx[depth] = i;
          rec(i + 1, depth + 1);
        }
      };
      rec(0, 0);
    } else {
      // Greedy: from each seed (the sites with the most free GPUs), add the
      // site with the best link to the chosen set (then most free GPUs)
      // until k sites.
      std::vector<int> by_free(n);
      for (int i = 0; i < n; ++i) by_free[i] = i;
      std::stable_sort(by_free.begin(), by_free.end(),
                       [&](int a, int b) { return eligible[a].free > eligible[b].free; });
      const std::vector<int> seeds(by_free.begin(),
                                   by_free.begin() + std::min<size_t>(n, kGreedySeeds));
      // Each candidate's bottleneck to the chosen set is kept up to date as
      // sites join. Only candidates whose bottleneck is still above 0 are
      // looked up again: one with an unknown (or 0) link to a chosen site can
      // only be picked when no linked one is left, and then by free GPUs
      // alone. In a sparse view that leaves a handful per step, not all n.
      memo.clear();
      memo.shrink_to_fit();
      std::vector<double> reach(n);
      std::vector<char> out(n);  // chosen, or refused by min_link_gbps
      std::vector<int> alive, next;
      for (int seed : seeds) {
        std::vector<int> idx = {seed};
        std::fill(reach.begin(), reach.end(), std::numeric_limits<double>::infinity());
        std::fill(out.begin(), out.end(), 0);
        out[seed] = 1;
        alive.clear();
        for (int c = 0; c < n; ++c) {
          if (c != seed) alive.push_back(c);
        }
        int added = seed;
        while (static_cast<int>(idx.size()) < k) {
          int pick = -1;
          double pick_bw = -1;
          next.clear();
          for (int c : alive) {
            const auto [g, ok] = pair(added, c);
            if (!ok) {
              out[c] = 1;  // a link below min_link_gbps: out for good
              continue;
            }
            reach[c] = std::min(reach[c], g);
            if (reach[c] <= 0) continue;  // unlinked: only the fallback below may pick it
            next.push_back(c);
            const double m = reach[c];
            if (m > pick_bw || (m == pick_bw && eligible[c].free > eligible[pick].free)) {
              pick = c;
              pick_bw = m;
            }
          }
          alive.swap(next);
          if (pick < 0 && job.min_link_gbps <= 0) {
            // Every candidate left has bottleneck 0: the one with the most
            // free GPUs (the first by index among equals), as a full scan would.
            for (int c : by_free) {
              if (!out[c]) {
                pick = c;
                break;
              }
            }
          }
          if (pick < 0) break;
          idx.push_back(pick);
          out[pick] = 1;
          alive.erase(std::remove(alive.begin(), alive.end(), pick), alive.end());
          added = pick;
        }
        if (static_cast<int>(idx.size()) != k) continue;
        if (auto c = evaluate(idx); c && (!best || CandidateBetter(*c, *best))) best = c;
      }
    }
  }

  if (best) {
    Placement p;
    p.bottleneck_gbps = best->score.bottleneck_gbps;
    p.leftover_gpus = best->score.leftover_gpus;
    p.staging_seconds = best->score.staging_seconds;
    // Spread the GPUs: every site its minimum, the rest to the sites with the
    // most free GPUs first (fewer, fuller slices).
    std::vector<int> order = best->idx;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return eligible[a].free > eligible[b].free; });
    std::map<int, uint32_t> take;
    uint32_t left = job.gpus;
    for (int i : order) {
      take[i] = min_per_site;
      left -= min_per_site;
    }
    for (int i : order) {
      const uint32_t more = std::min(left, eligible[i].free - take[i]);
      take[i] += more;
      left -= more;
    }
    uint32_t rank = 0;
    for (int i : best->idx) {  // ranks site by site in name order
      auto nodes = eligible[i].nodes;
      std::stable_sort(nodes.begin(), nodes.end(), [](const NodeOffer& a, const NodeOffer& b) {
        return a.free_gpus != b.free_gpus ? a.free_gpus > b.free_gpus : a.name < b.name;
      });
      uint32_t want = take[i];
      std::vector<Slice> slices;
      for (const auto& node : nodes) {
        if (want == 0) break;
        const uint32_t g = std::min(want, node.free_gpus);
        slices.push_back({eligible[i].site, node.name, g, 0});
        want -= g;
      }
      std::sort(slices.begin(), slices.end(),
                [](const Slice& a, const Slice& b) { return a.node < b.node; });
      for (auto& s : slices) {
        s.first_rank = rank;
        rank += s.gpus;
        p.slices.push_back(s);
      }
      p.sites.push_back(eligible[i].site);
      const auto& st = staging[eligible[i].offer];
      result.explanation.push_back(
          {eligible[i].site, true,
           StrCat("used: ", take[i], " of ", eligible[i].free, " matching free GPU(s)",
                  st.detail.empty() ? (job.datasets.empty() ? "" : "; holds its datasets")
                                    : StrCat("; ", st.detail))});
    }
    result.placement = std::move(p);
    result.summary = StrCat("placed on ", best->idx.size(), " site(s)");
    if (!job.datasets.empty()) {
      result.summary += best->score.staging_seconds > 0
                            ? StrCat(", datasets staged in ", HumanSeconds(best->score.staging_seconds))
                            : ", datasets already there";
    }
  } else {
    result.summary = StrCat("cannot place ", job.gpus, " GPU(s) now");
  }

  std::set<std::string> used;
  if (result.placement) used.insert(result.placement->sites.begin(), result.placement->sites.end());
  for (const auto& e : eligible) {
    if (used.contains(e.site)) continue;
    std::string reason;
    if (result.placement) {
      reason = StrCat("eligible (", e.free, " free) but not in the best set");
      if (!staging[e.offer].detail.empty()) reason += StrCat(" (", staging[e.offer].detail, ")");
      if (job.min_link_gbps > 0) {
        for (int ui : best->idx) {
          const std::string& u = eligible[ui].site;
          auto g = links(e.offer, eligible[ui].offer);
          if (!g) {
            reason = StrCat("link to ", u, " unknown (min_link_gbps ", job.min_link_gbps, ")");
          } else if (*g < job.min_link_gbps) {
            reason = StrCat("link to ", u, " is ", *g, " Gbit/s, below min_link_gbps ",
                            job.min_link_gbps);
          }
        }
      }
    } else {
      reason = StrCat("eligible (", e.free, " free) but no feasible set of sites");
    }
    why_not[e.site] = reason;
  }
  for (const auto& [site, reason] : why_not) result.explanation.push_back({site, false, reason});
  std::sort(result.explanation.begin(), result.explanation.end(),
            [](const SiteExplanation& a, const SiteExplanation& b) { return a.site < b.site; });
  if (!result.placement) {
    uint64_t total = 0;
    for (const auto& e : eligible) total += e.free;
    result.summary += StrCat(": ", eligible.size(), " eligible site(s) with ", total,
                             " matching free GPU(s)");
    if (job.max_sites > 0) result.summary += StrCat(", max_sites ", job.max_sites);
    if (job.min_link_gbps > 0) result.summary += StrCat(", min_link_gbps ", job.min_link_gbps);
  }
  return result;
}

}  // namespace

PlacementResult PlaceByIndex(const JobRequest& job, const std::vector<SiteOffer>& offers,
                             const OfferPairGbps& links, uint64_t exact_budget) {
  // preferred_sites: the shortest prefix of the list that holds a feasible
  // set wins, whatever the objective says of the rest.
  std::vector<std::string> prefix;
  for (const auto& p : job.preferred_sites) {
    if (Contains(prefix, p)) continue;
    prefix.push_back(p);
    JobRequest within = job;
    within.preferred_sites.clear();
    within.allowed_sites.clear();
    for (const auto& s : prefix) {
      if (job.allowed_sites.empty() || Contains(job.allowed_sites, s)) within.allowed_sites.push_back(s);
    }
    if (within.allowed_sites.empty()) continue;
    PlacementResult r = PlaceAny(within, offers, links, exact_budget);
    if (!r.placement) continue;
    std::string list;
    for (const auto& s : prefix) list += StrCat(list.empty() ? "" : ", ", s);
    for (auto& e : r.explanation) {
      const bool outside = !Contains(prefix, e.site) &&
                           (job.allowed_sites.empty() || Contains(job.allowed_sites, e.site));
      if (!e.used && outside && e.reason == "not in allowed_sites") {
        e.reason = StrCat("not needed: preferred_sites [", list, "] fit the job");
      }
    }
    r.summary += StrCat(" (preferred_sites won: [", list, "] fit the job)");
    return r;
  }
  PlacementResult r = PlaceAny(job, offers, links, exact_budget);
  if (!job.preferred_sites.empty() && r.placement) {
    r.summary += " (preferred_sites cannot hold it: the objective ranked every site)";
  }
  return r;
}

}  // namespace fedgate::federation
