#include "tests/support/fake_kube/fake_kubelet.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/str_cat.h"
#include "gateway/kube/kube_nodes.h"

namespace fedgate::testing::fakekube {

using namespace gateway::kube;  // NOLINT: the JSON helpers

namespace {
std::vector<Json> Containers(const Json& pod, const char* field) {
  std::vector<Json> out;
  if (const Json* cs = Find(pod, {"spec", field}); cs && cs->has_list_value()) {
    for (const auto& c : cs->list_value().values()) out.push_back(c);
  }
  return out;
}

Json Status(const std::string& name, const std::string& image, const Json& state) {
  Json s = Obj();
  *Mutable(&s, {"name"}) = Str(name);
  *Mutable(&s, {"image"}) = Str(image);
  *Mutable(&s, {"imageID"}) = Str("fake-kube://" + image);
  *Mutable(&s, {"restartCount"}) = Num(0);
  *Mutable(&s, {"ready"}) = Bool(Find(state, {"running"}) != nullptr);
  *Mutable(&s, {"state"}) = state;
  return s;
}

Json Terminated(int code, const std::string& started) {
  Json st = Obj();
  *Mutable(&st, {"terminated", "exitCode"}) = Num(code);
  *Mutable(&st, {"terminated", "reason"}) = Str(code == 0 ? "Completed" : "Error");
  *Mutable(&st, {"terminated", "startedAt"}) = Str(started);
  *Mutable(&st, {"terminated", "finishedAt"}) = Str(NowText());
  return st;
}
}  // namespace

FakeKubelet::FakeKubelet(Store* store, std::string log_dir, uid_t uid, gid_t gid)
    : store_(store), log_dir_(std::move(log_dir)), uid_(uid), gid_(gid) {
  std::filesystem::create_directories(log_dir_);
}

FakeKubelet::~FakeKubelet() {
  closing_ = true;
  {
    std::lock_guard lock(mu_);
    for (auto& [k, pids] : pids_) {
      for (pid_t p : pids) ::kill(-p, SIGKILL);
    }
  }
  for (auto& t : threads_) t.join();
}

std::string FakeKubelet::LogPath(const Key& pod, const std::string& container) const {
  return StrCat(log_dir_, "/", pod.ns, "_", pod.name, "_", container, ".log");
}

bool FakeKubelet::Running(const Key& pod) const {
  std::lock_guard lock(mu_);
  return running_.contains(pod);
}

void FakeKubelet::Start(const Key& pod) {
  std::lock_guard lock(mu_);
  running_.insert(pod);
  threads_.emplace_back([this, pod] { Run(pod); });
}

namespace {

// The device plugins' resources (nvidia.com/gpu, nvidia.com/mig-…) a pod
// asks for, and how many of each.
std::map<std::string, uint64_t> DeviceRequests(const Json& pod) {
  std::map<std::string, uint64_t> out;
  for (const char* f : {"initContainers", "containers"}) {
    const Json* cs = Find(pod, {"spec", f});
    if (cs == nullptr || !cs->has_list_value()) continue;
    for (const auto& c : cs->list_value().values()) {
      for (const char* kind : {"requests", "limits"}) {
        const Json* r = Find(c, {"resources", kind});
        if (r == nullptr || !r->has_struct_value()) continue;
        for (const auto& [name, q] : r->struct_value().fields()) {
          if (name.rfind("nvidia.com/", 0) == 0) out[name] = 0;
        }
      }
    }
  }
  for (auto& [name, want] : out) want = PodRequest(pod, name);
  return out;
}

}  // namespace

std::string FakeKubelet::Admit(const Key& pod, const Json& obj) {
  const std::string node = FindString(obj, {"spec", "nodeName"});
  auto n = store_->Get(Key{"nodes", "", node});
  if (!n) return StrCat("NodeNotFound: node \"", node, "\" does not exist");
  const auto wants = DeviceRequests(obj);
  std::lock_guard lock(mu_);
  for (const auto& [resource, want] : wants) {
    const auto cap = QuantityCount(Find(*n, {"status", "allocatable", resource})).value_or(0);
    const uint64_t used = node_used_[{node, resource}];
    if (want > 0 && used + want > static_cast<uint64_t>(cap)) {
      return StrCat("OutOf", resource, ": Node didn't have enough resource: ", resource, ", requested: ",
                    want, ", used: ", used, ", capacity: ", cap);
    }
  }
  for (const auto& [resource, want] : wants) node_used_[{node, resource}] += want;
  (void)pod;
  return "";
}

std::string FakeKubelet::VolumeDir(const Key& pod, const std::string& volume) const {
  return StrCat(log_dir_, "/volumes/", pod.ns, "_", pod.name, "/", volume);
}

namespace {
// Writes `text` to `path` whole (as the kubelet's atomic writer swaps files)
// when it differs.
void WriteIfChanged(const std::string& path, const std::string& text) {
  std::ifstream in(path, std::ios::binary);
  std::string now((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in && now == text) return;
  std::error_code ec;
  std::ofstream(path + ".tmp", std::ios::binary) << text;
  std::filesystem::permissions(path + ".tmp", std::filesystem::perms(0644), ec);
  std::filesystem::rename(path + ".tmp", path, ec);
}

// A map as the downward API writes it: key="value" lines, sorted, values
// quoted like Go's %q.
std::string KeyValueLines(const Json* map) {
  std::map<std::string, std::string> sorted;
  if (map && map->has_struct_value()) {
    for (const auto& [k, v] : map->struct_value().fields()) sorted[k] = v.string_value();
  }
  std::string out;
  for (const auto& [k, v] : sorted) {
    out += k + "=\"";
    for (char c : v) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += "\"\n";
  }
  return out;
}

// The value of a fieldRef (metadata.name, metadata.namespace, spec.nodeName,
// status.podIP, metadata.annotations['k'], metadata.labels['k']).
std::string FieldValue(const Json& pod, const std::string& path) {
  for (const char* map : {"annotations", "labels"}) {
    const std::string prefix = std::string("metadata.") + map + "['";
    if (path.rfind(prefix, 0) == 0 && path.size() > prefix.size() + 2) {
      return FindString(pod, {"metadata", map, path.substr(prefix.size(), path.size() - prefix.size() - 2)});
    }
  }
  if (path == "metadata.name") return FindString(pod, {"metadata", "name"});
  if (path == "metadata.namespace") return FindString(pod, {"metadata", "namespace"});
  if (path == "spec.nodeName") return FindString(pod, {"spec", "nodeName"});
  if (path == "status.podIP") return FindString(pod, {"status", "podIP"});
  return "";
}
}  // namespace

void FakeKubelet::SyncVolumes(const Key& pod) {
  auto obj = store_->Get(pod);
  if (!obj) return;
  const Json* vols = Find(*obj, {"spec", "volumes"});
  if (!vols || !vols->has_list_value()) return;
  for (const auto& v : vols->list_value().values()) {
    const std::string dir = VolumeDir(pod, FindString(v, {"name"}));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::filesystem::permissions(dir, std::filesystem::perms(0755), ec);
    if (const std::string cm = FindString(v, {"configMap", "name"}); !cm.empty()) {
      auto data = store_->Get(Key{"configmaps", pod.ns, cm});
      const Json* d = data ? Find(*data, {"data"}) : nullptr;
      if (!d || !d->has_struct_value()) continue;
      for (const auto& [k, val] : d->struct_value().fields()) WriteIfChanged(dir + "/" + k, val.string_value());
    }
    if (const Json* items = Find(v, {"downwardAPI", "items"}); items && items->has_list_value()) {
      for (const auto& item : items->list_value().values()) {
        const std::string field = FindString(item, {"fieldRef", "fieldPath"});
        const std::string text = field == "metadata.annotations" ? KeyValueLines(Find(*obj, {"metadata", "annotations"}))
                                 : field == "metadata.labels"    ? KeyValueLines(Find(*obj, {"metadata", "labels"}))
                                                                 : FieldValue(*obj, field);
        WriteIfChanged(dir + "/" + FindString(item, {"path"}), text);
      }
    }
  }
}

pid_t FakeKubelet::Spawn(const Key& pod, const Json& c, const std::string& log) {
  std::vector<std::string> argv;
  for (const char* f : {"command", "args"}) {
    if (const Json* l = Find(c, {f}); l && l->has_list_value()) {
      for (const auto& a : l->list_value().values()) argv.push_back(a.string_value());
    }
  }
  if (const Json* mounts = Find(c, {"volumeMounts"}); mounts && mounts->has_list_value()) {
    for (const auto& m : mounts->list_value().values()) {
      const std::string from = FindString(m, {"mountPath"});
      const std::string to = VolumeDir(pod, FindString(m, {"name"}));
      if (from.empty()) continue;
      for (auto& a : argv) {
        for (size_t at = 0; (at = a.find(from, at)) != std::string::npos; at += to.size()) {
          a.replace(at, from.size(), to);
        }
      }
    }
  }
  if (argv.empty()) argv = {"sleep", "infinity"};  // no image entrypoint here: a pause container
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOSTNAME=" + pod.name};
  if (const Json* l = Find(c, {"env"}); l && l->has_list_value()) {
    // valueFrom is read now, when the container starts, from the pod as it
    // is now: what the kubelet does too.
    const auto now = store_->Get(pod);
    for (const auto& e : l->list_value().values()) {
      const std::string field = FindString(e, {"valueFrom", "fieldRef", "fieldPath"});
      env.push_back(StrCat(FindString(e, {"name"}), "=",
                           field.empty() ? FindString(e, {"value"}) : now ? FieldValue(*now, field) : ""));
    }
  }
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0 && ::getuid() == 0) (void)::fchown(fd, uid_, gid_);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (::getuid() == 0 && uid_ != 0) {
      if (::setgid(gid_) != 0 || ::setuid(uid_) != 0) _exit(126);
    }
    if (::chdir("/tmp") != 0) _exit(126);
    std::vector<char*> a, e;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    for (auto& s : env) e.push_back(s.data());
    e.push_back(nullptr);
    ::execvpe(a[0], a.data(), e.data());
    _exit(127);
  }
  if (fd >= 0) ::close(fd);
  return pid;
}

