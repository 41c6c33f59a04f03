#include "tests/support/fake_kube/fake_kube_store.h"

#include <ctime>

#include "base/str_cat.h"

namespace fedgate::testing::fakekube {

using namespace gateway::kube;  // NOLINT: the JSON helpers

std::string NowText() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

std::string Kind(const std::string& resource) {
  if (resource == "pods") return "pod";
  if (resource == "nodes") return "node";
  if (resource == "namespaces") return "namespace";
  if (resource == "configmaps") return "configmap";
  return resource;
}

ApiFailure NotFound(const Key& key) {
  return {404, "NotFound", StrCat(key.resource, " \"", key.name, "\" not found")};
}
}  // namespace

void Store::RecordLocked(const std::string& type, const Key& key, const Json& obj) {
  events_.push_back({rv_, type, key, obj});
  while (events_.size() > history_) {
    oldest_ = events_.front().rv + 1;
    events_.pop_front();
  }
  changed_.notify_all();
}

std::optional<ApiFailure> Store::Create(const Key& key, Json* obj) {
  std::lock_guard lock(mu_);
  if (objects_.contains(key)) {
    return ApiFailure{409, "AlreadyExists", StrCat(key.resource, " \"", key.name, "\" already exists")};
  }
  if (!key.ns.empty() && !objects_.contains(Key{"namespaces", "", key.ns})) {
    return ApiFailure{404, "NotFound", StrCat("namespaces \"", key.ns, "\" not found")};
  }
  ++rv_;
  *Mutable(obj, {"metadata", "name"}) = Str(key.name);
  if (!key.ns.empty()) *Mutable(obj, {"metadata", "namespace"}) = Str(key.ns);
  *Mutable(obj, {"metadata", "resourceVersion"}) = Str(std::to_string(rv_));
  *Mutable(obj, {"metadata", "uid"}) = Str(StrCat("fake-uid-", Kind(key.resource), "-", ++uid_));
  *Mutable(obj, {"metadata", "creationTimestamp"}) = Str(NowText());
  objects_[key] = *obj;
  RecordLocked("ADDED", key, *obj);
  return std::nullopt;
}

std::optional<Json> Store::Get(const Key& key) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> Store::List(const std::string& resource, const std::string& ns,
                              uint64_t* list_rv) const {
  std::lock_guard lock(mu_);
  std::vector<Json> out;
  for (const auto& [k, v] : objects_) {
    if (k.resource == resource && (ns.empty() || k.ns == ns)) out.push_back(v);
  }
  *list_rv = rv_;
  return out;
}

std::optional<ApiFailure> Store::Replace(const Key& key, Json* obj, const std::string& expect_rv) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return NotFound(key);
  if (!expect_rv.empty() && expect_rv != FindString(it->second, {"metadata", "resourceVersion"})) {
    return ApiFailure{409, "Conflict",
                      StrCat("Operation cannot be fulfilled on ", key.resource, " \"", key.name,
                             "\": the object has been modified; please apply your changes to the "
                             "latest version and try again")};
  }
  ++rv_;
  // Identity fields stay what the server gave.
  for (const char* f : {"uid", "creationTimestamp", "name", "namespace"}) {
    if (const Json* v = Find(it->second, {"metadata", f})) *Mutable(obj, {"metadata", f}) = *v;
  }
  *Mutable(obj, {"metadata", "resourceVersion"}) = Str(std::to_string(rv_));
  it->second = *obj;
  RecordLocked("MODIFIED", key, *obj);
  return std::nullopt;
}

std::optional<ApiFailure> Store::Modify(const Key& key, const std::function<void(Json*)>& change,
                                        Json* out) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return NotFound(key);
  Json next = it->second;
  change(&next);
  if (Equal(next, it->second)) {  // no-op writes keep the version, as the server does
    if (out) *out = next;
    return std::nullopt;
  }
  ++rv_;
  *Mutable(&next, {"metadata", "resourceVersion"}) = Str(std::to_string(rv_));
  it->second = next;
  RecordLocked("MODIFIED", key, next);
  if (out) *out = next;
  return std::nullopt;
}

std::optional<ApiFailure> Store::Remove(const Key& key, Json* out) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return NotFound(key);
  ++rv_;
  Json obj = it->second;
  *Mutable(&obj, {"metadata", "resourceVersion"}) = Str(std::to_string(rv_));
  objects_.erase(it);
  RecordLocked("DELETED", key, obj);
  if (out) *out = obj;
  return std::nullopt;
}

std::vector<std::pair<Key, Json>> Store::Snapshot(const std::string& resource) const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<Key, Json>> out;
  for (const auto& [k, v] : objects_) {
    if (k.resource == resource) out.emplace_back(k, v);
  }
  return out;
}

std::optional<std::vector<Event>> Store::WaitEvents(
    uint64_t since, const std::function<bool(const Event&)>& match,
    std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mu_);
  for (;;) {
    if (since + 1 < oldest_) return std::nullopt;
    std::vector<Event> out;
    for (const auto& e : events_) {
      if (e.rv > since && match(e)) out.push_back(e);
    }
    if (!out.empty()) return out;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) return out;
  }
}

uint64_t Store::Version() const {
  std::lock_guard lock(mu_);
  return rv_;
}

void Store::Compact() {
  std::lock_guard lock(mu_);
  events_.clear();
  oldest_ = rv_ + 1;
  changed_.notify_all();
}

}  // namespace fedgate::testing::fakekube
