// Outgoing links to approved peers: one thread per peer dials over mTLS,
// handshakes, then pushes every ad the peer has not been sent, waking on every
// ad change and at least once per advertise interval (the heartbeat). Failures
// back off exponentially up to a cap.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/security/tls_certificate_provider.h>

#include "absl/base/thread_annotations.h"
#include <grpcpp/support/status.h>

namespace fedgate::gateway {

class GatewayCore;

// Capped exponential backoff: 100ms, 200ms, ... up to `cap_ms`.
int64_t BackoffMs(int failures, int64_t cap_ms);

class PeerLinks {
 public:
  // `provider`: the gateway's own certificate files, shared by its clients.
  PeerLinks(GatewayCore* core, std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider);
  ~PeerLinks();

  // Called (on the link's thread) each time a link to a peer comes up.
  void SetOnLinkUp(std::function<void(const std::string&)> fn) { on_up_ = std::move(fn); }
  // Starts links for newly approved peers and stops links of removed ones.
  void Reconcile();
  // Gives each link up to `flush_ms` to push what is pending (the withdrawal),
  // then stops them all.
  void Shutdown(int64_t flush_ms);

 private:
  struct Link;
  // A link's thread: handshake, push what the peer lacks, wait for news,
  // back off after failures; until stopped or drained.
  void Run(Link* link);
  void Handshake(Link* link);
  void Push(Link* link, bool draining);
  void WaitForNews(Link* link);
  void Fail(Link* link, const std::string& what, const grpc::Status& st);

  GatewayCore* core_;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(const std::string&)> on_up_;
};

}  // namespace fedgate::gateway
