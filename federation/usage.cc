#include "federation/usage.h"

#include <algorithm>

#include "base/str_cat.h"

namespace fedgate::federation {

double GpuSeconds(const UsageRecord& r, int64_t since_ms, int64_t until_ms, int64_t now_ms) {
  const int64_t end = r.end_ms > 0 ? r.end_ms : now_ms;
  const int64_t from = std::max(r.start_ms, since_ms), to = std::min(end, until_ms);
  if (to <= from) return 0;
  return static_cast<double>(r.gpus) * static_cast<double>(to - from) / 1000.0;
}

absl::StatusOr<std::vector<UsageRow>> AggregateUsage(const std::vector<UsageRecord>& records,
                                                     int64_t since_ms, int64_t until_ms,
                                                     int64_t now_ms, const std::string& by,
                                                     const Pricing& pricing) {
  if (by != "tenant" && by != "site" && by != "model") {
    return absl::InvalidArgumentError(StrCat("--by must be tenant, site or model, not \"", by, "\""));
  }
  if (until_ms <= since_ms) return absl::InvalidArgumentError("the window ends before it starts");
  std::map<std::string, UsageRow> rows;
  for (const auto& r : records) {
    const double s = GpuSeconds(r, since_ms, until_ms, now_ms);
    if (s <= 0) continue;
    const std::string& key = by == "tenant" ? r.tenant : by == "site" ? r.site : r.gpu_model;
    UsageRow& row = rows[key];
    row.key = key;
    row.gpu_seconds += s;
    if (auto p = pricing.find(r.gpu_model); p != pricing.end()) {
      row.cost += s / 3600.0 * (r.priority == "spot" ? p->second.spot : p->second.guaranteed);
    }
  }
  std::vector<UsageRow> out;
  for (auto& [k, row] : rows) out.push_back(std::move(row));
  return out;
}

}  // namespace fedgate::federation
