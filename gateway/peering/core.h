// The gateway's domain manager: federation state (ads, peers, inventory)
// behind one lock, callable directly from the thin gRPC handlers and tests.
// Its rooms: core.cc (start, peers), core_ads.cc (ads in and out),
// core_view.cc (the federation view: capacity, plan, sites, endpoints,
// links), core_homes.cc (tenant homes, pure in federation/tenant_homes),
// core_metrics.cc (its metric families, declared once).
//
// Lock order: publish_mu_, admin_mu_ or homes_write_mu_, then mu_. The
// first three only keep this site's store writes (ad seq, peers, tenant
// homes) in order and are never taken by a plan, a scrape or an incoming
// ad; mu_ is never held across a store write, and never while the
// participant is asked for its free GPUs (those are read before it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "federation/ad_store.h"
#include "federation/capacity_view.h"
#include "federation/clock.h"
#include "federation/inventory.h"
#include "federation/link_matrix.h"
#include "federation/peer_registry.h"
#include "federation/tenant_homes.h"
#include "fedgate/v1/admin.pb.h"
#include "fedgate/v1/federation.pb.h"
#include "fedgate/v1/jobs.pb.h"
#include "gateway/config/config.h"
#include "gateway/security/ad_signing.h"
#include "gateway/security/identity.h"
#include "gateway/security/revocation.h"

namespace fedgate::gateway {

class Metrics;
class Store;

inline constexpr const char* kVersion = "0.1.0";

class GatewayCore {
 public:
  GatewayCore(const Config& config, const federation::Clock* clock, Store* store,
              std::unique_ptr<federation::InventorySource> inventory, Metrics* metrics);

  // Loads approved peers (config, then store) and the last ad seq.
  absl::Status Init();

  // Peer RPCs; `caller` is already authorized as an approved peer gateway.
  absl::StatusOr<v1::HandshakeResponse> Handshake(const Identity& caller,
                                                  const v1::HandshakeRequest& req);
  absl::StatusOr<v1::AdvertiseResponse> Advertise(const Identity& caller,
                                                  const v1::AdvertiseRequest& req);

  // Admin RPCs.
  v1::ListPeersResponse ListPeers();
  absl::StatusOr<v1::Peer> AddPeer(const std::string& site, const std::string& endpoint);
  absl::Status RemovePeer(const std::string& site);
  v1::GetCapacityResponse Capacity();
  v1::ListLinksResponse ListLinks();
  // Every dataset in a fresh ad (this site's included), with its holders.
  v1::ListDatasetsResponse ListDatasets();
  // A dry run of placement for a spec against the current view; `whom`
  // adds GPUs kept for a job and, for a job that may preempt, preemptible ones.
  absl::StatusOr<v1::PlanResponse> Plan(const v1::JobSpec& spec,
                                        const federation::OfferFor& whom = {});

  // The tenant's home site as the fresh ads say (nullopt: no site governs
  // it, so it has no quota limit). `error` is set when two sites claim it.
  using TenantHome = federation::TenantHome;
  std::optional<TenantHome> HomeOf(const std::string& tenant);
  // Every governed tenant's quota and use, as the home sites advertise them.
  std::vector<v1::TenantQuota> Quotas();

  // Records a link this site measured and re-advertises at once.
  void RecordLink(const v1::Link& link);

  // Re-issues this site's ad with a new seq and drops expired ads; run every
  // advertise interval and on every capacity change.
  absl::Status Tick();
  // Issues a final, withdrawn ad (graceful shutdown).
  void Withdraw();

