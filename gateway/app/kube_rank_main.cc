// fedgate-kube-rank: see gateway/exec/kube_rank.h.
#include "gateway/exec/kube_rank.h"

int main(int argc, char** argv) { return fedgate::gateway::RunKubeRank(argc, argv); }
