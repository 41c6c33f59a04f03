// The Slurm backend's view of a cluster (executor.kind / inventory.source
// `slurm`): nodes, GPU GRES and their use from `scontrol -d show node -o`;
// a hold is a real allocation (`salloc --no-shell --immediate`, one per
// node, owned by the run_as user); ranks are steps in it (`srun --jobid
// --exact`, run by the process executor's shim, so they outlive the
// gateway); ends and aborts `scancel` the allocation. Every command points at
// `slurm.conf` through SLURM_CONF and has a deadline: nothing hangs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "federation/inventory.h"
#include "gateway/config/config.h"

namespace fedgate::gateway {

struct SlurmNode {
  std::string name;
  std::string addr;
  std::string state;      // IDLE, MIXED, ALLOCATED, DRAIN, DOWN+DRAIN, IDLE+DRAIN, ...
  std::string gres_type;  // "a100"
  uint32_t gpus = 0;      // GPU GRES configured
  uint32_t used = 0;      // GPU GRES allocated, by anyone
  std::vector<std::string> partitions;
  // Takes work: not drained, down, failing or not responding.
  bool usable() const;
};

// One node per line of `scontrol -d show node -o`; a node without GPU GRES
// has gpus 0. INVALID_ARGUMENT names a line that is not `Key=Value ...`.
absl::StatusOr<std::vector<SlurmNode>> ParseScontrolNodes(const std::string& text);
// The job id in salloc's "Granted job allocation N".
std::optional<uint64_t> ParseSallocJobId(const std::string& text);

class SlurmCluster {
 public:
  explicit SlurmCluster(SlurmConfig config);
  const SlurmConfig& config() const { return config_; }

  // Re-reads the nodes of the partition (scontrol); on failure the last
  // view stays and the error is returned (and kept for the capacity
  // explanation).
  absl::Status Refresh();
  std::vector<SlurmNode> nodes() const;
  std::string last_error() const;
  // Usable nodes with GPUs, as inventory nodes (model from gpu_models).
  std::vector<federation::Node> InventoryNodes() const;

  // A real allocation of `gpus` GPUs on `node` for the run_as user.
  absl::StatusOr<uint64_t> Allocate(const std::string& name, const std::string& node,
                                    uint32_t gpus, const std::string& tenant, uid_t uid,
                                    gid_t gid, bool switch_user);
  // scancel (with `signal`, e.g. "TERM", only the signal is sent).
  absl::Status Cancel(uint64_t job_id, const std::string& signal = "");
  // The argv of one rank: a one-GPU step of the allocation on `node`.
  std::vector<std::string> StepArgv(uint64_t job_id, const std::string& node,
                                    const std::string& name,
                                    const std::vector<std::string>& command) const;
  // Environment a Slurm client needs (SLURM_CONF).
  std::vector<std::pair<std::string, std::string>> ClientEnv() const;

 private:
  std::string GresType(const std::string& node) const;
  SlurmConfig config_;
  mutable std::mutex mu_;
  std::vector<SlurmNode> nodes_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

// The embedded inventory interface over a SlurmCluster's last view.
class SlurmInventory final : public federation::InventorySource {
 public:
  explicit SlurmInventory(SlurmCluster* cluster) : cluster_(cluster) {}
  std::vector<federation::Node> Nodes() const override { return cluster_->InventoryNodes(); }
  std::string Kind() const override { return "slurm"; }

 private:
  SlurmCluster* cluster_;
};

}  // namespace fedgate::gateway
