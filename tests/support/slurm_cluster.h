// A real Slurm 22.05 on this host for tests and the demo: munged,
// slurmctld and one slurmd per node (`slurmd -N`), from a config in a
// folder of its own on free ports, each node with `gpus` fake GPUs
// (character devices, `mknod c 1 3`, listed in gres.conf). Needs root.
// Every daemon is stopped by its pid file when the object goes.
#pragma once

#include <string>
#include <vector>

#include "tests/support/process.h"

namespace fedgate::testing {

class SlurmTestCluster {
 public:
  SlurmTestCluster(std::vector<std::string> nodes, int gpus, std::string gres_type = "a100");
  ~SlurmTestCluster();
  SlurmTestCluster(const SlurmTestCluster&) = delete;
  SlurmTestCluster& operator=(const SlurmTestCluster&) = delete;

  // Waits until every node is idle; false (with the daemons' logs in
  // `error()`) when Slurm did not come up.
  bool Ready(int timeout_ms = 30000);
  std::string error() const { return error_; }
  const std::string& conf() const { return conf_; }
  const std::string& dir() const { return dir_; }
  // A Slurm client command against this cluster (SLURM_CONF set).
  CommandResult Run(std::vector<std::string> argv, int timeout_ms = 30000) const;
  // Stops and starts slurmctld (a controller that is down).
  void StopController();
  void StartController();
  // Job ids in the queue (squeue), any user.
  std::vector<std::string> Queue() const;

 private:
  std::string dir_, conf_;
  std::vector<std::string> nodes_;
  std::vector<std::string> pid_files_;
  std::string error_;
};

}  // namespace fedgate::testing
