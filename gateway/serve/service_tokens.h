// Bearer tokens of services (fedctl services token): one per service, for
// clients of listen.serve that cannot hold a client certificate. Only the
// token's SHA-256 is stored (the store's kv table, "service-token/<id>"),
// so a copy of the store does not hand out access; the token is shown once.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"

namespace fedgate::gateway {

class Store;

class ServiceTokens {
 public:
  explicit ServiceTokens(Store* store) : store_(store) {}
  // A new token for the service, replacing its earlier one.
  absl::StatusOr<std::string> Issue(const std::string& service_id);
  absl::Status Revoke(const std::string& service_id);
  // The service a token opens; nullopt for an unknown or revoked one.
  std::optional<std::string> Lookup(const std::string& token);

 private:
  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Store* store_;
  std::mutex mu_;
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::string> by_hash_ ABSL_GUARDED_BY(mu_);  // hash -> service id
};

}  // namespace fedgate::gateway
