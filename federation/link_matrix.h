// The bandwidth matrix: measured links between sites. Pure logic; the caller
// injects the time and passes the links it knows (own probes and ads').
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fedgate/v1/bench.pb.h"

namespace fedgate::federation {

class LinkMatrix {
 public:
  // Links older than `max_age_ms` count as unknown.
  explicit LinkMatrix(int64_t max_age_ms) : max_age_ms_(max_age_ms) {}

  // Keeps the newest measurement per (from, to).
  void Merge(const v1::Link& link);
  void MergeAll(const google::protobuf::RepeatedPtrField<v1::Link>& links);

  // The link from -> to if known and not too old at `now_ms`.
  std::optional<v1::Link> Get(const std::string& from, const std::string& to,
                              int64_t now_ms) const;
  // What placement uses for a pair: the slower direction when both are known,
  // the known one otherwise, nullopt when neither is.
  std::optional<double> PairGbps(const std::string& a, const std::string& b,
                                 int64_t now_ms) const;
  // The same by site id. Placement weighs tens of thousands of pairs at a
  // thousand sites: it resolves each site's id once, and a pair is then two
  // integer-keyed lookups instead of four string hashes.
  std::optional<uint32_t> SiteId(const std::string& site) const;
  std::optional<double> PairGbps(uint32_t a, uint32_t b, int64_t now_ms) const;
  // Every unexpired link, sorted by (from, to).
  std::vector<v1::Link> All(int64_t now_ms) const;

 private:
  uint32_t Intern(const std::string& site);

  int64_t max_age_ms_;
  std::map<std::pair<std::string, std::string>, v1::Link> links_;
  struct Measured {
    double gbps = 0;
    int64_t measured_at_ms = 0;
    bool known = false;
  };
  // Both directions of a pair in one open-addressed cell: a pair is one probe.
  struct PairCell {
    Measured low_to_high, high_to_low;  // by site id
  };
  std::unordered_map<std::string, uint32_t> ids_;
  // (low id << 32 | high id) -> the newest measurement each way: what PairGbps reads.
  absl::flat_hash_map<uint64_t, PairCell> index_;
};

}  // namespace fedgate::federation
