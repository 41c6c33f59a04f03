// The Kubernetes backend's view of a cluster (executor.kind /
// inventory.source `kubernetes`): the nodes lent to the federation (the
// node selector), Ready and schedulable, their allocatable nvidia.com/gpu
// minus what every non-terminated pod bound to them requests, read from the
// API server every advertise interval. An API server that cannot be reached
// or refuses the gateway is retried with backoff (1 s doubling to 60 s, or
// its Retry-After); meanwhile the site offers nothing and says why.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <map>
#include <utility>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "federation/inventory.h"
#include "gateway/config/config.h"
#include "gateway/kube/kube_client.h"
#include "gateway/kube/kube_nodes.h"

namespace fedgate::gateway {

class KubeCluster {
 public:
  KubeCluster(KubernetesConfig config, std::unique_ptr<kube::KubeClient> client,
              std::string site = "");
  // The kubeconfig (or the in-cluster account) read and checked: a file that
  // cannot be used is a config error; a server that does not answer is not.
  static absl::StatusOr<std::unique_ptr<KubeCluster>> Connect(const KubernetesConfig& config,
                                                              const std::string& site);

  // A slice's hold made real (kube_objects.h): its ConfigMap, and a pod per
  // node bound there with `gpus` GPU (or MIG slice) containers, each admitted by its
  // kubelet within `admit_timeout`. On any refusal (quota: 403, the
  // kubelet: OutOfnvidia.com/gpu, the API: an error) what was created is
  // deleted and the refusal returned. `name` is fedgate-<job>-<attempt>.
  absl::StatusOr<uint64_t> ReserveHold(const std::string& name,
                                       const std::map<std::string, uint32_t>& gpus,
                                       const std::string& tenant,
                                       std::chrono::milliseconds admit_timeout,
                                       const std::string& image = "");
  // Deletes the hold's pods (with their grace period) and its ConfigMap.
  absl::Status ReleaseHold(uint64_t id);
  // The namespace a tenant's pods run in.
  std::string NamespaceFor(const std::string& tenant) const;
  // What fedgate-kube-rank needs to reach the API server, as environment.
  std::vector<std::pair<std::string, std::string>> AttachEnv() const;

  // Watches every namespace's pods and the lent nodes from the last list's
  // resourceVersion and calls `on_change` on each change, so a pod of the
  // cluster's own users leaves the ad at once, not at the next interval; a
  // 410 Gone (the version was compacted away) relists. Until StopWatching.
  void StartWatching(std::function<void()> on_change);
  void StopWatching();
  ~KubeCluster();

  // API answers by (method, HTTP code or "timeout"/"unreachable"/"error"),
  // and how many watches ended in 410 and relisted.
  std::map<std::pair<std::string, std::string>, int64_t> ApiCounts() const;
  int64_t Relists() const;

  // Lists nodes and pods again, unless backing off after a failure (then the
  // last error). On failure the site offers nothing until it succeeds.
  absl::Status Refresh();
  std::vector<kube::KubeNode> nodes() const;
  std::string last_error() const;  // "" when the last refresh worked
  std::vector<federation::Node> InventoryNodes() const;
  // An offered node's API node name and the resource its pods ask for
  // (a MIG profile's offer is "<node>-mig-<profile>"); a name not offered
  // is taken as the API's own, with whole GPUs.
  std::pair<std::string, std::string> KubeNodeOf(const std::string& offered) const;
  const KubernetesConfig& config() const { return config_; }
  kube::KubeClient* client() { return client_.get(); }

 private:
  absl::Status Fetch(std::vector<kube::KubeNode>* out, std::string* retry_after,
                     std::string* nodes_rv, std::string* pods_rv) const;
  void WatchLoop(const std::string& what, const std::string& path);
  absl::Status WaitAdmitted(const std::string& ns, const std::string& pod,
                            std::chrono::steady_clock::time_point deadline) const;
  KubernetesConfig config_;
  std::unique_ptr<kube::KubeClient> client_;
  std::string site_;
  mutable std::mutex mu_;
  std::vector<kube::KubeNode> nodes_ ABSL_GUARDED_BY(mu_);
  bool listed_ ABSL_GUARDED_BY(mu_) = false;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point retry_at_ ABSL_GUARDED_BY(mu_);
  std::chrono::milliseconds backoff_ ABSL_GUARDED_BY(mu_){0};
  std::string pods_rv_ ABSL_GUARDED_BY(mu_), nodes_rv_ ABSL_GUARDED_BY(mu_);  // of the last list
  std::map<std::pair<std::string, std::string>, int64_t> api_counts_ ABSL_GUARDED_BY(mu_);
  int64_t relists_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> on_change_;
  std::atomic<bool> stop_watching_{false};
  std::vector<std::thread> watchers_;
};

class KubeInventory final : public federation::InventorySource {
 public:
  explicit KubeInventory(KubeCluster* cluster) : cluster_(cluster) {}
  std::vector<federation::Node> Nodes() const override { return cluster_->InventoryNodes(); }
  std::string Kind() const override { return "kubernetes"; }

 private:
  KubeCluster* cluster_;
};

}  // namespace fedgate::gateway
