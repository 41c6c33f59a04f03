// How a participant starts, watches and signals the processes of a slice's
// ranks. The process executor is the real one (Slurm steps run under it
// too); tests plug a fake that starts nothing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::gateway {

struct RankProcessSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=VALUE, complete
  std::string log_path;
  std::string exit_file;  // where the shim writes the exit code
  std::string workdir;    // "" = the gateway's
  std::string cgroup;     // the slice's cgroup ("" = none)
  std::string fence_file;  // the slice's fence, read by the shim ("" = none)
};

// Who ranks run as.
struct RankUser {
  bool switch_user = false;  // false: the gateway's own user
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;
};

class RankRunner {
 public:
  virtual ~RankRunner() = default;
  // True when ranks outlive the gateway (a shim supervises each) and can be
  // re-attached after a restart.
  virtual bool supervised() const = 0;
  virtual const RankUser& user() const = 0;
  // The pid of the rank's process group leader.
  virtual absl::StatusOr<pid_t> Launch(const RankProcessSpec& spec) = 0;
  // The exit code (128 + signal for a signal) once the rank ended.
  virtual std::optional<int> Poll(pid_t pid, const std::string& exit_file,
                                  uint64_t start_time) = 0;
  // Signals the rank's whole process group.
  virtual void Signal(pid_t pid, int sig) = 0;
  // The process's start time, to tell it from a later one with its pid.
  virtual std::optional<uint64_t> StartTime(pid_t pid) = 0;
};

}  // namespace fedgate::gateway
