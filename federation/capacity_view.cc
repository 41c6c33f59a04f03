#include "federation/capacity_view.h"

#include <algorithm>
#include <map>

namespace fedgate::federation {
namespace {


void AddNode(v1::SiteCapacity* site, std::map<std::string, v1::ModelCapacity>* models,
             const std::string& model, uint32_t free_gpus, uint32_t total_gpus,
             uint32_t preemptible = 0) {
  site->set_free_gpus(site->free_gpus() + free_gpus);
  site->set_total_gpus(site->total_gpus() + total_gpus);
  auto& m = (*models)[model];
  m.set_model(model);
  m.set_free_gpus(m.free_gpus() + free_gpus);
  m.set_total_gpus(m.total_gpus() + total_gpus);
  m.set_preemptible_gpus(m.preemptible_gpus() + preemptible);
}

uint32_t Reclaimable(uint32_t preemptible, const std::map<std::string, uint32_t>& kept_for) {
  uint64_t n = preemptible;
  for (const auto& [job, g] : kept_for) n += g;
  return static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX));
}

void AddHealth(v1::SiteCapacity* site, uint32_t unhealthy, bool cordoned) {
  site->set_unhealthy_gpus(site->unhealthy_gpus() + unhealthy);
  site->set_cordoned_nodes(site->cordoned_nodes() + (cordoned ? 1 : 0));
}

void FlushModels(v1::SiteCapacity* site, const std::map<std::string, v1::ModelCapacity>& models) {
  for (const auto& [name, m] : models) *site->add_models() = m;
}

}  // namespace

// An origin is silent (down) after a few intervals without a newer seq.
bool IsSilent(const StoredAd& stored, int64_t now_ms) {
  const int64_t interval = std::max<int64_t>(stored.ad.interval_ms(), 1);
  return now_ms - stored.received_at_ms > kMissedIntervalsForDown * interval;
}

static bool Silent(const StoredAd& stored, int64_t now_ms) { return IsSilent(stored, now_ms); }

// What a node offers to `whom`: free GPUs, plus GPUs kept for it, plus with
// preemption the preemptible ones (never more than the node has).
static uint32_t Offered(uint32_t free, uint32_t preemptible,
                        const std::map<std::string, uint32_t>& kept_for, uint32_t total,
                        const OfferFor& whom) {
  uint64_t n = free;
  if (!whom.job_id.empty()) {
    if (auto it = kept_for.find(whom.job_id); it != kept_for.end()) n += it->second;
  }
  if (whom.preempt) n += preemptible;
  return static_cast<uint32_t>(std::min<uint64_t>(n, total));
}

static uint32_t FreeOf(const Node& n, const FreeGpus& free) {
  auto it = free.find(n.name);
  return it == free.end() ? n.gpus : std::min(it->second, n.gpus);
}

v1::CapacityAd MakeOwnAd(const std::string& site, const std::vector<Node>& nodes, uint64_t seq,
                         int64_t now_ms, int64_t ttl_ms, int64_t interval_ms,
                         const FreeGpus& free, const NodeExtras& extras) {
  v1::CapacityAd ad;
  ad.set_origin(site);
  ad.set_seq(seq);
  ad.set_issued_at_unix_ms(now_ms);
  ad.set_ttl_ms(ttl_ms);
  ad.set_interval_ms(interval_ms);
  for (const auto& n : nodes) {
    auto* nc = ad.add_nodes();
    nc->set_name(n.name);
    nc->set_gpu_model(n.gpu_model);
    nc->set_gpu_memory_gib(n.gpu_memory_gib);
    nc->set_free_gpus(FreeOf(n, free));
    nc->set_total_gpus(n.gpus);
    nc->set_address(n.address);
    nc->set_rdma(n.rdma);
    nc->set_nic_gbps(n.nic_gbps);
    if (auto e = extras.find(n.name); e != extras.end()) {
      nc->set_preemptible_gpus(e->second.preemptible);
      for (const auto& [job, g] : e->second.kept_for) (*nc->mutable_kept_for())[job] = g;
      nc->set_unhealthy_gpus(e->second.unhealthy);
      nc->set_cordoned(e->second.cordoned);
    }
  }
  return ad;
}

v1::GetCapacityResponse BuildCapacityView(const std::string& self_site,
                                          const std::vector<Node>& local_nodes,
                                          const std::vector<StoredAd>& ads, int64_t now_ms,
                                          const FreeGpus& local_free,
                                          const NodeExtras& local_extras) {
  std::vector<const StoredAd*> refs;
  refs.reserve(ads.size());
  for (const auto& a : ads) refs.push_back(&a);
  return BuildCapacityView(self_site, local_nodes, refs, now_ms, local_free, local_extras);
}

