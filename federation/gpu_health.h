// Which GPUs of this site fail their health check. Reports come from a probe
// (health.command, NVML or nvidia-smi); a GPU a report does not mention keeps
// its state, and a GPU counts as healthy until a report says otherwise
// (DESIGN.md "Configuration", health). Pure: no processes, no clock.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::federation {

struct GpuHealthReport {
  std::string node;
  uint32_t gpu = 0;
  bool ok = true;
  std::string reason;  // why it failed, as the probe said
};

// Parses health.command's output: one `<node> <gpu_index> ok|fail [reason]`
// per line; blank lines and `#` comments are skipped. `nodes` maps each node
// of the site to its GPU count. Any bad line (unknown node, index out of
// range, a word other than ok/fail) makes the whole output an error naming
// that line, so a broken probe changes nothing.
absl::StatusOr<std::vector<GpuHealthReport>> ParseHealthOutput(
    std::string_view text, const std::map<std::string, uint32_t>& nodes);

class GpuHealth {
 public:
  struct Change {
    std::string node;
    uint32_t gpu = 0;
    bool ok = true;
    std::string reason;
  };
  // Applies one probe round; returns the GPUs whose state changed.
  std::vector<Change> Apply(const std::vector<GpuHealthReport>& reports);
  // Failed GPU indices of each node that has any.
  std::map<std::string, std::set<uint32_t>> FailedByNode() const;
  bool Failed(const std::string& node, uint32_t gpu) const {
    return failed_.contains({node, gpu});
  }
  const std::map<std::pair<std::string, uint32_t>, std::string>& failed() const { return failed_; }

 private:
  std::map<std::pair<std::string, uint32_t>, std::string> failed_;  // -> reason
};

}  // namespace fedgate::federation
