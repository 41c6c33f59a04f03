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
#include <ctime>
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

int64_t NowUnixMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// The fence's deadline and grace, or false while the file is absent or
// half-written (the gateway renames a whole file into place).
bool ReadFence(const std::string& path, int64_t* deadline_ms, int64_t* grace_ms) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[64] = {};
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  long long d = 0, g = 0;
  if (n <= 0 || std::sscanf(buf, "%lld %lld", &d, &g) != 2 || d <= 0 || g < 0) return false;
  *deadline_ms = d;
  *grace_ms = g;
  return true;
}

// Waits for the rank, stopping its group once the fence has passed; the
// rank's wait status.
int Supervise(pid_t child, const std::string& exit_file, const std::string& fence,
              const sigset_t& chld) {
  int64_t deadline = 0, grace = 0, term_at = 0;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(child, &status, WNOHANG);
    if (r == child) return status;
    if (r < 0 && errno != EINTR) return 127 << 8;  // not ours to wait for: a failure
    if (!fence.empty() && term_at == 0) ReadFence(fence, &deadline, &grace);
    const int64_t now = NowUnixMs();
    if (deadline > 0 && term_at == 0 && now >= deadline) {
      std::fprintf(stderr,
                   "fedgate-shim: the gateway has not renewed this slice since its fence passed "
                   "(%lld ms ago); stopping the rank\n",
                   static_cast<long long>(now - deadline));
      term_at = now;
      ::kill(0, SIGTERM);  // the group; this shim ignores it
    }
    if (term_at > 0 && now >= term_at + grace) {
      // The code first: SIGKILL of the group ends this shim too.
      WriteExit(exit_file, 128 + SIGKILL);
      ::kill(0, SIGKILL);
    }
    const timespec tick{0, 200 * 1000 * 1000};
    ::sigtimedwait(&chld, nullptr, &tick);  // wakes at once when the rank ends
  }
}

}  // namespace

int ShimMain(int argc, char** argv) {
  if (argc < 9 || std::string(argv[7]) != "--") {
    std::fprintf(stderr,
                 "usage: fedgate-shim EXIT_FILE UID GID WORKDIR CGROUP FENCE_FILE -- ARGV...\n");
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
  const std::string fence = std::string(argv[6]) == "-" ? "" : argv[6];
  struct sigaction sa {};
  sa.sa_handler = Ignore;  // a handler, not SIG_IGN: the rank must not inherit it
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  // SIGCHLD blocked, so that the supervision loop can wait for it.
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old);
  const pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "fedgate-shim: fork: %s\n", std::strerror(errno));
    WriteExit(exit_file, 127);
    return 127;
  }
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
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
    ::execvp(argv[8], argv + 8);
    std::fprintf(stderr, "fedgate: cannot start \"%s\": %s\n", argv[8], std::strerror(errno));
    ::_exit(127);
  }
  const int status = Supervise(child, exit_file, fence, chld);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  WriteExit(exit_file, code);
  return code;
}

}  // namespace fedgate::gateway
