#include "gateway/exec/site_backend.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <filesystem>
#include <future>

#include "base/str_cat.h"
#include "gateway/exec/kube_site.h"
#include "gateway/exec/slurm.h"
#include "gateway/kube/kube_objects.h"

namespace fedgate::gateway {
namespace {

class ProcessBackend final : public SiteBackend {
 public:
  std::string Kind() const override { return "process"; }
  absl::StatusOr<std::optional<std::vector<NodeState>>> Nodes() override { return std::nullopt; }
  absl::StatusOr<Allocs> Reserve(const std::string&, const std::map<std::string, uint32_t>&,
                                 const std::string&, const RankUser&, const std::string&) override {
    return Allocs{};
  }
  absl::StatusOr<std::vector<std::string>> RankCommand(
      const Allocs&, const std::string&, const std::string&,
      const std::vector<std::string>& command,
      std::vector<std::pair<std::string, std::string>>*) const override {
    return command;
  }
  void Release(const Allocs&) override {}
};

class SlurmBackend final : public SiteBackend {
 public:
  explicit SlurmBackend(SlurmCluster* cluster) : cluster_(cluster) {}
  std::string Kind() const override { return "slurm"; }

  absl::StatusOr<std::optional<std::vector<NodeState>>> Nodes() override {
    if (auto st = cluster_->Refresh(); !st.ok()) return st;
    const auto inventory = cluster_->InventoryNodes();
    std::vector<NodeState> out;
    for (const auto& sn : cluster_->nodes()) {
      if (sn.gpus == 0) continue;
      NodeState s;
      s.node.name = sn.name;
      s.node.address = sn.addr;
      s.node.gpus = sn.gpus;
      s.node.gpu_model = sn.gres_type;
      for (const auto& inv : inventory) {
        if (inv.name == sn.name) s.node.gpu_model = inv.gpu_model;
      }
      s.usable = sn.usable();
      s.allocated = sn.used;
      out.push_back(std::move(s));
    }
    return out;
  }

  absl::StatusOr<Allocs> Reserve(const std::string& name,
                                 const std::map<std::string, uint32_t>& gpus,
                                 const std::string& tenant, const RankUser& user,
                                 const std::string&) override {
    // One allocation per node, all at once: the coordinator's deadline is short.
    std::vector<std::pair<std::string, std::future<absl::StatusOr<uint64_t>>>> pending;
    for (const auto& [node, n] : gpus) {
      pending.emplace_back(node, std::async(std::launch::async, [this, &name, &tenant, &user,
                                                                 node = node, n = n] {
        return cluster_->Allocate(name, node, n, tenant, user.uid, user.gid, user.switch_user);
      }));
    }
    Allocs allocs;
    absl::Status failed;
    for (auto& [node, f] : pending) {
      auto id = f.get();
      if (id.ok()) {
        allocs[node] = {*id, gpus.at(node)};
      } else if (failed.ok()) {
        failed = id.status();
      }
    }
    if (!failed.ok()) {
      Release(allocs);
      return failed;
    }
    return allocs;
  }

  absl::StatusOr<std::vector<std::string>> RankCommand(
      const Allocs& allocs, const std::string& node, const std::string& name,
      const std::vector<std::string>& command,
      std::vector<std::pair<std::string, std::string>>* env) const override {
    auto a = allocs.find(node);
    if (a == allocs.end()) {
      return absl::FailedPreconditionError(StrCat("no Slurm allocation on node ", node));
    }
    // A one-GPU step of the node's allocation: Slurm binds the GPU
    // (CUDA_VISIBLE_DEVICES) and sets SLURM_JOB_ID.
    std::erase_if(*env, [](const auto& kv) { return kv.first == "CUDA_VISIBLE_DEVICES"; });
    for (const auto& kv : cluster_->ClientEnv()) env->push_back(kv);
    return cluster_->StepArgv(a->second.first, node, name, command);
  }

