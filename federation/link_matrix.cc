#include "federation/link_matrix.h"

#include <algorithm>

namespace fedgate::federation {

void LinkMatrix::Merge(const v1::Link& link) {
  auto key = std::make_pair(link.from(), link.to());
  auto it = links_.find(key);
  if (it == links_.end() || it->second.measured_at_unix_ms() < link.measured_at_unix_ms()) {
    links_[key] = link;
    index_[link.from()][link.to()] = {link.gbps(), link.measured_at_unix_ms()};
  }
}

void LinkMatrix::MergeAll(const google::protobuf::RepeatedPtrField<v1::Link>& links) {
  for (const auto& l : links) Merge(l);
}

std::optional<v1::Link> LinkMatrix::Get(const std::string& from, const std::string& to,
                                        int64_t now_ms) const {
  auto it = links_.find(std::make_pair(from, to));
  if (it == links_.end()) return std::nullopt;
  if (now_ms - it->second.measured_at_unix_ms() > max_age_ms_) return std::nullopt;
  return it->second;
}

std::optional<double> LinkMatrix::PairGbps(const std::string& a, const std::string& b,
                                           int64_t now_ms) const {
  // Placement asks this for every pair it weighs (tens of thousands at a
  // thousand sites): hash lookups, no copies.
  auto find = [&](const std::string& from, const std::string& to) -> std::optional<double> {
    auto row = index_.find(from);
    if (row == index_.end()) return std::nullopt;
    auto cell = row->second.find(to);
    if (cell == row->second.end() || now_ms - cell->second.measured_at_ms > max_age_ms_) {
      return std::nullopt;
    }
    return cell->second.gbps;
  };
  auto ab = find(a, b);
  auto ba = find(b, a);
  if (ab && ba) return std::min(*ab, *ba);
  if (ab) return ab;
  return ba;
}

std::vector<v1::Link> LinkMatrix::All(int64_t now_ms) const {
  std::vector<v1::Link> out;
  for (const auto& [key, link] : links_) {
    if (now_ms - link.measured_at_unix_ms() <= max_age_ms_) out.push_back(link);
  }
  return out;
}

}  // namespace fedgate::federation
