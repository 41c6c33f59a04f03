// Newest capacity advertisement per origin. Pure logic: the caller injects the
// clock and serialises access (the gateway holds one lock around it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "federation/clock.h"
#include "fedgate/v1/federation.pb.h"

namespace fedgate::federation {

// Why an offered ad was kept or dropped; the reasons are counted in metrics.
enum class AdVerdict {
  kAccepted,       // newer than anything seen from its origin
  kStale,          // (incarnation, seq) <= the newest already seen from that origin
  kExpired,        // issued_at + ttl already past on arrival
  kOwnOrigin,      // our own ad relayed back to us
  kInvalid,        // empty origin, zero seq, non-positive ttl, too large
  kFuture,         // issued_at or incarnation beyond now + the allowed clock skew
  kForeignLink,    // carries a link that does not start at its origin
  kSeqOutOfRange,  // seq >= 2^63: no origin counts that far, it would silence it
};

std::string_view AdVerdictName(AdVerdict v);
// Whether a verdict refuses a hostile or broken ad (not plain gossip overlap).
bool IsRefusal(AdVerdict v);

// The order of an origin's ads.
using AdVersion = std::pair<uint64_t, uint64_t>;  // incarnation, seq
inline AdVersion VersionOf(const v1::CapacityAd& ad) { return {ad.incarnation(), ad.seq()}; }

struct StoredAd {
  v1::CapacityAd ad;
  int64_t received_at_ms = 0;  // local time the newest seq arrived
  std::string via;             // peer site it came from ("" for our own)
  v1::SignedAd signed_ad;      // as the origin signed it; empty if it did not
};

class AdStore {
 public:
  AdStore(std::string self_site, const Clock* clock, int64_t max_skew_ms = 30000);

  // Offers an ad received from peer `via` (with its origin's signature, kept
  // to relay unchanged).
  AdVerdict Offer(const v1::CapacityAd& ad, std::string_view via,
                  const v1::SignedAd& signed_ad = {});
  // Whether an ad of `origin` at `version` could still be news (newer than
  // anything seen from it): cheaper than verifying a signature first.
  bool IsNewer(std::string_view origin, const AdVersion& version) const;
  // Stores this site's own ad (always newer: the caller owns seq).
  void Publish(const v1::CapacityAd& ad, const v1::SignedAd& signed_ad = {});

  // Drops every ad past issued_at + ttl; returns how many were dropped.
  int ExpireNow();

  // Unexpired ads (own, peers', withdrawn tombstones), sorted by origin.
  std::vector<StoredAd> Fresh() const;
  // The same without copies, valid until the store next changes: the
  // gateway reads the view on every accepted ad, and at 64 sites copying
  // each ad (its signature and certificate with it) cost more than the read.
  std::vector<const StoredAd*> FreshRefs() const;
  std::optional<StoredAd> Get(std::string_view origin) const;

  // Ads that a peer `to` has not been sent yet, given the version per origin
  // that was last sent to it. Never sends an ad back to its origin or to the
  // peer it came from.
  std::vector<StoredAd> Pending(std::string_view to,
                                const std::map<std::string, AdVersion>& sent) const;

  // Age in seconds of the oldest unexpired ad from another origin; 0 if none.
  double OldestAgeSeconds() const;

  // Bumped on every accepted or published ad; links wake up when it moves.
  uint64_t version() const { return version_; }

 private:
  bool Expired(const v1::CapacityAd& ad, int64_t now_ms) const;

  std::string self_;
  const Clock* clock_;
  int64_t max_skew_ms_;
  std::map<std::string, StoredAd, std::less<>> ads_;
  // Highest version ever seen per origin, kept past expiry so a late
  // duplicate of an expired ad cannot come back.
  std::map<std::string, AdVersion, std::less<>> high_water_;
  uint64_t version_ = 0;
};

}  // namespace fedgate::federation
