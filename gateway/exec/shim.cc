#include "gateway/exec/shim.h"

#include "base/number.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fedgate::gateway {
namespace {

void Ignore(int) {}

// Atomically: a reader sees no file or the whole code.
void WriteExit(const std::string& path, int code) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string text = std::to_string(code) + "\n";
  (void)!::write(fd, text.data(), text.size());
  ::fsync(fd);
  ::close(fd);
  ::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int ShimMain(int argc, char** argv) {
  if (argc < 8 || std::string(argv[6]) != "--") {
    std::fprintf(stderr, "usage: fedgate-shim EXIT_FILE UID GID WORKDIR CGROUP -- ARGV...\n");
    return 2;
  }
  const std::string exit_file = argv[1];
  const bool switch_user = std::string(argv[2]) != "-";
  const auto uid = switch_user ? ParseNumber<uid_t>(argv[2]) : std::optional<uid_t>(0);
  const auto gid = switch_user ? ParseNumber<gid_t>(argv[3]) : std::optional<gid_t>(0);
  if (!uid || !gid) {
    std::fprintf(stderr, "fedgate-shim: UID and GID must be numbers, got %s %s\n", argv[2], argv[3]);
    return 2;
  }
  const std::string workdir = argv[4];
  const std::string cgroup = std::string(argv[5]) == "-" ? "" : argv[5];
  struct sigaction sa {};
  sa.sa_handler = Ignore;  // a handler, not SIG_IGN: the rank must not inherit it
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "fedgate-shim: fork: %s\n", std::strerror(errno));
    WriteExit(exit_file, 127);
    return 127;
  }
  if (child == 0) {
    // Into the slice's cgroup first (as root), so that a stop reaches every
    // process the rank starts, even one that leaves its process group.
    if (!cgroup.empty()) {
      const std::string procs = cgroup + "/cgroup.procs";
      const int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      const std::string me = std::to_string(::getpid());
      if (fd < 0 || ::write(fd, me.data(), me.size()) < 0) {
        std::fprintf(stderr, "fedgate-shim: cannot join cgroup %s: %s\n", cgroup.c_str(),
                     std::strerror(errno));
      }
      if (fd >= 0) ::close(fd);
    }
    if (switch_user &&
        (::setgroups(0, nullptr) != 0 || ::setgid(*gid) != 0 || ::setuid(*uid) != 0)) {
      std::fprintf(stderr, "fedgate-shim: cannot run as uid %u: %s\n", *uid, std::strerror(errno));
      ::_exit(126);
    }
    if (switch_user && ::setuid(0) == 0) {
      std::fprintf(stderr, "fedgate-shim: still able to become root; refusing to run\n");
      ::_exit(126);
    }
    if (!workdir.empty() && ::chdir(workdir.c_str()) != 0) {
      std::fprintf(stderr, "fedgate-shim: cannot enter %s: %s\n", workdir.c_str(),
                   std::strerror(errno));
      ::_exit(126);
    }
    ::execvp(argv[7], argv + 7);
    std::fprintf(stderr, "fedgate: cannot start \"%s\": %s\n", argv[7], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  WriteExit(exit_file, code);
  return code;
}

}  // namespace fedgate::gateway