void FakeKubelet::Run(Key pod) {
  auto obj = store_->Get(pod);
  if (!obj) return;
  const auto wants = DeviceRequests(*obj);
  const std::string node = FindString(*obj, {"spec", "nodeName"});
  std::map<std::string, std::string> images;
  for (const char* f : {"initContainers", "containers"}) {
    for (const auto& c : Containers(*obj, f)) images[FindString(c, {"name"})] = FindString(c, {"image"});
  }
  const auto set_status = [&](const std::function<void(Json*)>& f) {
    (void)store_->Modify(pod, [&](Json* o) { f(Mutable(o, {"status"})); }, nullptr);
  };
  if (std::string why = Admit(pod, *obj); !why.empty()) {
    const auto colon = why.find(':');
    set_status([&](Json* s) {
      *Mutable(s, {"phase"}) = Str("Failed");
      *Mutable(s, {"reason"}) = Str(why.substr(0, colon));
      *Mutable(s, {"message"}) = Str(why.substr(colon + 2));
    });
    std::lock_guard lock(mu_);
    running_.erase(pod);
    return;
  }
  const std::string started = NowText();
  set_status([&](Json* s) {
    *Mutable(s, {"hostIP"}) = Str("127.0.0.1");
    *Mutable(s, {"podIP"}) = Str("127.0.0.1");
    *Mutable(s, {"startTime"}) = Str(started);
  });
  bool failed = false;
  SyncVolumes(pod);
  const auto stopping = [&] {
    std::lock_guard lock(mu_);
    return closing_ || stopping_.contains(pod);
  };
  // Init containers one after another; a failure fails the pod.
  Json init_statuses = List();
  for (const auto& c : Containers(*obj, "initContainers")) {
    if (stopping()) break;
    const std::string name = FindString(c, {"name"});
    const pid_t pid = Spawn(pod, c, LogPath(pod, name));
    {
      std::lock_guard lock(mu_);
      pids_[pod] = {pid};
    }
    Json running = Obj();
    *Mutable(&running, {"running", "startedAt"}) = Str(NowText());
    Json now = init_statuses;
    *Append(&now) = Status(name, images[name], running);
    set_status([&](Json* s) {
      *Mutable(s, {"phase"}) = Str("Pending");
      *Mutable(s, {"initContainerStatuses"}) = now;
    });
    int ws = 0;
    while (::waitpid(pid, &ws, WNOHANG) != pid) {
      SyncVolumes(pod);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    *Append(&init_statuses) = Status(name, images[name], Terminated(code, started));
    set_status([&](Json* s) { *Mutable(s, {"initContainerStatuses"}) = init_statuses; });
    if (code != 0) {
      failed = true;
      break;
    }
  }
  std::vector<std::pair<std::string, pid_t>> procs;
  if (!failed && !stopping()) {
    Json statuses = List();
    for (const auto& c : Containers(*obj, "containers")) {
      const std::string name = FindString(c, {"name"});
      procs.emplace_back(name, Spawn(pod, c, LogPath(pod, name)));
      Json running = Obj();
      *Mutable(&running, {"running", "startedAt"}) = Str(NowText());
      *Append(&statuses) = Status(name, images[name], running);
    }
    {
      std::lock_guard lock(mu_);
      auto& pids = pids_[pod];
      pids.clear();
      for (const auto& [n, p] : procs) pids.push_back(p);
    }
    if (stopping()) {  // deleted while they started: Stop saw no processes yet
      for (const auto& [n, p] : procs) ::kill(-p, SIGTERM);
    }
    set_status([&](Json* s) {
      *Mutable(s, {"phase"}) = Str("Running");
      *Mutable(s, {"containerStatuses"}) = statuses;
    });
    // Each container's end goes into the status as it happens.
    std::map<pid_t, int> codes;
    while (codes.size() < procs.size()) {
      int ws = 0;
      pid_t done = -1;
      for (const auto& [n, p] : procs) {
        if (codes.contains(p)) continue;
        if (::waitpid(p, &ws, WNOHANG) == p) {
          done = p;
          break;
        }
      }
      if (done < 0) {
        SyncVolumes(pod);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      codes[done] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
      Json now = List();
      for (const auto& [n, p] : procs) {
        Json running = Obj();
        *Mutable(&running, {"running", "startedAt"}) = Str(started);
        *Append(&now) = Status(n, images[n], codes.contains(p) ? Terminated(codes[p], started) : running);
      }
      set_status([&](Json* s) { *Mutable(s, {"containerStatuses"}) = now; });
    }
    for (const auto& [p, code] : codes) failed = failed || code != 0;
  }
  {
    std::lock_guard lock(mu_);
    pids_.erase(pod);
    for (const auto& [resource, want] : wants) {
      auto& used = node_used_[{node, resource}];
      used -= std::min(used, want);
    }
    running_.erase(pod);
  }
  set_status([&](Json* s) { *Mutable(s, {"phase"}) = Str(failed ? "Failed" : "Succeeded"); });
  bool deleting = false;
  {
    std::lock_guard lock(mu_);
    deleting = stopping_.erase(pod) > 0;
  }
  if (deleting) (void)store_->Remove(pod, nullptr);
}

void FakeKubelet::Stop(const Key& pod, int64_t grace_s) {
  std::vector<pid_t> pids;
  {
    std::lock_guard lock(mu_);
    if (!running_.contains(pod)) {
      (void)store_->Remove(pod, nullptr);
      return;
    }
    stopping_[pod] = grace_s;
    if (auto it = pids_.find(pod); it != pids_.end()) pids = it->second;
  }
  for (pid_t p : pids) ::kill(-p, SIGTERM);
  std::lock_guard lock(mu_);
  threads_.emplace_back([this, pod, pids, grace_s] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(grace_s);
    while (std::chrono::steady_clock::now() < until && !closing_) {
      {
        std::lock_guard l(mu_);
        if (!running_.contains(pod)) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (pid_t p : pids) ::kill(-p, SIGKILL);
  });
}

}  // namespace fedgate::testing::fakekube
