// The site's nodes and GPUs. Sources sit behind one interface: static (from the
// config file) now; nvml, kubernetes and slurm later.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fedgate::federation {

struct Node {
  std::string name;
  std::string address;
  std::string gpu_model;
  uint32_t gpu_memory_gib = 0;  // 0 = unknown
  uint32_t gpus = 0;
  bool rdma = false;
  double nic_gbps = 0;  // 0 = unknown
  std::map<std::string, std::string> labels;
  // CUDA_VISIBLE_DEVICES of each GPU index when it is not the index itself
  // (whole GPUs beside partitioned ones; MIG UUIDs); empty = the index.
  std::vector<std::string> devices;
};

class InventorySource {
 public:
  virtual ~InventorySource() = default;
  // The nodes as the source sees them now.
  virtual std::vector<Node> Nodes() const = 0;
  // Short name of the source kind, for logs ("static").
  virtual std::string Kind() const = 0;
};

// The embedded default: the node list declared in the config file.
class StaticInventory final : public InventorySource {
 public:
  explicit StaticInventory(std::vector<Node> nodes) : nodes_(std::move(nodes)) {}
  std::vector<Node> Nodes() const override { return nodes_; }
  std::string Kind() const override { return "static"; }

 private:
  std::vector<Node> nodes_;
};

}  // namespace fedgate::federation
