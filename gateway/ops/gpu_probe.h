// The node-level GPU health probe (DESIGN.md "Configuration", health): a
// configured health.command wins; else NVML through dlopen of
// libnvidia-ml.so.1; else `nvidia-smi --query-gpu`; else no probe, and GPUs
// count as healthy (logged once). Each round's verdicts go to a callback,
// which withdraws failed GPUs from the site; NVML and nvidia-smi also give
// per-GPU memory and utilisation, exported for the GPU memory alert.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "federation/gpu_health.h"

namespace fedgate::gateway {

class Metrics;

// One GPU as NVML or nvidia-smi sees it; negative numbers are unknown.
struct GpuSample {
  uint32_t index = 0;
  std::string uuid;
  bool ok = true;
  std::string reason;
  double memory_used_bytes = -1;
  double memory_total_bytes = -1;
  double utilization_percent = -1;
};

// Parses `nvidia-smi --query-gpu=index,uuid,memory.used,memory.total,
// utilization.gpu --format=csv,noheader,nounits` (MiB). A GPU whose fields
// read "[GPU is lost]", "ERR!" or similar counts as failed.
absl::StatusOr<std::vector<GpuSample>> ParseNvidiaSmi(std::string_view text);

// Reads GPUs through NVML, loaded at run time so that the gateway needs no
// NVIDIA library to build or start. Null when libnvidia-ml.so.1 is absent
// or nvmlInit fails.
class Nvml {
 public:
  static std::unique_ptr<Nvml> Load();
  ~Nvml();
  absl::StatusOr<std::vector<GpuSample>> Sample();

 private:
  struct Api;
  explicit Nvml(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

class GpuHealthProbe {
 public:
  struct Options {
    std::string command;  // health.command, run by /bin/sh -c
    int64_t interval_ms = 10'000;
    std::map<std::string, uint32_t> nodes;  // node -> GPU count
    // The node NVML/nvidia-smi describe: the one named like this host, or
    // the only node of the site; empty leaves them unused.
    std::string local_node;
    bool try_nvml = true;  // tests turn the hardware probes off
    bool try_nvidia_smi = true;
  };
  // `apply` gets the failed GPUs of every node after each round that changed
  // something, and the changes themselves.
  using Apply = std::function<void(const std::map<std::string, std::set<uint32_t>>& failed,
                                   const std::vector<federation::GpuHealth::Change>& changes)>;
  GpuHealthProbe(Options opts, Metrics* metrics, Apply apply);
  ~GpuHealthProbe();
  void Start();
  void Stop();
  // One round (the thread calls it every interval); returns the verdicts
  // that round produced, or why there were none (nothing changed then).
  absl::StatusOr<std::vector<federation::GpuHealthReport>> RunOnce();
  // "command", "nvml", "nvidia-smi" or "none".
  std::string kind() const { return kind_; }

 private:
  absl::StatusOr<std::vector<federation::GpuHealthReport>> Probe();
  std::vector<federation::GpuHealthReport> FromSamples(const std::vector<GpuSample>& samples);
  void Export();

  Options opts_;
  Metrics* metrics_;
  Apply apply_;
  std::string kind_ = "none";
  std::unique_ptr<Nvml> nvml_;
  std::mutex mu_;  // one round at a time
  federation::GpuHealth health_ ABSL_GUARDED_BY(mu_);
  std::vector<GpuSample> last_samples_ ABSL_GUARDED_BY(mu_);
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread thread_;
};

}  // namespace fedgate::gateway
