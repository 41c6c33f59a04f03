// This site's nodes as the participant sees them: free GPUs, what the ad
// says besides, health, cordons, and the resource manager's view of them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>

#include "base/str_cat.h"
#include "federation/clock.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

bool PortTakenHere(const std::string& address, uint32_t port) {
  sockaddr_in sa{};
  if (inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1) return false;
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // TIME_WAIT is not "taken"
  // EADDRNOTAVAIL: not this host's address, nothing to learn here.
  const bool taken = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return taken;
}

federation::NodeExtras Participant::NodeExtras() {
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMs();
  federation::NodeExtras out;
  for (const auto& [key, s] : slices_) {
    if (!s.preemptible || s.stopping || s.state != SliceState::RUNNING ||
        now - s.started_at_ms < config_.preemption.min_runtime_ms) {
      continue;
    }
    for (const auto& [node, g] : s.gpus_by_node) out[node].preemptible += g;
  }
  for (const auto& [node, jobs] : ledger_.earmarks()) {
    for (const auto& [job, mark] : jobs) out[node].kept_for[job] = mark.first;
  }
  // Counted in the site's capacity view (fedctl capacity, the console).
  for (const auto& [node, bad] : ledger_.unhealthy()) {
    if (!bad.empty()) out[node].unhealthy = static_cast<uint32_t>(bad.size());
  }
  for (const auto& n : nodes_) {
    if (ledger_.cordoned(n.name)) out[n.name].cordoned = true;
  }
  return out;
}

std::map<std::string, uint32_t> Participant::FreeGpus() {
  std::lock_guard lock(mu_);
  std::map<std::string, uint32_t> out;
  for (const auto& n : nodes_) out[n.name] = ledger_.FreeGpus(n.name);
  return out;
}

