// fedgate-kube-rank: one rank of a Kubernetes site, as the shim sees it.
//   fedgate-kube-rank --hold ID --node NODE --container rank-N [--grace S] -- COMMAND...
// Finds the hold's pod on NODE (label fedgate.io/hold, field spec.nodeName),
// writes the rank's commit into the pod's annotations (its environment,
// minus the API credentials and the host's own variables, and COMMAND; the
// rank that completes the pod's set also writes fedgate.io/committed, which
// lets the pod's init step go), streams the container's log to stdout, and
// exits with the container's exit code. SIGTERM deletes the pod with the grace period
// and waits for the container's end. API credentials come from the
// environment (FEDGATE_KUBE_SERVER, _TOKEN, _CA, _INSECURE, _CERT, _KEY),
// put there by the gateway.
#pragma once

namespace fedgate::gateway {

// The exit code; the caller ends the process with _exit (a thread may
// still be deleting the pod).
int RunKubeRank(int argc, char** argv);

}  // namespace fedgate::gateway
