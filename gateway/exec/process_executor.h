// The `process` executor: one OS process per rank on the gateway's host.
// With fedgate-shim (gateway/exec/shim.h) each rank runs under its own small
// supervisor: as the unprivileged `executor.run_as` user, in the job's
// working directory, in its own process group, its exit code written to a
// state file, so it outlives the gateway and is found again after a
// restart. Without the shim (unit tests), ranks are the gateway's children.
// Processes are started with posix_spawn (never fork in the multithreaded
// gateway); stdout and stderr go to the rank's log file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gateway/exec/rank_runner.h"

namespace fedgate::gateway {

// Resolves `run_as` for a gateway running as `euid`: a gateway that can
// switch users (root, or CAP_SETUID and CAP_SETGID) must have a run_as user
// that exists and is not root; one that cannot runs ranks as itself.
absl::StatusOr<RankUser> ResolveRankUser(const std::string& run_as);
// True when this process may switch users (root or CAP_SETUID+CAP_SETGID).
bool CanSwitchUsers();

class ProcessExecutor : public RankRunner {
 public:
  // `shim`: the fedgate-shim binary ("" = none: unsupervised children).
  void Configure(std::string shim, RankUser user) {
    shim_ = std::move(shim);
    user_ = std::move(user);
  }
  bool supervised() const override { return !shim_.empty(); }
  const RankUser& user() const override { return user_; }

  // The pid of the rank's process group leader (the shim, or the rank).
  absl::StatusOr<pid_t> Launch(const RankProcessSpec& spec) override;
  // The exit code (128 + signal for a signal) once the rank ended. Works
  // after a gateway restart too: then the shim is not a child any more and
  // the code comes from `exit_file`; a shim that vanished without writing
  // one (SIGKILL) counts as killed (137). `start_time` (from /proc, 0 =
  // unknown) tells the shim from a process that reused its pid.
  std::optional<int> Poll(pid_t pid, const std::string& exit_file = "",
                          uint64_t start_time = 0) override;
  // Signals the rank's whole process group.
  void Signal(pid_t pid, int sig) override;
  std::optional<uint64_t> StartTime(pid_t pid) override;

 private:
  std::string shim_;
  RankUser user_;
};

// The rank's environment: a short allowlist of the gateway's (PATH, LANG,
// LC_ALL, TZ, TMPDIR and sanitizer options), HOME, USER and LOGNAME, then
// `extra` (the spec's env, then the rank environment; later entries win).
// Nothing else of the gateway's environment.
std::vector<std::string> RankEnv(const std::vector<std::pair<std::string, std::string>>& extra,
                                 const std::string& home, const std::string& user);

// The start time of a process (clock ticks since boot), to tell a rank from
// an unrelated process that reused its pid.
std::optional<uint64_t> ProcStartTime(pid_t pid);

}  // namespace fedgate::gateway
