// The federation view: capacity, placement dry runs, which sites take
// this coordinator's jobs and where to dial them, and the link matrix.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "base/str_cat.h"
#include "federation/capacity_view.h"
#include "federation/job_spec.h"
#include "federation/placement.h"
#include "gateway/peering/core.h"

namespace fedgate::gateway {

v1::GetCapacityResponse GatewayCore::Capacity() {
  const LocalState local = ReadLocal();
  std::lock_guard lock(mu_);
  return federation::BuildCapacityView(config_.site, inventory_->Nodes(), ads_.FreshRefs(),
                                       clock_->NowMs(), local.free, local.extras);
}

v1::ListDatasetsResponse GatewayCore::ListDatasets() {
  // One row per (name, version, digest): two holders with different digests
  // hold different files under one name.
  std::map<std::tuple<std::string, std::string, std::string>, v1::DatasetHolding> rows;
  {
    std::lock_guard lock(mu_);
    for (const federation::StoredAd* stored : ads_.FreshRefs()) {
      const auto& ad = stored->ad;
      if (ad.withdrawn()) continue;
      for (const auto& d : ad.datasets()) {
        auto& row = rows[{d.name(), d.version(), d.digest()}];
        row.set_name(d.name());
        row.set_version(d.version());
        row.set_bytes(d.bytes());
        row.set_files(d.files());
        row.set_digest(d.digest());
        row.add_sites(ad.origin());
      }
    }
  }
  v1::ListDatasetsResponse out;
  for (auto& [key, row] : rows) {
    std::sort(row.mutable_sites()->begin(), row.mutable_sites()->end());
    *out.add_datasets() = std::move(row);
  }
  return out;
}

std::vector<std::string> GatewayCore::SitesLeftOut() {
  // The sites of the capacity view (fresh, not withdrawn ads) that are not
  // SitesForJobs, read straight from the ads: Submit and Get ask this for
  // every pending job, and building the whole view for a list of names
  // cost a view build per call.
  const auto reachable = SitesForJobs();
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const federation::StoredAd* stored : ads_.FreshRefs()) {
    const auto& ad = stored->ad;
    if (ad.origin() == config_.site || ad.withdrawn() || reachable.contains(ad.origin())) continue;
    out.push_back(ad.origin());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string GatewayCore::LeftOutNote(const std::vector<std::string>& sites) {
  if (sites.empty()) return "";
  std::string list;
  for (const auto& s : sites) list += StrCat(list.empty() ? "" : ", ", s);
  return StrCat("; left out: ", list,
                         " (not peers of this site and accepting jobs only from their peers)");
}

absl::StatusOr<v1::PlanResponse> GatewayCore::PlanForJobs(const v1::JobSpec& spec,
                                                          std::string* note) {
  const auto left_out = SitesLeftOut();
  v1::JobSpec avoiding = spec;
  for (const auto& s : left_out) avoiding.add_avoided_sites(s);
  auto plan = Plan(avoiding);
  if (note != nullptr && plan.ok() && !plan->placeable()) *note = LeftOutNote(left_out);
  return plan;
}

std::set<std::string> GatewayCore::SitesForJobs() {
  std::lock_guard lock(mu_);
  std::set<std::string> out = {config_.site};
  for (const auto& p : peers_.List()) out.insert(p.site);
  for (const federation::StoredAd* stored : ads_.FreshRefs()) {
    const auto& ad = stored->ad;
    if (ad.accepts_federation_jobs() && !ad.endpoint().empty() && !ad.withdrawn()) {
      out.insert(ad.origin());
    }
  }
  return out;
}

std::string GatewayCore::ReservationEndpoint(const std::string& site) {
  std::lock_guard lock(mu_);
  for (const auto& p : peers_.List()) {
    if (p.site == site) return p.endpoint;
  }
  // Not a peer: where its signed ad says it is dialled, if it takes jobs
  // from the whole federation.
  if (auto stored = ads_.Get(site); stored && stored->ad.accepts_federation_jobs()) {
    return stored->ad.endpoint();
  }
  return "";
}

std::string GatewayCore::SiteHttpEndpoint(const std::string& site) {
  std::lock_guard lock(mu_);
  if (site == config_.site) return http_endpoint_;
  if (auto stored = ads_.Get(site)) return stored->ad.http_endpoint();
  return "";
}

std::string GatewayCore::ServiceCoordinator(const std::string& tenant, const std::string& name) {
  std::lock_guard lock(mu_);
  for (const auto* stored : ads_.FreshRefs()) {
    for (const auto& s : stored->ad.services()) {
      if (s.tenant() == tenant && s.name() == name) return stored->ad.origin();
    }
  }
  return "";
}

void GatewayCore::SetHttpEndpoint(std::string endpoint) {
  std::lock_guard lock(mu_);
  http_endpoint_ = std::move(endpoint);  // in the next ad
}

std::string GatewayCore::SiteEndpoint(const std::string& site) {
  std::lock_guard lock(mu_);
  for (const auto& p : peers_.List()) {
    if (p.site == site) return p.endpoint;
  }
  if (auto stored = ads_.Get(site)) return stored->ad.endpoint();
  return "";
}

void GatewayCore::RecordLink(const v1::Link& link) {
  {
    std::lock_guard lock(mu_);
    own_links_[link.to()] = link;
    ++own_links_gen_;
  }
  // A new measurement travels in the next ad: issue it now.
  (void)Tick();
}

const federation::LinkMatrix& GatewayCore::LinksLocked() {
  // The ads it reads are the same when the store's version is (every
  // accepted ad bumps it) and the same ads are still fresh (expiry drops
  // some without a bump); a link's age is judged when it is read.
  auto fresh = ads_.FreshRefs();
  auto& c = links_cache_;
  if (c.links && c.ads_version == ads_.version() && c.own_links_gen == own_links_gen_ &&
      c.fresh == fresh) {
    return *c.links;
  }
  federation::LinkMatrix m(config_.bench.link_max_age_ms);
  for (const auto& [to, link] : own_links_) m.Merge(link);
  for (const federation::StoredAd* stored : fresh) {
    if (stored->ad.origin() == config_.site || stored->ad.withdrawn()) continue;
    m.MergeAll(stored->ad.links());
  }
  c = {ads_.version(), own_links_gen_, std::move(fresh), std::move(m)};
  return *c.links;
}

v1::ListLinksResponse GatewayCore::ListLinks() {
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMs();
  v1::ListLinksResponse resp;
  for (const auto& l : LinksLocked().All(now)) {
    auto* v = resp.add_links();
    v->set_from(l.from());
    v->set_to(l.to());
    v->set_gbps(l.gbps());
    v->set_latency_ms(l.latency_ms());
    v->set_method(l.method());
    v->set_streams(l.streams());
    v->set_age_seconds(std::max<double>(0, (now - l.measured_at_unix_ms()) / 1000.0));
  }
  return resp;
}

absl::StatusOr<v1::PlanResponse> GatewayCore::Plan(const v1::JobSpec& raw,
                                                   const federation::OfferFor& whom) {
  const LocalState local = ReadLocal();
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMs();
  const auto offers = federation::BuildOffers(config_.site, inventory_->Nodes(),
                                              ads_.FreshRefs(), now, local.free, local.extras,
                                              whom);
  std::set<std::string> models;
  for (const auto& o : offers) {
    for (const auto& n : o.nodes) models.insert(n.gpu_model);
  }
  if (auto st = federation::ValidateJobSpec(raw, models); !st.ok()) return st;
  const v1::JobSpec spec = federation::WithDefaults(raw);
  const federation::LinkMatrix& links = LinksLocked();
  std::vector<std::optional<uint32_t>> ids;
  ids.reserve(offers.size());
  for (const auto& o : offers) ids.push_back(links.SiteId(o.site));
  auto result = federation::PlaceByIndex(
      federation::ToJobRequest(spec), offers,
      [&](size_t a, size_t b) -> std::optional<double> {
        if (!ids[a] || !ids[b]) return std::nullopt;
        return links.PairGbps(*ids[a], *ids[b], now);
      });
  v1::PlanResponse resp;
  resp.set_summary(result.summary);
  if (result.placement) {
    const auto& p = *result.placement;
    resp.set_placeable(true);
    for (const auto& s : p.sites) resp.add_sites(s);
    for (const auto& s : p.slices) {
      auto* out = resp.add_slices();
      out->set_site(s.site);
      out->set_node(s.node);
      out->set_gpus(s.gpus);
      out->set_first_rank(s.first_rank);
      for (const auto& o : offers) {
        if (o.site != s.site) continue;
        for (const auto& n : o.nodes) {
          if (n.name == s.node) out->set_gpu_model(n.gpu_model);
        }
      }
    }
    resp.set_bottleneck_gbps(std::isfinite(p.bottleneck_gbps) ? p.bottleneck_gbps : 0);
    resp.set_leftover_gpus(p.leftover_gpus);
  }
  for (const auto& e : result.explanation) {
    auto* d = resp.add_explanation();
    d->set_site(e.site);
    d->set_used(e.used);
    d->set_reason(e.reason);
  }
  return resp;
}

std::string GatewayCore::NodeAddress(const std::string& site, const std::string& node) {
  std::lock_guard lock(mu_);
  if (site == config_.site) {
    for (const auto& n : inventory_->Nodes()) {
      if (n.name == node) return n.address;
    }
    return "";
  }
  auto ad = ads_.Get(site);
  if (!ad) return "";
  for (const auto& n : ad->ad.nodes()) {
    if (n.name() == node) return n.address();
  }
  return "";
}

}  // namespace fedgate::gateway
