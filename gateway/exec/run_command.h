// Runs a short helper command (a GPU health probe, nvidia-smi, Slurm's
// tools) with a deadline: its own process group, killed whole when the
// deadline passes, output captured up to a cap. posix_spawnp, never fork.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::gateway {

struct CommandResult {
  int exit_code = 0;  // 128 + signal when a signal ended it
  std::string out;    // stdout, at most max_output bytes
  std::string err;    // stderr, at most max_output bytes
};

// NOT_FOUND when the program cannot be started, DEADLINE_EXCEEDED (after
// killing its process group) when it outlives `timeout_ms`.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, int64_t timeout_ms,
                                         size_t max_output = 1 << 20);

}  // namespace fedgate::gateway
