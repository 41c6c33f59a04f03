// The fake API server's kubelet: every node's, in one. A pod bound to a node
// (spec.nodeName) is admitted against the node's allocatable nvidia.com/gpu
// like a real kubelet (over: the pod fails, reason OutOfnvidia.com/gpu),
// then its init containers and containers run as local processes (the
// image is not pulled: `command` + `args` run on this host, as --run-as),
// their output kept per container for pods/log, their exit codes in the
// pod's status. configMap and downwardAPI volumes are folders of files kept
// up to date; env valueFrom fieldRef is read when a container starts. Deleting a pod sends SIGTERM, SIGKILL after the grace
// period, and removes it once its processes are gone.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fake_kube/fake_kube_store.h"

namespace fedgate::testing::fakekube {

class FakeKubelet {
 public:
  FakeKubelet(Store* store, std::string log_dir, uid_t uid, gid_t gid);
  ~FakeKubelet();

  // A pod was created bound to a node: admit it and start it.
  void Start(const Key& pod);
  // The pod is being deleted with `grace_s`: stop its processes, then remove it.
  void Stop(const Key& pod, int64_t grace_s);
  // Where a container's output is kept ("" when it never ran).
  std::string LogPath(const Key& pod, const std::string& container) const;
  bool Running(const Key& pod) const;

 private:
  void Run(Key pod);
  std::string Admit(const Key& pod, const Json& obj);  // "" = admitted, else why not
  pid_t Spawn(const Key& pod, const Json& container, const std::string& log);
  // configMap and downwardAPI volumes as files (refreshed while the pod
  // runs, as a kubelet's sync does); a container's mountPath in its command
  // and args is rewritten to the volume's folder (no mount namespaces).
  void SyncVolumes(const Key& pod);
  std::string VolumeDir(const Key& pod, const std::string& volume) const;

  Store* store_;
  std::string log_dir_;
  uid_t uid_;
  gid_t gid_;
  mutable std::mutex mu_;
  // (node, nvidia.com/… resource) -> what admitted pods hold of it.
  std::map<std::pair<std::string, std::string>, uint64_t> node_used_;
  std::map<Key, std::vector<pid_t>> pids_;                // running processes per pod
  std::map<Key, int64_t> stopping_;                       // pods being deleted -> grace
  std::set<Key> running_;
  std::vector<std::thread> threads_;
  std::atomic<bool> closing_{false};
};

}  // namespace fedgate::testing::fakekube
