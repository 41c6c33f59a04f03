#include "gateway/exec/kube_site.h"

#include <spdlog/spdlog.h>

#include <random>
#include <set>
#include <thread>

#include "base/number.h"
#include "base/str_cat.h"
#include "federation/mig.h"
#include "gateway/kube/kube_objects.h"

namespace fedgate::gateway {

KubeCluster::KubeCluster(KubernetesConfig config, std::unique_ptr<kube::KubeClient> client,
                         std::string site)
    : config_(std::move(config)), client_(std::move(client)), site_(std::move(site)) {
  client_->SetObserver([this](const std::string& method, const std::string& code) {
    std::lock_guard lock(mu_);
    ++api_counts_[{method, code}];
  });
}

KubeCluster::~KubeCluster() { StopWatching(); }

std::map<std::pair<std::string, std::string>, int64_t> KubeCluster::ApiCounts() const {
  std::lock_guard lock(mu_);
  return api_counts_;
}

int64_t KubeCluster::Relists() const {
  std::lock_guard lock(mu_);
  return relists_;
}

void KubeCluster::StartWatching(std::function<void()> on_change) {
  on_change_ = std::move(on_change);
  std::string nodes = "/api/v1/nodes?watch=1&allowWatchBookmarks=false";
  if (!config_.node_selector.empty()) {
    nodes += "&labelSelector=" + kube::QueryEscape(kube::SelectorText(config_.node_selector));
  }
  watchers_.emplace_back([this, nodes] { WatchLoop("nodes", nodes); });
  watchers_.emplace_back([this] { WatchLoop("pods", "/api/v1/pods?watch=1"); });
}

void KubeCluster::StopWatching() {
  stop_watching_ = true;
  for (auto& t : watchers_) t.join();
  watchers_.clear();
}

void KubeCluster::WatchLoop(const std::string& what, const std::string& path) {
  int failures = 0;
  std::chrono::steady_clock::time_point told;
  while (!stop_watching_) {
    std::string rv;
    {
      std::lock_guard lock(mu_);
      rv = what == "pods" ? pods_rv_ : nodes_rv_;
    }
    if (rv.empty()) {  // not listed yet (or the server is failing): the refresh lists
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    bool gone = false, changed = false, failed = false;
    // Short windows: a change held back by the once-a-second limit below
    // is told at the window's end at the latest.
    auto r = client_->Watch(
        StrCat(path, "&resourceVersion=", rv, "&timeoutSeconds=5"), std::chrono::seconds(6),
        [&](const kube::Json& ev) {
          const std::string type = kube::FindString(ev, {"type"});
          if (type == "ERROR") {
            gone = kube::FindNumber(ev, {"object", "code"}).value_or(0) == 410;
            failed = !gone;  // another error: back off before watching again
            return false;
          }
          if (type == "ADDED" || type == "MODIFIED" || type == "DELETED") {
            std::lock_guard lock(mu_);
            (what == "pods" ? pods_rv_ : nodes_rv_) =
                kube::FindString(ev, {"object", "metadata", "resourceVersion"});
            changed = true;
          }
          // At most one refresh a second however busy the cluster is.
          const auto now = std::chrono::steady_clock::now();
          if (changed && now - told >= std::chrono::seconds(1) && on_change_ && !stop_watching_) {
            on_change_();
            told = now;
            changed = false;
          }
          return !stop_watching_;
        },
        &stop_watching_);
    if (!r.ok() && r.status().code() == absl::StatusCode::kOutOfRange) gone = true;  // HTTP 410
    if (gone) {
      // The version is compacted away: list again, then watch from the new one.
      spdlog::info("kubernetes: watch of {} from resourceVersion {}: 410 Gone; relisting", what, rv);
      {
        std::lock_guard lock(mu_);
        ++relists_;
        ++api_counts_[{"WATCH", "410"}];
        pods_rv_.clear();
        nodes_rv_.clear();
        retry_at_ = {};  // a relist now, not after a backoff
      }
      (void)Refresh();
      changed = true;
    }
    if (changed && on_change_ && !stop_watching_) {
      on_change_();
      told = std::chrono::steady_clock::now();
    }
    if ((!r.ok() && !gone) || failed) {
      failures = std::min(failures + 1, 6);
      for (int i = 0; i < (1 << failures) && !stop_watching_; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    } else {
      failures = 0;
    }
  }
}

absl::StatusOr<std::unique_ptr<KubeCluster>> KubeCluster::Connect(const KubernetesConfig& config,
                                                                  const std::string& site) {
  auto access = config.kubeconfig.empty() ? kube::InClusterAccess()
                                          : kube::LoadKubeconfig(config.kubeconfig);
  if (!access.ok()) return access.status();
  auto client = kube::KubeClient::Make(*access);
  if (!client.ok()) return client.status();
  return std::make_unique<KubeCluster>(config, std::move(*client), site);
}

absl::Status KubeCluster::Fetch(std::vector<kube::KubeNode>* out, std::string* retry_after,
                                std::string* nodes_rv, std::string* pods_rv) const {
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
  *nodes_rv = kube::FindString(*nodes, {"metadata", "resourceVersion"});
  *pods_rv = kube::FindString(*pods, {"metadata", "resourceVersion"});
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
  std::string retry_after, nodes_rv, pods_rv;
  // Outside the lock: it asks the server.
  const absl::Status st = Fetch(&fresh, &retry_after, &nodes_rv, &pods_rv);
  std::lock_guard lock(mu_);
  if (st.ok()) {
    // The watches start from the first list's versions; later lists leave
    // a running watch's version alone.
    if (pods_rv_.empty()) pods_rv_ = pods_rv;
    if (nodes_rv_.empty()) nodes_rv_ = nodes_rv;
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
    if (!k.mig_profile.empty()) {
      n.gpu_memory_gib = federation::MigProfileMemoryGib(k.mig_profile);
      n.labels["fedgate.io/mig-parent"] = k.kube_name;
    }
    out.push_back(std::move(n));
  }
  return out;
}

std::pair<std::string, std::string> KubeCluster::KubeNodeOf(const std::string& offered) const {
  std::lock_guard lock(mu_);
  for (const auto& k : nodes_) {
    if (k.name == offered) return {k.kube_name, k.resource};
  }
  return {offered, kube::kGpuResource};
}

std::string KubeCluster::NamespaceFor(const std::string& tenant) const {
  auto it = config_.tenant_namespaces.find(tenant);
  return it != config_.tenant_namespaces.end() ? it->second : config_.namespace_;
}

std::vector<std::pair<std::string, std::string>> KubeCluster::AttachEnv() const {
  const auto& a = client_->access();
  std::vector<std::pair<std::string, std::string>> env = {{"FEDGATE_KUBE_SERVER", a.server}};
  if (auto t = kube::CurrentToken(a); !t.empty()) env.emplace_back("FEDGATE_KUBE_TOKEN", t);
  if (a.insecure_skip_verify) env.emplace_back("FEDGATE_KUBE_INSECURE", "1");
  if (!a.ca_pem.empty()) env.emplace_back("FEDGATE_KUBE_CA", a.ca_pem);
  if (!a.cert_pem.empty()) {
    env.emplace_back("FEDGATE_KUBE_CERT", a.cert_pem);
    env.emplace_back("FEDGATE_KUBE_KEY", a.key_pem);
  }
  return env;
}

absl::Status KubeCluster::WaitAdmitted(const std::string& ns, const std::string& pod,
                                       std::chrono::steady_clock::time_point deadline) const {
  const std::string path = StrCat("/api/v1/namespaces/", ns, "/pods/", pod);
  for (;;) {
    auto p = kube::JsonOf(client_->Call("GET", path), StrCat("reading pod ", ns, "/", pod));
    if (!p.ok()) return p.status();
    const std::string phase = kube::FindString(*p, {"status", "phase"});
    if (phase == "Failed") {
      return absl::ResourceExhaustedError(
          StrCat("kubernetes: pod ", ns, "/", pod, " was refused on its node: ",
                 kube::FindString(*p, {"status", "reason"}), ": ",
                 kube::FindString(*p, {"status", "message"})));
    }
    // The kubelet sets startTime once it has admitted the pod (its GPUs
    // are then the pod's), before any image is pulled.
    if (phase == "Running" || !kube::FindString(*p, {"status", "startTime"}).empty()) {
      return absl::OkStatus();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          StrCat("kubernetes: pod ", ns, "/", pod, " was not admitted by its kubelet in time"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

absl::StatusOr<uint64_t> KubeCluster::ReserveHold(const std::string& name,
                                                  const std::map<std::string, uint32_t>& gpus,
                                                  const std::string& tenant,
                                                  std::chrono::milliseconds admit_timeout,
                                                  const std::string& image) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  kube::HoldSpec h;
  h.id = rng() & 0xffffffffffffULL;
  h.namespace_ = NamespaceFor(tenant);
  h.site = site_;
  h.image = image.empty() ? config_.image : image;
  h.host_network = config_.host_network;
  // name: fedgate-<job>-<attempt>
  std::string rest = name.rfind("fedgate-", 0) == 0 ? name.substr(8) : name;
  const auto dash = rest.rfind('-');
  h.job = dash == std::string::npos ? rest : rest.substr(0, dash);
  h.attempt = dash == std::string::npos ? "" : rest.substr(dash + 1);
  const std::string base = StrCat("/api/v1/namespaces/", h.namespace_);
  // 409 AlreadyExists: a hold of that id is there (ids are random): another id.
  absl::StatusOr<kube::Json> cm;
  for (int tries = 0; tries < 3; ++tries) {
    if (tries > 0) h.id = rng() & 0xffffffffffffULL;
    cm = kube::JsonOf(client_->Call("POST", base + "/configmaps", kube::ToJson(kube::SliceConfigMap(h))),
                      StrCat("kubernetes: creating ConfigMap ", h.namespace_, "/", kube::NamesOf(h.id).configmap));
    if (cm.ok() || cm.status().code() != absl::StatusCode::kAlreadyExists) break;
  }
  if (!cm.ok()) return cm.status();
  const auto names = kube::NamesOf(h.id);
  const std::string uid = kube::FindString(*cm, {"metadata", "uid"});
  absl::Status failed;
  std::vector<std::string> pods;
  size_t i = 0;
  for (const auto& [offered, n] : gpus) {
    const std::string pod = names.Pod(i);
    const auto [node, resource] = KubeNodeOf(offered);
    auto made = kube::JsonOf(
        client_->Call("POST", base + "/pods", kube::ToJson(kube::HoldPod(h, node, i, n, uid, resource))),
        StrCat("kubernetes: creating pod ", h.namespace_, "/", pod, " on node ", node));
    ++i;
    if (!made.ok()) {
      failed = made.status();
      break;
    }
    pods.push_back(pod);
  }
  const auto deadline = std::chrono::steady_clock::now() + admit_timeout;
  for (const auto& pod : pods) {
    if (!failed.ok()) break;
    failed = WaitAdmitted(h.namespace_, pod, deadline);
  }
  if (failed.ok()) {
    spdlog::info("kubernetes: hold {} for {}: {} pod(s) in {} admitted", names.id, name, pods.size(),
                 h.namespace_);
    return h.id;
  }
  (void)ReleaseHold(h.id);
  return failed;
}

absl::Status KubeCluster::ReleaseHold(uint64_t id) {
  const auto names = kube::NamesOf(id);
  std::set<std::string> namespaces = {config_.namespace_};
  for (const auto& [t, ns] : config_.tenant_namespaces) namespaces.insert(ns);
  absl::Status st;
  auto pods = kube::JsonOf(
      client_->Call("GET", StrCat("/api/v1/pods?labelSelector=", kube::QueryEscape(StrCat(kube::kHoldLabel, "=", names.id)))),
      "kubernetes: listing the pods of hold " + names.id);
  if (pods.ok()) {
    if (const auto* items = kube::Find(*pods, {"items"}); items && items->has_list_value()) {
      for (const auto& p : items->list_value().values()) {
        const std::string ns = kube::FindString(p, {"metadata", "namespace"});
        namespaces.insert(ns);
        auto r = client_->Call("DELETE", StrCat("/api/v1/namespaces/", ns, "/pods/",
                                                kube::FindString(p, {"metadata", "name"})));
        if (r.ok() && r->status != 404 && (r->status < 200 || r->status >= 300)) st = kube::ApiError(*r, "deleting a pod");
        if (!r.ok()) st = r.status();
      }
    }
  } else {
    st = pods.status();
  }
  // The ConfigMap owns the pods: deleting it also reaches pods not listed.
  for (const auto& ns : namespaces) {
    auto r = client_->Call("DELETE", StrCat("/api/v1/namespaces/", ns, "/configmaps/", names.configmap));
    if (!r.ok()) st = r.status();
  }
  if (!st.ok()) {
    spdlog::warn("kubernetes: releasing hold {}: {}", names.id, std::string(st.message()));
  }
  return st;
}

}  // namespace fedgate::gateway
