// fedgate-shim: the supervisor of one rank process (in the spirit of
// containerd's shim). The gateway starts it in a new process group; it
// starts the rank as the unprivileged `run_as` user in the job's working
// directory, waits for it, and writes its exit code to a state file, so
// that a gateway restarted after SIGTERM or kill -9 finds the rank again
// and learns how it ended. It ignores SIGTERM itself (the rank, in the same
// process group, gets it); SIGKILL of the group ends both.
//
// The fence: FENCE_FILE holds "DEADLINE_UNIX_MS GRACE_MS", pushed forward by
// the gateway each time the slice's lease is renewed. Past the deadline the
// shim stops the rank by itself (SIGTERM to the group, SIGKILL after the
// grace), so a gateway that is dead, stopped or cut off cannot leave ranks
// running after its coordinator may have started their replacements. A
// missing file (a slice started before fences) means no fence.
//
//   fedgate-shim EXIT_FILE UID GID WORKDIR CGROUP FENCE_FILE -- ARGV...
//   (UID/GID "-" = stay who the gateway is; CGROUP, FENCE_FILE "-" = none)
#pragma once

namespace fedgate::gateway {

int ShimMain(int argc, char** argv);

}  // namespace fedgate::gateway
