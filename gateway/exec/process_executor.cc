#include "gateway/exec/process_executor.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/number.h"
#include "base/str_cat.h"

extern char** environ;

namespace fedgate::gateway {

std::vector<std::string> RankEnv(const std::vector<std::pair<std::string, std::string>>& extra,
                                 const std::string& home, const std::string& user) {
  static const char* const kAllowed[] = {"PATH",         "LANG",         "LC_ALL",
                                         "TZ",           "TMPDIR",       "ASAN_OPTIONS",
                                         "LSAN_OPTIONS", "UBSAN_OPTIONS"};
  std::map<std::string, std::string> env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}};
  for (const char* name : kAllowed) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  if (!home.empty()) env["HOME"] = home;
  if (!user.empty()) env["USER"] = env["LOGNAME"] = user;
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

bool CanSwitchUsers() {
  if (::geteuid() == 0) return true;
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1u; };
  return has(CAP_SETUID) && has(CAP_SETGID);
}

absl::StatusOr<RankUser> ResolveRankUser(const std::string& run_as) {
  RankUser u;
  if (!CanSwitchUsers()) {
    const passwd* me = ::getpwuid(::geteuid());
    u.name = me != nullptr ? me->pw_name : std::to_string(::geteuid());
    return u;
  }
  if (run_as.empty()) {
    return absl::InvalidArgumentError(
        "executor.run_as is empty: a gateway that can switch users must name the unprivileged "
        "user ranks run as");
  }
  const passwd* pw = ::getpwnam(run_as.c_str());
  if (pw == nullptr) {
    return absl::FailedPreconditionError(
        StrCat("executor.run_as: no user \"", run_as,
               "\" on this host (deploy/deps.sh creates fedgate-rank)"));
  }
  if (pw->pw_uid == 0 || pw->pw_gid == 0) {
    return absl::InvalidArgumentError(
        StrCat("executor.run_as: \"", run_as, "\" is root; ranks never run as root"));
  }
  u.switch_user = true;
  u.uid = pw->pw_uid;
  u.gid = pw->pw_gid;
  u.name = run_as;
  return u;
}

std::optional<uint64_t> ProcStartTime(pid_t pid) {
  std::ifstream f(StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(f, stat)) return std::nullopt;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) {  // field 22 is starttime
    if (!(rest >> field)) return std::nullopt;
  }
  return ParseNumber<uint64_t>(field);
}

absl::StatusOr<pid_t> ProcessExecutor::Launch(const RankProcessSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("empty command");
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(spec.log_path).parent_path(), ec);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  // Only the gateway reads logs (they are under the 0700 data_dir); the rank
  // writes through the inherited descriptor.
  posix_spawn_file_actions_addopen(&fa, 1, spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0600);
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
  std::vector<std::string> args;
  if (supervised()) {
    args = {shim_, spec.exit_file,
            user_.switch_user ? std::to_string(user_.uid) : "-",
            user_.switch_user ? std::to_string(user_.gid) : "-", spec.workdir,
            spec.cgroup.empty() ? "-" : spec.cgroup,
            spec.fence_file.empty() ? "-" : spec.fence_file, "--"};
  }
  args.insert(args.end(), spec.argv.begin(), spec.argv.end());
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        StrCat("cannot start \"", argv[0], "\": ", std::strerror(rc)));
  }
  return pid;
}

std::optional<int> ProcessExecutor::Poll(pid_t pid, const std::string& exit_file,
                                         uint64_t start_time) {
  auto from_file = [&]() -> std::optional<int> {
    if (exit_file.empty()) return std::nullopt;
    std::ifstream f(exit_file);
    int code = 0;
    if (f >> code) return code;
    return std::nullopt;
  };
  int status = 0;
  const pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == pid) {
    // The shim's own status mirrors the rank's; its file says the same, and
    // a shim killed with its group (SIGKILL) wrote none.
    if (auto code = from_file()) return code;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
  }
  if (r == 0) return std::nullopt;
  // Not our child: a shim from before a gateway restart.
  if (auto code = from_file()) return code;
  if (!exit_file.empty() && ::kill(pid, 0) == 0) {
    auto now = ProcStartTime(pid);
    if (now && (start_time == 0 || *now == start_time)) return std::nullopt;  // still running
  }
  if (!exit_file.empty()) {
    // A last look: the shim may have written the file as it exited.
    if (auto code = from_file()) return code;
    return 128 + SIGKILL;
  }
  return -1;
}

void ProcessExecutor::Signal(pid_t pid, int sig) { ::kill(-pid, sig); }

std::optional<uint64_t> ProcessExecutor::StartTime(pid_t pid) { return ProcStartTime(pid); }

}  // namespace fedgate::gateway
