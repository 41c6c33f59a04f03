// How the gateway reaches its Kubernetes API server: the current context of
// a kubeconfig file, or the in-cluster service account.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace fedgate::gateway::kube {

struct KubeAccess {
  std::string server;      // https://host:port (no trailing slash)
  std::string ca_pem;      // "" with insecure_skip_verify, or the system's trust
  bool insecure_skip_verify = false;
  std::string cert_pem, key_pem;  // client certificate, when the user has one
  std::string token;              // bearer token ("" = none)
  std::string token_file;         // re-read on each request when set (rotated tokens)
  std::string source;             // where this came from, for messages
};

// Reads the current context of `path`: server, certificate-authority(-data),
// insecure-skip-tls-verify of its cluster; client-certificate(-data),
// client-key(-data), token, tokenFile of its user. Relative file names are
// resolved against the kubeconfig's folder. Errors name the file and field.
absl::StatusOr<KubeAccess> LoadKubeconfig(const std::string& path);
// The service account of the pod the gateway runs in
// (KUBERNETES_SERVICE_HOST/PORT, /var/run/secrets/kubernetes.io/serviceaccount).
absl::StatusOr<KubeAccess> InClusterAccess();
// The token to send now (token_file re-read where set).
std::string CurrentToken(const KubeAccess& a);

}  // namespace fedgate::gateway::kube
