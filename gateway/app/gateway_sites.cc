// Where a site's nodes come from (the config file, Slurm, a Kubernetes API
// server) and what the Kubernetes one adds to /metrics.
#include <spdlog/spdlog.h>

#include <cstdlib>

#include "base/str_cat.h"
#include "federation/mig.h"
#include "gateway/app/gateway.h"
#include "gateway/exec/kube_site.h"
#include "gateway/exec/run_command.h"
#include "gateway/exec/slurm.h"
#include "gateway/ops/metrics.h"

namespace fedgate::gateway {

absl::Status Gateway::DiscoverMig() {
  const std::string& name = config_.inventory.mig_from_nvidia_smi;
  if (name.empty()) return absl::OkStatus();
  const char* env = std::getenv("FEDGATE_NVIDIA_SMI");
  const std::string program = env != nullptr && *env != '\0' ? env : "nvidia-smi";
  const std::string what = StrCat("node ", name, " (mig: nvidia-smi): ");
  auto listed = RunCommand({program, "-L"}, 15000);
  if (!listed.ok()) {
    return absl::FailedPreconditionError(StrCat(what, "cannot run ", program, " -L: ", listed.status().message()));
  }
  if (listed->exit_code != 0) {
    return absl::FailedPreconditionError(StrCat(what, program, " -L exited ", listed->exit_code, ": ",
                                                listed->err.substr(0, listed->err.find('\n'))));
  }
  auto slices = federation::ParseNvidiaSmiList(listed->out);
  if (!slices.ok()) return absl::InvalidArgumentError(StrCat(what, slices.status().message()));
  std::vector<federation::Node> nodes;
  for (auto& n : config_.nodes) {
    if (n.name != name || slices->empty()) {
      if (n.name == name) spdlog::info("{}nvidia-smi lists no MIG device: its {} GPUs stay whole", what, n.gpus);
      nodes.push_back(std::move(n));
      continue;
    }
    auto split = federation::ExpandMig(config_.site, n, *slices);
    if (!split.ok()) {
      return absl::InvalidArgumentError(StrCat(what, "the MIG devices nvidia-smi lists: ", split.status().message()));
    }
    for (auto& e : *split) {
      spdlog::info("{}{} {} of model {} as {} (nvidia-smi -L)", what, e.gpus,
                   federation::MigProfileOf(e.gpu_model).empty() ? "whole GPU(s)" : "slice(s)", e.gpu_model,
                   e.name);
      nodes.push_back(std::move(e));
    }
  }
  config_.nodes = std::move(nodes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<federation::InventorySource>> Gateway::OpenInventory() {
  if (config_.inventory.source == "slurm") {
    slurm_ = std::make_unique<SlurmCluster>(config_.slurm);
    // A controller that is down now is not fatal: the site offers nothing
    // until Slurm answers, and says why.
    if (auto st = slurm_->Refresh(); !st.ok()) {
      spdlog::warn("slurm: no nodes yet: {}", std::string(st.message()));
    } else {
      spdlog::info("slurm: {} node(s) with GPUs in partition {}", slurm_->InventoryNodes().size(),
                   config_.slurm.partition);
    }
    return std::make_unique<SlurmInventory>(slurm_.get());
  }
  if (config_.inventory.source == "kubernetes") {
    // A kubeconfig that cannot be used stops the start; a server that does
    // not answer does not: the site offers nothing until it does.
    auto kube = KubeCluster::Connect(config_.kubernetes, config_.site);
    if (!kube.ok()) return kube.status();
    kube_ = std::move(*kube);
    (void)kube_->Refresh();
    return std::make_unique<KubeInventory>(kube_.get());
  }
  return std::make_unique<federation::StaticInventory>(config_.nodes);
}

void Gateway::DescribeKubeMetrics() {
  metrics_->Describe("fedgate_kubernetes_api_requests_total", "counter",
                     "Requests to the site's Kubernetes API server by method and answer (the "
                     "HTTP code, or timeout / unreachable / error when none came; WATCH 410: "
                     "a watch whose version was compacted away, then relisted).");
  metrics_->Describe("fedgate_kubernetes_api_up", "gauge",
                     "1 when the last listing of nodes and pods worked, else 0 (the site then "
                     "offers no GPUs).");
  metrics_->OnScrape([k = kube_.get()](Metrics& m) {
    for (const auto& [key, n] : k->ApiCounts()) {
      m.Set("fedgate_kubernetes_api_requests_total", {{"method", key.first}, {"code", key.second}},
            static_cast<double>(n));
    }
    m.Set("fedgate_kubernetes_api_up", {}, k->last_error().empty() ? 1 : 0);
  });
}

}  // namespace fedgate::gateway
