// A small client of the Kubernetes REST API: one HTTPS request per call
// (bearer token or client certificate), deadlines on connect and on the
// whole exchange so a hung API server cannot hang the gateway, and watches
// read as the server streams them (one JSON event per line).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gateway/kube/kube_json.h"
#include "gateway/kube/kubeconfig.h"

namespace fedgate::gateway::kube {

struct KubeResponse {
  int status = 0;
  std::string body;
  std::string retry_after;  // the Retry-After header, where sent (429, 503)
  std::string content_type;
};

struct KubeClientOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{15000};
};

class KubeClient {
 public:
  // Fails when the server URL or the certificates cannot be used.
  static absl::StatusOr<std::unique_ptr<KubeClient>> Make(KubeAccess access,
                                                          KubeClientOptions options = {});
  ~KubeClient();

  // method: GET, POST, PUT, PATCH, DELETE. A transport failure (refused,
  // reset, TLS, deadline) is an UNAVAILABLE or DEADLINE_EXCEEDED status that
  // names the server; any HTTP answer, error codes included, is a response.
  absl::StatusOr<KubeResponse> Call(const std::string& method, const std::string& path,
                                    const std::string& body = "",
                                    const std::string& content_type = "application/json") const;
  // GET `path` (with watch=1 in its query) and hands each event to
  // `on_event` until it returns false, the server closes the stream or
  // `timeout` passes (then OK). An HTTP error answer is returned as its status.
  // `cancel` (optional) ends the watch within ~100 ms once it turns true.
  absl::StatusOr<int> Watch(const std::string& path, std::chrono::milliseconds timeout,
                            const std::function<bool(const Json& event)>& on_event,
                            const std::atomic<bool>* cancel = nullptr) const;
  // GET `path` and hands the body to `on_bytes` as it arrives (pods/log
  // with follow=true), until it returns false, the server ends the body or
  // `timeout` passes (then OK). An HTTP error answer is returned as its status.
  absl::StatusOr<int> Stream(const std::string& path, std::chrono::milliseconds timeout,
                             const std::function<bool(std::string_view bytes)>& on_bytes,
                             const std::atomic<bool>* cancel = nullptr) const;
  // Told of every answer (method, HTTP code or "timeout"/"unreachable"), for
  // the API's request counter. Set before the client is shared.
  using Observer = std::function<void(const std::string& method, const std::string& code)>;
  void SetObserver(Observer o) { observer_ = std::move(o); }

  const std::string& server() const { return access_.server; }
  const KubeAccess& access() const { return access_; }

 private:
  struct Impl;
  KubeClient(KubeAccess access, KubeClientOptions options, std::unique_ptr<Impl> impl);
  absl::StatusOr<KubeResponse> CallOnce(const std::string& method, const std::string& path,
                                        const std::string& body, const std::string& content_type) const;
  absl::StatusOr<int> StreamOnce(const std::string& path, std::chrono::milliseconds timeout,
                                 const std::function<bool(std::string_view bytes)>& on_bytes,
                                 const std::atomic<bool>* cancel, int* http_status) const;
  void Observe(const std::string& method, const absl::StatusOr<int>& code) const;
  KubeAccess access_;
  KubeClientOptions options_;
  std::unique_ptr<Impl> impl_;
  Observer observer_;
};

// A status for an error answer: the HTTP code, the Status object's reason
// and message where the server sent one, and what was being done.
absl::Status ApiError(const KubeResponse& r, const std::string& what);
// The decoded body of a 2xx answer, or ApiError.
absl::StatusOr<Json> JsonOf(const absl::StatusOr<KubeResponse>& r, const std::string& what);

// Percent-encodes a query value (label and field selectors).
std::string QueryEscape(const std::string& s);

}  // namespace fedgate::gateway::kube
