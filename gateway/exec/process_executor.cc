#include "gateway/exec/process_executor.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "base/str_cat.h"

extern char** environ;

namespace fedgate::gateway {

std::vector<std::string> MergeEnv(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

absl::StatusOr<pid_t> ProcessExecutor::Launch(const RankProcessSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("empty command");
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(spec.log_path).parent_path(), ec);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // Ranks must not inherit the gateway's sockets and files (listening ports,
  // the store): a rank outliving a crashed gateway would block its restart.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);   // the gateway blocks SIGTERM; ranks must not
  posix_spawnattr_setsigdefault(&attr, &all);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        StrCat("cannot start \"", spec.argv[0], "\": ", std::strerror(rc)));
  }
  return pid;
}

std::optional<int> ProcessExecutor::Poll(pid_t pid) {
  int status = 0;
  const pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == pid) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
  }
  if (r < 0 && errno == ECHILD) return -1;  // not ours any more
  return std::nullopt;
}

void ProcessExecutor::Signal(pid_t pid, int sig) { ::kill(-pid, sig); }

}  // namespace fedgate::gateway