const federation::Node* Participant::FindNodeLocked(const std::string& name) const {
  for (const auto& n : nodes_) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

v1::NodeView Participant::NodeLocked(const federation::Node& n) const {
  v1::NodeView v;
  v.set_name(n.name);
  v.set_gpu_model(n.gpu_model);
  v.set_gpus(n.gpus);
  v.set_free_gpus(ledger_.FreeGpus(n.name));
  if (auto u = ledger_.unhealthy().find(n.name); u != ledger_.unhealthy().end()) {
    for (uint32_t i : u->second) v.add_unhealthy_gpus(i);
  }
  v.set_cordoned(ledger_.cordoned(n.name));
  uint32_t running = 0;
  for (const auto& [key, h] : ledger_.holds()) {
    if (h.state == federation::HoldState::kPrepared) continue;
    for (const auto& g : h.gpus) running += g.node == n.name ? 1 : 0;
  }
  v.set_running_slices(running);
  return v;
}

std::vector<v1::NodeView> Participant::Nodes() {
  std::lock_guard lock(mu_);
  std::vector<v1::NodeView> out;
  for (const auto& n : nodes_) out.push_back(NodeLocked(n));
  return out;
}

namespace {
absl::Status NoSuchNode(const std::string& node) {
  return absl::NotFoundError(StrCat("no node \"", node.substr(0, 64), "\" at this site"));
}
}  // namespace

absl::StatusOr<v1::NodeView> Participant::SetCordoned(const std::string& node, bool cordoned) {
  {
    std::lock_guard lock(mu_);
    if (FindNodeLocked(node) == nullptr) return NoSuchNode(node);
  }
  // Durable first: a restart must not quietly put a cordoned node back to work.
  if (store_ != nullptr) {
    if (auto st = store_->PutKv(StrCat("cordon/", node), cordoned ? "1" : "0"); !st.ok()) return st;
  }
  v1::NodeView v;
  {
    std::lock_guard lock(mu_);
    const federation::Node* n = FindNodeLocked(node);
    if (n == nullptr) return NoSuchNode(node);  // the resource manager dropped it meanwhile
    ledger_.SetCordoned(node, cordoned);
    v = NodeLocked(*n);
  }
  spdlog::info("node {} {}", node, cordoned ? "cordoned: it takes no new work" : "uncordoned");
  if (on_change_) on_change_();
  return v;
}

absl::StatusOr<uint32_t> Participant::StopSlicesOn(const std::string& node, const std::string& why) {
  std::lock_guard lock(mu_);
  if (FindNodeLocked(node) == nullptr) return NoSuchNode(node);
  uint32_t stopped = 0;
  for (const auto& [key, h] : ledger_.holds()) {
    if (h.state != federation::HoldState::kCommitted) continue;
    bool here = false;
    for (const auto& g : h.gpus) here = here || g.node == node;
    auto s = slices_.find(key);
    if (!here || s == slices_.end() || s->second.stopping) continue;
    StopSliceLocked(&s->second, why);
    ++stopped;
  }
  return stopped;
}

void Participant::SetUnhealthy(const std::map<std::string, std::set<uint32_t>>& failed,
                               const std::map<std::pair<std::string, uint32_t>, std::string>& why) {
  {
    std::lock_guard lock(mu_);
    for (const auto& n : nodes_) {
      auto it = failed.find(n.name);
      const std::set<uint32_t> bad = it == failed.end() ? std::set<uint32_t>{} : it->second;
      for (const auto& key : ledger_.SetUnhealthy(n.name, bad)) {
        auto s = slices_.find(key);
        if (s == slices_.end()) continue;
        // Name the GPU(s) of this slice that failed, so the job's reason says why.
        std::string gpus;
        if (const auto* hold = ledger_.Find(key.first, key.second)) {
          for (const auto& g : hold->gpus) {
            for (uint32_t i : g.indices) {
              if (g.node != n.name || !bad.contains(i)) continue;
              auto w = why.find({g.node, i});
              gpus += StrCat(gpus.empty() ? "" : ", ", g.node, ":", i,
                             w == why.end() || w->second.empty() ? "" : StrCat(" (", w->second, ")"));
            }
          }
        }
        StopSliceLocked(&s->second, StrCat("GPU ", gpus, " failed its health check"));
      }
    }
    ledger_.CheckInvariants();
  }
  if (on_change_) on_change_();
}

void Participant::RefreshNodes() {
  auto asked = backend_->Nodes();  // outside the lock: it asks the resource manager
  if (asked.ok() && !*asked) return;
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    std::map<std::string, uint32_t> before, after, sizes;
    for (const auto& n : nodes_) before[n.name] = ledger_.FreeGpus(n.name);
    if (!asked.ok()) {
      // Its resource manager does not answer: offer nothing until it does
      // (a hold could not be made real anyway). Logged by the backend.
      for (const auto& n : nodes_) ledger_.SetExternal(n.name, n.gpus);
    }
    const std::vector<SiteBackend::NodeState> none;
    std::vector<federation::Node> list;
    for (const auto& st : asked.ok() ? **asked : none) {
      sizes[st.node.name] = st.node.gpus;
      list.push_back(st.node);
      // What the resource manager's own users hold: allocated GPUs not ours.
      uint32_t ours = 0;
      for (const auto& [key, allocs] : allocs_) {
        if (auto a = allocs.find(st.node.name); a != allocs.end()) ours += a->second.second;
      }
      ledger_.SetExternal(st.node.name, !st.usable            ? st.node.gpus
                                        : st.allocated > ours ? st.allocated - ours
                                                              : 0);
    }
    const auto same = [](const auto& a, const auto& b) {
      return a.name == b.name && a.gpus == b.gpus && a.address == b.address;
    };
    if (asked.ok() && (list.size() != nodes_.size() ||
                       !std::equal(list.begin(), list.end(), nodes_.begin(), same))) {
      nodes_ = std::move(list);
      ledger_.SetNodes(sizes);
    }
    for (const auto& n : nodes_) after[n.name] = ledger_.FreeGpus(n.name);
    changed = after != before;  // re-advertise only when what is offered moved
  }
  if (changed && on_change_) on_change_();
}

}  // namespace fedgate::gateway
