// fedgate-shim: the supervisor of one rank process (in the spirit of
// containerd's shim). The gateway starts it in a new process group; it
// starts the rank as the unprivileged `run_as` user in the job's working
// directory, waits for it, and writes its exit code to a state file, so
// that a gateway restarted after SIGTERM or kill -9 finds the rank again
// and learns how it ended. It ignores SIGTERM itself (the rank, in the same
// process group, gets it); SIGKILL of the group ends both.
//
//   fedgate-shim EXIT_FILE UID GID WORKDIR CGROUP -- ARGV...
//   (UID/GID "-" = stay who the gateway is; CGROUP "-" = none)
#pragma once

namespace fedgate::gateway {

int ShimMain(int argc, char** argv);

}  // namespace fedgate::gateway
