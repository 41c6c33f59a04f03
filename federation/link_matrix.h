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
  // Every unexpired link, sorted by (from, to).
  std::vector<v1::Link> All(int64_t now_ms) const;

 private:
  int64_t max_age_ms_;
  std::map<std::pair<std::string, std::string>, v1::Link> links_;
  struct Measured {
    double gbps = 0;
    int64_t measured_at_ms = 0;
  };
  // from -> to -> the newest measurement: what PairGbps reads.
  std::unordered_map<std::string, std::unordered_map<std::string, Measured>> index_;
};

}  // namespace fedgate::federation
