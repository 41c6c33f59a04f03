#include "federation/gpu_health.h"

#include <charconv>

#include "base/number.h"
#include "base/str_cat.h"
#include "base/text.h"

namespace fedgate::federation {

absl::StatusOr<std::vector<GpuHealthReport>> ParseHealthOutput(
    std::string_view text, const std::map<std::string, uint32_t>& nodes) {
  std::vector<GpuHealthReport> out;
  int line_no = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_no;
    line = Trim(line);
    if (line.empty() || line.front() == '#') continue;
    const std::vector<std::string_view> words = Words(line, 4);
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(StrCat("health output line ", line_no, ": ", why, " (\"",
                                               line.substr(0, 120), "\")"));
    };
    if (words.size() < 3) return bad("want \"<node> <gpu_index> ok|fail [reason]\"");
    GpuHealthReport r;
    r.node = std::string(words[0]);
    auto node = nodes.find(r.node);
    if (node == nodes.end()) return bad(StrCat("no node \"", r.node, "\" at this site"));
    const auto gpu = ParseNumber<uint32_t>(words[1]);
    if (!gpu) {
      return bad(StrCat("GPU index \"", words[1], "\" is not a number"));
    }
    r.gpu = *gpu;
    if (r.gpu >= node->second) {
      return bad(StrCat("node ", r.node, " has ", node->second, " GPU(s), no index ", r.gpu));
    }
    if (words[2] == "ok") {
      r.ok = true;
    } else if (words[2] == "fail") {
      r.ok = false;
    } else {
      return bad(StrCat("want ok or fail, got \"", words[2], "\""));
    }
    if (words.size() > 3) r.reason = std::string(words[3].substr(0, 256));
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<GpuHealth::Change> GpuHealth::Apply(const std::vector<GpuHealthReport>& reports) {
  std::vector<Change> changes;
  for (const auto& r : reports) {
    const std::pair<std::string, uint32_t> key{r.node, r.gpu};
    auto it = failed_.find(key);
    if (r.ok && it != failed_.end()) {
      failed_.erase(it);
      changes.push_back({r.node, r.gpu, true, r.reason});
    } else if (!r.ok && it == failed_.end()) {
      failed_[key] = r.reason;
      changes.push_back({r.node, r.gpu, false, r.reason});
    } else if (!r.ok) {
      it->second = r.reason;  // still failing; keep the latest reason
    }
  }
  return changes;
}

std::map<std::string, std::set<uint32_t>> GpuHealth::FailedByNode() const {
  std::map<std::string, std::set<uint32_t>> out;
  for (const auto& [key, reason] : failed_) out[key.first].insert(key.second);
  return out;
}

}  // namespace fedgate::federation
