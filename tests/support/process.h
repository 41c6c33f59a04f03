// Real child processes for integration tests: posix_spawn, signals, reaping.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fedgate::testing {

class Process {
 public:
  // Starts argv[0] with stdout and stderr appended to `log_path`. `env` holds
  // extra NAME=VALUE entries added to (or overriding) this process's own.
  static std::unique_ptr<Process> Spawn(const std::vector<std::string>& argv,
                                        const std::string& log_path,
                                        const std::vector<std::string>& env = {});
  ~Process();

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // The exit code (or 128+signal) once it exits within `timeout_ms`.
  std::optional<int> Wait(int timeout_ms);
  bool Running();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int code_ = 0;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs a command to completion (killed after `timeout_ms`), capturing output.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {}, int timeout_ms = 30000);

}  // namespace fedgate::testing
