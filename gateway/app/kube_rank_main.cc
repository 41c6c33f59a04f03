// fedgate-kube-rank: see gateway/exec/kube_rank.h.
#include <unistd.h>

#include <cstdio>

#include "gateway/exec/kube_rank.h"

int main(int argc, char** argv) {
  const int code = fedgate::gateway::RunKubeRank(argc, argv);
  std::fflush(nullptr);
  _exit(code);
}
