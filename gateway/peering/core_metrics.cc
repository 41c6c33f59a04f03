// GatewayCore's metric families, declared once, and the gauges a scrape
// (or a tick) sets from the federation view.
#include <algorithm>

#include "federation/capacity_view.h"
#include "gateway/ops/metrics.h"
#include "gateway/peering/core.h"

namespace fedgate::gateway {

void GatewayCore::DescribeMetrics() {
  metrics_->Describe("fedgate_ads_received_total", "counter",
                     "Capacity ads received from peers, by result (accepted or why rejected).");
  metrics_->Describe("fedgate_ads_refused_total", "counter",
                     "Ads refused as hostile or broken, by reason: unsigned, bad_ad, "
                     "bad_certificate, untrusted_certificate, not_a_gateway, origin_mismatch, "
                     "bad_signature, revoked, invalid, future, foreign_link, seq_out_of_range.");
  metrics_->Describe("fedgate_ads_expired_total", "counter", "Ads dropped past their TTL.");
  metrics_->Describe("fedgate_ads_sent_bytes_total", "counter",
                     "Bytes of Advertise requests this gateway pushed to its peers.");
  metrics_->Describe("fedgate_ads_issued_total", "counter", "Ads this site issued.");
  metrics_->Describe("fedgate_peers_up", "gauge", "Approved peers heard within the window.");
  metrics_->Describe("fedgate_peers_approved", "gauge", "Approved peers.");
  metrics_->Describe("fedgate_ad_oldest_age_seconds", "gauge",
                     "Age of the oldest unexpired ad from another site.");
  metrics_->Describe("fedgate_ad_age_seconds", "gauge",
                     "Time since the newest ad of each other site arrived (gone once it expires).");
  metrics_->Describe("fedgate_sites_known", "gauge", "Sites with an unexpired ad, this one too.");
  metrics_->Describe("fedgate_peer_rpc_handled_total", "counter",
                     "Peer RPCs that passed authorization and reached their handler.");
  metrics_->Describe("fedgate_admin_rpc_handled_total", "counter",
                     "Admin RPCs that passed authorization and reached their handler.");
  metrics_->Describe("fedgate_job_rpc_handled_total", "counter",
                     "Job RPCs that passed authorization and reached their handler.");
  metrics_->Describe("fedgate_authz_refusals_total", "counter",
                     "Calls refused by per-call authorization.");
  metrics_->Describe("fedgate_peer_push_errors_total", "counter",
                     "Failed handshakes or pushes to a peer.");
  metrics_->Describe("fedgate_link_gbps", "gauge", "Measured payload Gbit/s per link.");
  metrics_->Describe("fedgate_link_age_seconds", "gauge", "Age of each link's measurement.");
  metrics_->Describe("fedgate_probes_total", "counter", "Link probes run, by result.");
  metrics_->Describe("fedgate_rpc_duration_seconds", "histogram",
                     "Handler time of gRPC calls that passed authorization, by method and code.",
                     {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5});
  metrics_->Describe("fedgate_site_gpus", "gauge",
                     "GPUs of every site in this gateway's view, by model; state free or total.");
  metrics_->Describe("fedgate_tenant_quota_gpus", "gauge",
                     "Quotas of the tenants this site governs: kind nominal, borrow, used "
                     "(guaranteed holds) or borrowed (holds beyond nominal).");
}

void GatewayCore::UpdateGaugesLocked(const std::map<std::string, uint32_t>& local_free) {
  metrics_->Set("fedgate_peers_up", {}, peers_.CountUp());
  metrics_->Set("fedgate_peers_approved", {}, static_cast<double>(peers_.List().size()));
  metrics_->Set("fedgate_ad_oldest_age_seconds", {}, ads_.OldestAgeSeconds());
  int known = 0;
  for (const federation::StoredAd* a : ads_.FreshRefs()) known += a->ad.withdrawn() ? 0 : 1;
  metrics_->Set("fedgate_sites_known", {}, known);
  // Whole families: a removed peer's or an expired link's series disappear.
  std::vector<std::pair<Labels, double>> up, gbps, age;
  for (const auto& p : peers_.List()) {
    up.push_back({{{"peer", p.site}}, peers_.StateOf(p.site) == federation::PeerState::kUp ? 1.0 : 0.0});
  }
  const int64_t now = clock_->NowMs();
  for (const auto& l : LinksLocked().All(now)) {
    const Labels labels = {{"from", l.from()}, {"to", l.to()}};
    gbps.push_back({labels, l.gbps()});
    age.push_back({labels, (now - l.measured_at_unix_ms()) / 1000.0});
  }
  metrics_->SetFamily("fedgate_peer_up", up);
  std::vector<std::pair<Labels, double>> gpus;
  const auto view = federation::BuildCapacityView(config_.site, inventory_->Nodes(),
                                                  ads_.FreshRefs(), clock_->NowMs(), local_free);
  for (const auto& s : view.sites()) {
    for (const auto& m : s.models()) {
      gpus.push_back({{{"site", s.site()}, {"model", m.model()}, {"state", "free"}},
                      static_cast<double>(m.free_gpus())});
      gpus.push_back({{{"site", s.site()}, {"model", m.model()}, {"state", "total"}},
                      static_cast<double>(m.total_gpus())});
    }
  }
  metrics_->SetFamily("fedgate_site_gpus", gpus);
  std::vector<std::pair<Labels, double>> quota;
  for (const federation::StoredAd* a : ads_.FreshRefs()) {
    if (a->ad.origin() != config_.site) continue;
    for (const auto& t : a->ad.tenants()) {
      quota.push_back({{{"tenant", t.tenant()}, {"kind", "nominal"}}, static_cast<double>(t.gpus())});
      quota.push_back({{{"tenant", t.tenant()}, {"kind", "borrow"}}, static_cast<double>(t.borrow())});
      quota.push_back({{{"tenant", t.tenant()}, {"kind", "used"}}, static_cast<double>(t.used_gpus())});
      quota.push_back({{{"tenant", t.tenant()}, {"kind", "borrowed"}},
                       static_cast<double>(t.borrowed_gpus())});
    }
  }
  metrics_->SetFamily("fedgate_tenant_quota_gpus", quota);
  std::vector<std::pair<Labels, double>> ad_age;
  for (const federation::StoredAd* a : ads_.FreshRefs()) {
    if (a->ad.origin() == config_.site) continue;
    ad_age.push_back({{{"origin", a->ad.origin()}},
                      std::max<int64_t>(0, now - a->received_at_ms) / 1000.0});
  }
  metrics_->SetFamily("fedgate_ad_age_seconds", ad_age);
  metrics_->SetFamily("fedgate_link_gbps", gbps);
  metrics_->SetFamily("fedgate_link_age_seconds", age);
}

}  // namespace fedgate::gateway
