#include "federation/ad_store.h"

#include <algorithm>

#include "federation/saturating.h"

namespace fedgate::federation {

std::string_view AdVerdictName(AdVerdict v) {
  switch (v) {
    case AdVerdict::kAccepted:
      return "accepted";
    case AdVerdict::kStale:
      return "stale";
    case AdVerdict::kExpired:
      return "expired";
    case AdVerdict::kOwnOrigin:
      return "own_origin";
    case AdVerdict::kInvalid:
      return "invalid";
    case AdVerdict::kFuture:
      return "future";
    case AdVerdict::kForeignLink:
      return "foreign_link";
    case AdVerdict::kSeqOutOfRange:
      return "seq_out_of_range";
  }
  return "unknown";
}

bool IsRefusal(AdVerdict v) {
  return v == AdVerdict::kInvalid || v == AdVerdict::kFuture || v == AdVerdict::kForeignLink ||
         v == AdVerdict::kSeqOutOfRange;
}

AdStore::AdStore(std::string self_site, const Clock* clock, int64_t max_skew_ms)
    : self_(std::move(self_site)), clock_(clock), max_skew_ms_(max_skew_ms) {}

bool AdStore::Expired(const v1::CapacityAd& ad, int64_t now_ms) const {
  return now_ms > SatAdd(ad.issued_at_unix_ms(), ad.ttl_ms());
}

AdVerdict AdStore::Offer(const v1::CapacityAd& ad, std::string_view via,
                         const v1::SignedAd& signed_ad) {
  if (ad.origin().empty() || ad.seq() == 0 || ad.ttl_ms() <= 0) return AdVerdict::kInvalid;
  if (ad.seq() >= (uint64_t{1} << 63)) return AdVerdict::kSeqOutOfRange;
  for (const auto& l : ad.links()) {
    if (l.from() != ad.origin()) return AdVerdict::kForeignLink;
  }
  // Bounded: an ad is kept per origin and copied into every view.
  if (ad.tenants_size() > 4096 || ad.services_size() > 4096) return AdVerdict::kInvalid;
  for (const auto& n : ad.nodes()) {
    if (n.kept_for_size() > 256) return AdVerdict::kInvalid;
  }
  if (ad.origin() == self_) return AdVerdict::kOwnOrigin;
  // A clock ahead by more than the skew would make the ad (or its
  // incarnation) outrank every honest one for as long as it is ahead.
  const int64_t now = clock_->NowMs();
  const int64_t latest = SatAdd(now, max_skew_ms_);
  if (ad.issued_at_unix_ms() > latest || ad.incarnation() > static_cast<uint64_t>(latest)) {
    return AdVerdict::kFuture;
  }
  for (const auto& l : ad.links()) {
    if (l.measured_at_unix_ms() > latest) return AdVerdict::kFuture;
  }
  auto hw = high_water_.find(ad.origin());
  if (hw != high_water_.end() && VersionOf(ad) <= hw->second) return AdVerdict::kStale;
  if (Expired(ad, now)) return AdVerdict::kExpired;
  high_water_[ad.origin()] = VersionOf(ad);
  ads_[ad.origin()] = StoredAd{ad, now, std::string(via), signed_ad};
  ++version_;
  return AdVerdict::kAccepted;
}

bool AdStore::IsNewer(std::string_view origin, const AdVersion& version) const {
  auto hw = high_water_.find(origin);
  return hw == high_water_.end() || version > hw->second;
}

void AdStore::Publish(const v1::CapacityAd& ad, const v1::SignedAd& signed_ad) {
  high_water_[ad.origin()] = VersionOf(ad);
  ads_[ad.origin()] = StoredAd{ad, clock_->NowMs(), "", signed_ad};
  ++version_;
}

int AdStore::ExpireNow() {
  const int64_t now = clock_->NowMs();
  int dropped = 0;
  for (auto it = ads_.begin(); it != ads_.end();) {
    if (Expired(it->second.ad, now)) {
      it = ads_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

std::vector<StoredAd> AdStore::Fresh() const {
  const int64_t now = clock_->NowMs();
  std::vector<StoredAd> out;
  for (const auto& [origin, stored] : ads_) {
    if (!Expired(stored.ad, now)) out.push_back(stored);
  }
  return out;
}

std::vector<const StoredAd*> AdStore::FreshRefs() const {
  const int64_t now = clock_->NowMs();
  std::vector<const StoredAd*> out;
  out.reserve(ads_.size());
  for (const auto& [origin, stored] : ads_) {
    if (!Expired(stored.ad, now)) out.push_back(&stored);
  }
  return out;
}

std::optional<StoredAd> AdStore::Get(std::string_view origin) const {
  auto it = ads_.find(origin);
  if (it == ads_.end() || Expired(it->second.ad, clock_->NowMs())) return std::nullopt;
  return it->second;
}

std::vector<StoredAd> AdStore::Pending(std::string_view to,
                                       const std::map<std::string, AdVersion>& sent) const {
  const int64_t now = clock_->NowMs();
  std::vector<StoredAd> out;
  for (const auto& [origin, stored] : ads_) {
    if (origin == to || stored.via == to) continue;
    if (Expired(stored.ad, now)) continue;
    auto s = sent.find(origin);
    if (s != sent.end() && s->second >= VersionOf(stored.ad)) continue;
    out.push_back(stored);
  }
  return out;
}

double AdStore::OldestAgeSeconds() const {
  const int64_t now = clock_->NowMs();
  int64_t oldest = 0;
  for (const auto& [origin, stored] : ads_) {
    if (origin == self_ || Expired(stored.ad, now)) continue;
    oldest = std::max(oldest, now - stored.ad.issued_at_unix_ms());
  }
  return static_cast<double>(oldest) / 1000.0;
}

}  // namespace fedgate::federation
