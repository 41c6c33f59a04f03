// What a commit (or a world restart) decided under the participant's lock,
// for the ranks started after it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

// What a commit decided under the lock, for the ranks started after it.
struct Participant::LaunchPlan {
  federation::Hold hold;
  std::vector<uint32_t> gpu_of;  // the GPU index of each rank of the request
  Allocs reservation;            // the backend's, where it has one
  std::map<std::string, std::string> node_addr, node_model;
  // A node's CUDA_VISIBLE_DEVICES per GPU index where it is not the index
  // (MIG UUIDs, whole GPUs beside partitioned ones).
  std::map<std::string, std::vector<std::string>> node_devices;
  std::string work, cgroup;
  int64_t lease_ms = 0, started_at_ms = 0;
  FenceWrite fence;  // the shims' own stop, from started_at_ms
  // Dataset name -> the folder its ranks read.
  std::map<std::string, std::string> dataset_dirs;
};

}  // namespace fedgate::gateway
