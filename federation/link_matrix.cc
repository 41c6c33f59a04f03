#include "federation/link_matrix.h"

#include <algorithm>

namespace fedgate::federation {

void LinkMatrix::Merge(const v1::Link& link) {
  auto key = std::make_pair(link.from(), link.to());
  auto it = links_.find(key);
  if (it == links_.end() || it->second.measured_at_unix_ms() < link.measured_at_unix_ms()) {
    links_[key] = link;
    const uint32_t from = Intern(link.from()), to = Intern(link.to());
    auto& cell = index_[(static_cast<uint64_t>(std::min(from, to)) << 32) | std::max(from, to)];
    (from < to ? cell.low_to_high : cell.high_to_low) = {link.gbps(), link.measured_at_unix_ms(),
                                                         true};
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

uint32_t LinkMatrix::Intern(const std::string& site) {
  return ids_.try_emplace(site, static_cast<uint32_t>(ids_.size())).first->second;
}

std::optional<uint32_t> LinkMatrix::SiteId(const std::string& site) const {
  auto it = ids_.find(site);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<double> LinkMatrix::PairGbps(const std::string& a, const std::string& b,
                                           int64_t now_ms) const {
  auto ia = SiteId(a), ib = SiteId(b);
  if (!ia || !ib) return std::nullopt;
  return PairGbps(*ia, *ib, now_ms);
}

std::optional<double> LinkMatrix::PairGbps(uint32_t a, uint32_t b, int64_t now_ms) const {
  auto it = index_.find((static_cast<uint64_t>(std::min(a, b)) << 32) | std::max(a, b));
  if (it == index_.end()) return std::nullopt;
  auto fresh = [&](const Measured& m) -> std::optional<double> {
    if (!m.known || now_ms - m.measured_at_ms > max_age_ms_) return std::nullopt;
    return m.gbps;
  };
  auto one = fresh(it->second.low_to_high);
  auto other = fresh(it->second.high_to_low);
  if (one && other) return std::min(*one, *other);
  if (one) return one;
  return other;
}

std::vector<v1::Link> LinkMatrix::All(int64_t now_ms) const {
  std::vector<v1::Link> out;
  for (const auto& [key, link] : links_) {
    if (now_ms - link.measured_at_unix_ms() <= max_age_ms_) out.push_back(link);
  }
  return out;
}

}  // namespace fedgate::federation
