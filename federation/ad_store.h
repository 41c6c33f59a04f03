// Newest capacity advertisement per origin. Pure logic: the caller injects the
// clock and serialises access (the gateway holds one lock around it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "federation/clock.h"
#include "fedgate/v1/federation.pb.h"

namespace fedgate::federation {

// Why an offered ad was kept or dropped; the reasons are counted in metrics.
enum class AdVerdict {
  kAccepted,   // newer than anything seen from its origin
  kStale,      // seq <= the newest seq already seen from that origin
  kExpired,    // issued_at + ttl already past on arrival
  kOwnOrigin,  // our own ad relayed back to us
  kInvalid,    // empty origin, zero seq, non-positive ttl
};

std::string_view AdVerdictName(AdVerdict v);

struct StoredAd {
  v1::CapacityAd ad;
  int64_t received_at_ms = 0;  // local time the newest seq arrived
  std::string via;             // peer site it came from ("" for our own)
};

class AdStore {
 public:
  AdStore(std::string self_site, const Clock* clock);

  // Offers an ad received from peer `via`.
  AdVerdict Offer(const v1::CapacityAd& ad, std::string_view via);
  // Stores this site's own ad (always newer: the caller owns seq).
  void Publish(const v1::CapacityAd& ad);

  // Drops every ad past issued_at + ttl; returns how many were dropped.
  int ExpireNow();

  // Unexpired ads (own, peers', withdrawn tombstones), sorted by origin.
  std::vector<StoredAd> Fresh() const;
  std::optional<StoredAd> Get(std::string_view origin) const;

  // Ads that a peer `to` has not been sent yet, given the seq per origin that
  // was last sent to it. Never sends an ad back to its origin or to the peer it
  // came from.
  std::vector<v1::CapacityAd> Pending(std::string_view to,
                                      const std::map<std::string, uint64_t>& sent) const;

  // Age in seconds of the oldest unexpired ad from another origin; 0 if none.
  double OldestAgeSeconds() const;

  // Bumped on every accepted or published ad; links wake up when it moves.
  uint64_t version() const { return version_; }

 private:
  bool Expired(const v1::CapacityAd& ad, int64_t now_ms) const;

  std::string self_;
  const Clock* clock_;
  std::map<std::string, StoredAd, std::less<>> ads_;
  // Highest seq ever seen per origin, kept past expiry so a late duplicate of
  // an expired ad cannot come back.
  std::map<std::string, uint64_t, std::less<>> high_water_;
  uint64_t version_ = 0;
};

}  // namespace fedgate::federation
