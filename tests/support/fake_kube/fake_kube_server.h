// fake-kube-apiserver: a stand-in for a Kubernetes API server where none
// can run (no API server is packaged for Debian 12). It speaks the core v1
// REST paths a client uses, over HTTPS with a self-signed certificate and a
// bearer token: create, get, list, watch, update, merge patch, delete and
// the status subresource of nodes, namespaces, pods, configmaps and
// resourcequotas; pods/log; resourceVersion on everything; the real status
// codes and Status objects. Pods bound to a node run as local processes
// (FakeKubelet). Namespaces "default" and "kube-system" exist from the start.
// What it does not do: no scheduler (a pod without spec.nodeName stays
// Pending), no strategic-merge list semantics (lists are replaced), no
// JSON patch, no admission webhooks, no RBAC beyond the one token.
// Tests also drive /fake/* (faults, compaction, request counts).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tests/support/fake_kube/fake_kube_store.h"

namespace fedgate::testing::fakekube {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";
  std::string token;
  std::string log_dir;  // containers' output
  uid_t uid = 0;        // containers run as (when the server runs as root)
  gid_t gid = 0;
};

class FakeKubeServer {
 public:
  static absl::StatusOr<std::unique_ptr<FakeKubeServer>> Start(ServerOptions options);
  ~FakeKubeServer();
  int port() const;
  const std::string& ca_pem() const;  // its self-signed certificate
  Store& store();

 private:
  struct Impl;
  explicit FakeKubeServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedgate::testing::fakekube