  // For the peer links.
  bool IsApprovedPeer(std::string_view site);
  std::vector<federation::PeerInfo> Peers();
  // Sites that would take a reservation from this coordinator: itself, its
  // peers, and sites whose fresh ad accepts jobs from the whole federation.
  std::set<std::string> SitesForJobs();
  // Known sites not among those.
  std::vector<std::string> SitesLeftOut();
  // "; left out: A, B (…)" for a job that waits, "" when none is.
  static std::string LeftOutNote(const std::vector<std::string>& sites);
  // Plan on the sites of SitesForJobs only; `note` gets LeftOutNote when
  // the job cannot be placed.
  absl::StatusOr<v1::PlanResponse> PlanForJobs(const v1::JobSpec& spec, std::string* note);
  // Where to dial `site` for reservations ("" when it would refuse us).
  std::string ReservationEndpoint(const std::string& site);
  // Where `site`'s gateway is dialled: its peer endpoint, else the one its
  // signed ad names ("" when neither is known).
  std::string SiteEndpoint(const std::string& site);
  // Where tenants reach `site`'s REST API, as its signed ad says ("" when
  // unknown); this site's own once SetHttpEndpoint was called.
  std::string SiteHttpEndpoint(const std::string& site);
  // This site's REST endpoint, known once the REST server bound its port:
  // carried from the next ad on.
  void SetHttpEndpoint(std::string endpoint);
  // Approved peers that are down now (silent past a few advertise intervals).
  std::set<std::string> DownPeers();
  // Whether a call about a job that `coordinator` coordinates goes on
  // there (fedctl's follow, the REST redirect): another site, not down.
  bool FollowsTo(const std::string& coordinator);
  // Ads `peer` has not been sent (as their origins signed them, where they did).
  std::vector<federation::StoredAd> Pending(const std::string& peer,
                                            const std::map<std::string, federation::AdVersion>& sent);
  void RecordPush(const std::string& peer, double rtt_ms, size_t bytes = 0);
  // The seq of this site's newest own ad (no lock: read inside waits).
  uint64_t OwnSeq() const { return own_seq_.load(); }
  void RecordError(const std::string& peer, const std::string& error);
  // Blocks until the ad version moves past `seen`, `deadline_ms` (wall clock)
  // passes, or `wake()` returns true; returns the current version.
  uint64_t WaitForChange(uint64_t seen, int64_t deadline_ms, const std::function<bool()>& wake);
  // Blocks until `deadline_ms` passes or `wake()` returns true.
  void WaitUntil(int64_t deadline_ms, const std::function<bool()>& wake);
  void NotifyAll();
  // Free GPUs per local node (from the participant's ledger); unset = all.
  void SetFreeGpusFn(std::function<std::map<std::string, uint32_t>()> fn) {
    free_fn_ = std::move(fn);
  }
  // Preemptible and kept GPUs per local node, and the tenants this site
  // governs (from the participant), for the ad.
  void SetAdExtrasFn(std::function<federation::NodeExtras()> nodes,
                     std::function<std::vector<v1::TenantQuota>()> tenants) {
    extras_fn_ = std::move(nodes);
    tenants_fn_ = std::move(tenants);
  }
  // The address of `node` at `site` from the inventory or the site's ad.
  std::string NodeAddress(const std::string& site, const std::string& node);
  // Signs this site's ads and verifies those of others (set before Init;
  // without one, as in tests of the core alone, ads travel unsigned).
  void SetAdAuthority(AdAuthority* authority) { ad_authority_ = authority; }
  bool signs_ads() const { return ad_authority_ != nullptr; }
  // tls.crl, for dialling peers (their server certificates are checked too).
  void SetRevocation(std::shared_ptr<RevocationList> crl) { revocation_ = std::move(crl); }
  std::shared_ptr<RevocationList> revocation() const { return revocation_; }
  // Called (without the lock held) whenever the approved peer set changes.
  // The datasets this site's ad announces (set before Tick runs).
  void SetDatasetsFn(std::function<std::vector<v1::DatasetAd>()> fn) { datasets_fn_ = std::move(fn); }
  // The services this site coordinates, for its ad.
  void SetServicesFn(std::function<std::vector<v1::ServiceAd>()> fn) { services_fn_ = std::move(fn); }
  // The site whose fresh ad says it coordinates the tenant's service
  // `name` ("" = none known).
  std::string ServiceCoordinator(const std::string& tenant, const std::string& name);
  void SetPeersChangedHook(std::function<void()> hook) { peers_changed_ = std::move(hook); }

  const Config& config() const { return config_; }
  const federation::Clock* clock() const { return clock_; }

 private:
  // What this site offers besides the ledger's free GPUs, read from the
  // participant before mu_ is taken.
  struct LocalState {
    std::map<std::string, uint32_t> free;
    federation::NodeExtras extras;
  };
  LocalState ReadLocal() const;
  void DescribeMetrics();
  void UpdateGaugesLocked(const std::map<std::string, uint32_t>& local_free)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stamps this site's ad with its incarnation and endpoint, signs it, stores it.
  void PublishLocked(v1::CapacityAd ad) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every link known (own measurements and fresh peers' ads), rebuilt only
  // when those change: a placement pass plans once per pending job. Valid
  // while mu_ is held.
  const federation::LinkMatrix& LinksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next seq, stored before any ad carries it.
  absl::StatusOr<uint64_t> NextSeq() ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_);
  // Tenant homes follow the ads; a change is stored after mu_ is let go.
  struct HomesSnapshot {
    uint64_t gen = 0;
    std::string blob;
  };
  std::optional<HomesSnapshot> RefreshHomesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  HomesSnapshot HomesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistHomes(const std::optional<HomesSnapshot>& homes) ABSL_LOCKS_EXCLUDED(mu_);

  const Config config_;
  const federation::Clock* clock_;
  Store* store_;
  std::unique_ptr<federation::InventorySource> inventory_;
  Metrics* metrics_;

  std::mutex publish_mu_;
  uint64_t seq_ ABSL_GUARDED_BY(publish_mu_) = 0;
  std::mutex admin_mu_;  // one peer change at a time: stored, then applied
  std::mutex homes_write_mu_;
  uint64_t homes_written_gen_ ABSL_GUARDED_BY(homes_write_mu_) = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  federation::AdStore ads_ ABSL_GUARDED_BY(mu_);
  federation::PeerRegistry peers_ ABSL_GUARDED_BY(mu_);
  uint64_t incarnation_ = 0;  // this start's, from Init; read-only after it
  std::string http_endpoint_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> own_seq_{0};
  AdAuthority* ad_authority_ = nullptr;
  std::shared_ptr<RevocationList> revocation_;
  std::map<std::string, v1::Link> own_links_ ABSL_GUARDED_BY(mu_);  // by destination site
  uint64_t own_links_gen_ ABSL_GUARDED_BY(mu_) = 0;                 // bumped on every change
  struct LinksCache {
    uint64_t ads_version = 0, own_links_gen = 0;
    std::vector<const federation::StoredAd*> fresh;  // the ads it was built from
    std::optional<federation::LinkMatrix> links;
  } links_cache_ ABSL_GUARDED_BY(mu_);
  std::function<void()> peers_changed_;
  std::function<std::vector<v1::ServiceAd>()> services_fn_;
  std::function<std::map<std::string, uint32_t>()> free_fn_;
  std::function<federation::NodeExtras()> extras_fn_;
  std::function<std::vector<v1::TenantQuota>()> tenants_fn_;
  std::function<std::vector<v1::DatasetAd>()> datasets_fn_;
  // The last known home (and quota) of every governed tenant. Persisted.
  federation::KnownHomes known_homes_ ABSL_GUARDED_BY(mu_);
  uint64_t homes_gen_ ABSL_GUARDED_BY(mu_) = 0;  // bumped on every change
};

}  // namespace fedgate::gateway
