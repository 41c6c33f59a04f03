#include "gateway/exec/kube_site.h"

#include <spdlog/spdlog.h>

#include "base/number.h"
#include "base/str_cat.h"

namespace fedgate::gateway {

KubeCluster::KubeCluster(KubernetesConfig config, std::unique_ptr<kube::KubeClient> client)
    : config_(std::move(config)), client_(std::move(client)) {}

absl::StatusOr<std::unique_ptr<KubeCluster>> KubeCluster::Connect(const KubernetesConfig& config) {
  auto access = config.kubeconfig.empty() ? kube::InClusterAccess()
                                          : kube::LoadKubeconfig(config.kubeconfig);
  if (!access.ok()) return access.status();
  auto client = kube::KubeClient::Make(*access);
  if (!client.ok()) return client.status();
  return std::make_unique<KubeCluster>(config, std::move(*client));
}

absl::Status KubeCluster::Fetch(std::vector<kube::KubeNode>* out, std::string* retry_after) const {
  std::string nodes_path = "/api/v1/nodes";
  if (!config_.node_selector.empty()) {
    nodes_path += "?labelSelector=" + kube::QueryEscape(kube::SelectorText(config_.node_selector));
  }
  auto nodes_r = client_->Call("GET", nodes_path);
  if (nodes_r.ok()) *retry_after = nodes_r->retry_after;
  auto nodes = kube::JsonOf(nodes_r, "listing nodes");
  if (!nodes.ok()) return nodes.status();
  // Every namespace's pods: GPUs the cluster's own users hold are not offered.
  auto pods_r = client_->Call(
      "GET", "/api/v1/pods?fieldSelector=" +
                 kube::QueryEscape("status.phase!=Succeeded,status.phase!=Failed"));
  if (pods_r.ok()) *retry_after = pods_r->retry_after;
  auto pods = kube::JsonOf(pods_r, "listing pods");
  if (!pods.ok()) return pods.status();
  *out = kube::GpuNodes(*nodes, *pods, config_.node_selector, config_.gpu_model_label);
  return absl::OkStatus();
}

absl::Status KubeCluster::Refresh() {
  {
    std::lock_guard lock(mu_);
    if (!last_error_.empty() && std::chrono::steady_clock::now() < retry_at_) {
      return absl::UnavailableError(last_error_);
    }
  }
  std::vector<kube::KubeNode> fresh;
  std::string retry_after;
  const absl::Status st = Fetch(&fresh, &retry_after);  // outside the lock: it asks the server
  std::lock_guard lock(mu_);
  if (st.ok()) {
    if (!last_error_.empty()) {
      spdlog::info("kubernetes: {} answers again: {} node(s) with GPUs", client_->server(), fresh.size());
    } else if (!listed_) {
      spdlog::info("kubernetes: {}: {} node(s) with GPUs match the node selector", client_->server(),
                   fresh.size());
    }
    nodes_ = std::move(fresh);
    listed_ = true;
    last_error_.clear();
    backoff_ = std::chrono::milliseconds(0);
    return st;
  }
  backoff_ = std::min<std::chrono::milliseconds>(
      std::chrono::seconds(60), backoff_.count() == 0 ? std::chrono::milliseconds(1000) : backoff_ * 2);
  // The server's Retry-After (429, 503) wins over our own guess.
  if (auto s = ParseNumber<int64_t>(retry_after); s && *s > 0 && *s < 3600) {
    backoff_ = std::chrono::seconds(*s);
  }
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  last_error_ = std::string(st.message());
  spdlog::warn("kubernetes: API server {}: {}; the site offers no GPUs; retrying in {} ms",
               client_->server(), last_error_, backoff_.count());
  nodes_.clear();
  return st;
}

std::vector<kube::KubeNode> KubeCluster::nodes() const {
  std::lock_guard lock(mu_);
  return nodes_;
}

std::string KubeCluster::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

std::vector<federation::Node> KubeCluster::InventoryNodes() const {
  std::lock_guard lock(mu_);
  std::vector<federation::Node> out;
  for (const auto& k : nodes_) {
    if (!k.usable) continue;
    federation::Node n;
    n.name = k.name;
    n.address = k.address;
    n.gpu_model = k.model;
    n.gpus = k.gpus;
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace fedgate::gateway