  void Release(const Allocs& allocs) override {
    for (const auto& [node, alloc] : allocs) {
      if (auto st = cluster_->Cancel(alloc.first); !st.ok()) {
        spdlog::warn("slurm: cancelling allocation {}: {}", alloc.first, std::string(st.message()));
      }
    }
  }

 private:
  SlurmCluster* cluster_;
};

class KubeBackend final : public SiteBackend {
 public:
  explicit KubeBackend(KubeCluster* cluster) : cluster_(cluster) {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) attach_ = (self.parent_path() / "fedgate-kube-rank").string();
    if (!attach_.empty() && ::access(attach_.c_str(), X_OK) != 0) attach_.clear();
  }
  std::string Kind() const override { return "kubernetes"; }

  absl::StatusOr<std::optional<std::vector<NodeState>>> Nodes() override {
    if (auto st = cluster_->Refresh(); !st.ok()) return st;
    std::vector<NodeState> out;
    for (const auto& k : cluster_->nodes()) {
      NodeState s;
      s.node.name = k.name;
      s.node.address = k.address;
      s.node.gpus = k.gpus;
      s.node.gpu_model = k.model;
      s.usable = k.usable;
      s.allocated = k.requested;  // every namespace's pods, ours included
      out.push_back(std::move(s));
    }
    return out;
  }

  absl::StatusOr<Allocs> Reserve(const std::string& name,
                                 const std::map<std::string, uint32_t>& gpus,
                                 const std::string& tenant, const RankUser&,
                                 const std::string& image) override {
    // Within the coordinator's Prepare deadline: kubelets admit in well
    // under a second.
    auto id = cluster_->ReserveHold(name, gpus, tenant, std::chrono::seconds(3), image);
    if (!id.ok()) return id.status();
    Allocs allocs;
    for (const auto& [node, n] : gpus) allocs[node] = {*id, n};
    return allocs;
  }

  // Each rank is its container in the hold's pod on `node`, followed by
  // fedgate-kube-rank under the shim: it writes the rank's environment into
  // the pod's annotations at the commit, streams the container's log, stops it with the grace period
  // and exits with its code (so logs, stop and re-attach are the shim's).
  absl::StatusOr<std::vector<std::string>> RankCommand(
      const Allocs& allocs, const std::string& node, const std::string&,
      const std::vector<std::string>& command,
      std::vector<std::pair<std::string, std::string>>* env) const override {
    auto a = allocs.find(node);
    if (a == allocs.end()) {
      return absl::FailedPreconditionError(StrCat("no Kubernetes hold on node ", node));
    }
    if (attach_.empty()) {
      return absl::FailedPreconditionError("fedgate-kube-rank is not beside fedgate");
    }
    std::string local = "0";
    for (const auto& [k, v] : *env) {
      if (k == "LOCAL_RANK") local = v;
    }
    // The device plugin gives each container its one GPU: device 0 there.
    for (auto& [k, v] : *env) {
      if (k == "CUDA_VISIBLE_DEVICES") v = "0";
    }
    for (auto& kv : cluster_->AttachEnv()) env->push_back(std::move(kv));
    std::vector<std::string> argv = {attach_, "--hold", kube::HoldId(a->second.first), "--node",
                                     cluster_->KubeNodeOf(node).first,
                                     "--container", "rank-" + local, "--"};
    argv.insert(argv.end(), command.begin(), command.end());
    return argv;
  }

  void Release(const Allocs& allocs) override {
    if (allocs.empty()) return;
    (void)cluster_->ReleaseHold(allocs.begin()->second.first);
  }

 private:
  KubeCluster* cluster_;
  std::string attach_;  // fedgate-kube-rank beside fedgate
};

}  // namespace

std::unique_ptr<SiteBackend> MakeProcessBackend() { return std::make_unique<ProcessBackend>(); }
std::unique_ptr<SiteBackend> MakeSlurmBackend(SlurmCluster* cluster) {
  return std::make_unique<SlurmBackend>(cluster);
}
std::unique_ptr<SiteBackend> MakeKubeBackend(KubeCluster* cluster) {
  return std::make_unique<KubeBackend>(cluster);
}

}  // namespace fedgate::gateway