v1::GetCapacityResponse BuildCapacityView(const std::string& self_site,
                                          const std::vector<Node>& local_nodes,
                                          const std::vector<const StoredAd*>& ads, int64_t now_ms,
                                          const FreeGpus& local_free,
                                          const NodeExtras& local_extras) {
  std::vector<v1::SiteCapacity> sites;
  {
    v1::SiteCapacity local;
    local.set_site(self_site);
    local.set_state(v1::SiteCapacity::local);
    std::map<std::string, v1::ModelCapacity> models;
    for (const auto& n : local_nodes) {
      auto e = local_extras.find(n.name);
      AddNode(&local, &models, n.gpu_model, FreeOf(n, local_free), n.gpus,
              e == local_extras.end() ? 0 : Reclaimable(e->second.preemptible, e->second.kept_for));
      if (e != local_extras.end()) AddHealth(&local, e->second.unhealthy, e->second.cordoned);
    }
    FlushModels(&local, models);
    sites.push_back(std::move(local));
  }
  for (const StoredAd* stored : ads) {
    const auto& ad = stored->ad;
    if (ad.origin() == self_site || ad.withdrawn()) continue;
    const bool down = Silent(*stored, now_ms);
    v1::SiteCapacity s;
    s.set_site(ad.origin());
    s.set_state(down ? v1::SiteCapacity::down : v1::SiteCapacity::up);
    s.set_seq(ad.seq());
    s.set_age_seconds(std::max<double>(0, (now_ms - ad.issued_at_unix_ms()) / 1000.0));
    std::map<std::string, v1::ModelCapacity> models;
    for (const auto& n : ad.nodes()) {
      AddNode(&s, &models, n.gpu_model(), down ? 0 : n.free_gpus(), n.total_gpus(),
              down ? 0 : Reclaimable(n.preemptible_gpus(), {n.kept_for().begin(), n.kept_for().end()}));
      AddHealth(&s, n.unhealthy_gpus(), n.cordoned());
    }
    FlushModels(&s, models);
    sites.push_back(std::move(s));
  }
  std::sort(sites.begin(), sites.end(),
            [](const auto& a, const auto& b) { return a.site() < b.site(); });
  v1::GetCapacityResponse out;
  for (auto& s : sites) *out.add_sites() = std::move(s);
  return out;
}

std::vector<SiteOffer> BuildOffers(const std::string& self_site,
                                   const std::vector<Node>& local_nodes,
                                   const std::vector<const StoredAd*>& ads, int64_t now_ms,
                                   const FreeGpus& local_free, const NodeExtras& local_extras,
                                   const OfferFor& whom) {
  std::vector<SiteOffer> out;
  SiteOffer local{self_site, true, {}, {}};
  for (const auto& n : local_nodes) {
    auto e = local_extras.find(n.name);
    const NodeExtra extra = e == local_extras.end() ? NodeExtra{} : e->second;
    local.nodes.push_back({n.name, n.gpu_model, n.gpu_memory_gib,
                           Offered(FreeOf(n, local_free), extra.preemptible, extra.kept_for,
                                   n.gpus, whom)});
  }
  out.push_back(std::move(local));
  for (const StoredAd* stored : ads) {
    const auto& ad = stored->ad;
    if (ad.origin() == self_site || ad.withdrawn()) continue;
    SiteOffer o{ad.origin(), !Silent(*stored, now_ms), {}, {}};
    for (const auto& n : ad.nodes()) {
      o.nodes.push_back({n.name(), n.gpu_model(), n.gpu_memory_gib(),
                         Offered(n.free_gpus(), n.preemptible_gpus(),
                                 {n.kept_for().begin(), n.kept_for().end()}, n.total_gpus(),
                                 whom)});
    }
    out.push_back(std::move(o));
  }
  // Datasets from every ad, this site's own included (its ad carries them).
  std::map<std::string, SiteOffer*> by_site;
  for (auto& o : out) by_site[o.site] = &o;
  for (const StoredAd* stored : ads) {
    if (stored->ad.withdrawn()) continue;
    auto it = by_site.find(stored->ad.origin());
    if (it == by_site.end()) continue;
    for (const auto& d : stored->ad.datasets()) it->second->datasets[d.name()] = d.bytes();
  }
  std::sort(out.begin(), out.end(),
            [](const SiteOffer& a, const SiteOffer& b) { return a.site < b.site; });
  return out;
}

}  // namespace fedgate::federation
