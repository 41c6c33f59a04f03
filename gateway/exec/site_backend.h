// How a site makes a hold real and runs its ranks, behind one small
// interface (DESIGN.md "Executor"):
//   process  the embedded default: the ledger hold is the whole
//            reservation; ranks run on this host;
//   slurm    a Slurm allocation per node is the reservation (salloc) and
//            each rank is a step in it (srun); nodes come from Slurm.
// Both run each rank's command under the process executor's fedgate-shim,
// so both are stopped with a grace period, read by log offset, and
// re-attached after a gateway restart.
//   kubernetes  nodes and free GPUs from the API server; the hold is a pod per
//            node bound there with GPU limits, each rank a container of it
//            held until the commit (kube_objects.h), followed under the shim
//            by fedgate-kube-rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/inventory.h"
#include "gateway/exec/process_executor.h"

namespace fedgate::gateway {

class SlurmCluster;
class KubeCluster;

class SiteBackend {
 public:
  // node -> (the resource manager's id of its reservation there, GPUs)
  using Allocs = std::map<std::string, std::pair<uint64_t, uint32_t>>;
  struct NodeState {
    federation::Node node;
    bool usable = true;      // drained, down: nothing of it is offered
    uint32_t allocated = 0;  // GPUs the resource manager gave out, ours included
  };

  virtual ~SiteBackend() = default;
  virtual std::string Kind() const = 0;
  // The nodes as the resource manager sees them now; nullopt when they come
  // from the config file (nothing to refresh); an error when it cannot be
  // asked (then the site offers nothing: it could not reserve either).
  virtual absl::StatusOr<std::optional<std::vector<NodeState>>> Nodes() = 0;
  // Reserves `gpus` (node -> count) for a prepared hold named `name`;
  // `image`: the job's container image where ranks run in one ("" = the
  // site's default).
  virtual absl::StatusOr<Allocs> Reserve(const std::string& name,
                                         const std::map<std::string, uint32_t>& gpus,
                                         const std::string& tenant, const RankUser& user,
                                         const std::string& image) = 0;
  // The command that runs one rank in that reservation; may change its
  // environment (Slurm binds CUDA_VISIBLE_DEVICES itself).
  virtual absl::StatusOr<std::vector<std::string>> RankCommand(
      const Allocs& allocs, const std::string& node, const std::string& name,
      const std::vector<std::string>& command,
      std::vector<std::pair<std::string, std::string>>* env) const = 0;
  // Gives a reservation back (the slice ended, was aborted, or was lost).
  virtual void Release(const Allocs& allocs) = 0;
};

std::unique_ptr<SiteBackend> MakeProcessBackend();
std::unique_ptr<SiteBackend> MakeSlurmBackend(SlurmCluster* cluster);
std::unique_ptr<SiteBackend> MakeKubeBackend(KubeCluster* cluster);

}  // namespace fedgate::gateway
