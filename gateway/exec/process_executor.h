// The `process` executor: one OS process per rank, in its own process group,
// started with posix_spawn (never fork in the multithreaded gateway), stdout
// and stderr appended to the rank's log file.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::gateway {

struct RankProcessSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=VALUE, complete
  std::string log_path;
};

class ProcessExecutor {
 public:
  absl::StatusOr<pid_t> Launch(const RankProcessSpec& spec);
  // The exit code (128 + signal for a signal) once the process ended.
  std::optional<int> Poll(pid_t pid);
  // Signals the rank's whole process group.
  void Signal(pid_t pid, int sig);
};

// This process's environment, then `extra` (later entries win).
std::vector<std::string> MergeEnv(const std::vector<std::pair<std::string, std::string>>& extra);

}  // namespace fedgate::gateway
