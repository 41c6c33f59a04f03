// The object store of the fake Kubernetes API server: objects by
// (resource, namespace, name) with one resourceVersion counter, and a
// bounded history of changes that watches replay from a resourceVersion
// (older than the history: 410 Gone, "Expired", as a real server answers
// once etcd has compacted). Everything is under one mutex; watchers wait on
// a condition variable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gateway/kube/kube_json.h"

namespace fedgate::testing::fakekube {

using gateway::kube::Json;

struct Key {
  std::string resource;  // "pods", "nodes", ...
  std::string ns;        // "" for cluster-scoped resources
  std::string name;
  auto operator<=>(const Key&) const = default;
};

struct Event {
  uint64_t rv;
  std::string type;  // ADDED, MODIFIED, DELETED
  Key key;
  Json object;
};

// A failure of a store call as the HTTP answer it becomes.
struct ApiFailure {
  int code;
  std::string reason;  // NotFound, AlreadyExists, Conflict, Invalid, Forbidden, Expired
  std::string message;
};

// Now as Kubernetes writes times (RFC 3339, seconds, UTC).
std::string NowText();

class Store {
 public:
  explicit Store(size_t history = 2000) : history_(history) {}

  // Adds a new object (metadata.resourceVersion, uid, creationTimestamp set).
  std::optional<ApiFailure> Create(const Key& key, Json* obj);
  std::optional<Json> Get(const Key& key) const;
  // Objects of `resource` in `ns` ("" = every namespace), and the list's version.
  std::vector<Json> List(const std::string& resource, const std::string& ns,
                         uint64_t* list_rv) const;
  // Replaces the object; `expect_rv` (non-empty) must be the stored one (409 otherwise).
  std::optional<ApiFailure> Replace(const Key& key, Json* obj, const std::string& expect_rv);
  // Read-modify-write under the lock: `change` edits the stored object.
  std::optional<ApiFailure> Modify(const Key& key, const std::function<void(Json*)>& change,
                                   Json* out);
  std::optional<ApiFailure> Remove(const Key& key, Json* out);
  // Every object, atomically, for the fake kubelet's admission.
  std::vector<std::pair<Key, Json>> Snapshot(const std::string& resource) const;

  // Changes after `since` matching `match`, waiting up to `deadline` for the
  // first one. nullopt: `since` is older than the kept history (410).
  std::optional<std::vector<Event>> WaitEvents(uint64_t since,
                                               const std::function<bool(const Event&)>& match,
                                               std::chrono::steady_clock::time_point deadline) const;
  uint64_t Version() const;
  // Forgets the history (as an etcd compaction does): older watches get 410.
  void Compact();

 private:
  void RecordLocked(const std::string& type, const Key& key, const Json& obj);
  size_t history_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::map<Key, Json> objects_;
  std::deque<Event> events_;
  uint64_t rv_ = 1;
  uint64_t oldest_ = 1;  // watches from before this get 410
  uint64_t uid_ = 0;
};

}  // namespace fedgate::testing::fakekube
