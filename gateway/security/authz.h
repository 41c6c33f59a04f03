// Per-call authorization from the caller's certificate (Debian's gRPC 1.51
// has no authorization-policy library). Refusals are logged and counted.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <mutex>
#include <unordered_map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "gateway/security/identity.h"
#include "gateway/security/revocation.h"

namespace fedgate::gateway {

class Metrics;

// kReservation: the participant's calls (Prepare, Commit, Abort,
// SliceStatus, ReadLog, ListUsage, Stage, RequestVote), which accept_jobs_from: federation opens
// to every gateway of the trust domain.
enum class RpcClass { kPeer, kAdmin, kJob, kReservation };

// The pure decision: peer RPCs only from gateways of approved peer sites of
// our federation (reservations also from any of its gateways with
// `federation_jobs`); admin RPCs only from admins of this very site; job
// RPCs from tenants' users and this site's admins.
absl::Status Decide(const Identity& caller, RpcClass cls, std::string_view federation,
                    std::string_view site, const std::function<bool(std::string_view)>& approved,
                    bool federation_jobs = false);

class Authorizer {
 public:
  // With `crl`, every call of a revoked certificate is refused, also on a
  // connection that was open before the revocation.
  Authorizer(std::string federation, std::string site,
             std::function<bool(std::string_view)> is_approved_peer, Metrics* metrics,
             bool federation_jobs = false, std::shared_ptr<RevocationList> crl = nullptr);

  // The caller's identity if it may call `method` of class `cls`, else
  // PERMISSION_DENIED (UNAUTHENTICATED when the certificate has no usable
  // identity).
  absl::StatusOr<Identity> Authorize(const grpc::AuthContext& ctx, RpcClass cls,
                                     std::string_view method) const;

 private:
  std::string federation_;
  std::string site_;
  std::function<bool(std::string_view)> approved_;
  Metrics* metrics_;
  bool federation_jobs_;
  std::shared_ptr<RevocationList> crl_;
  // Identities of recently seen certificates, by their exact PEM: parsing
  // X.509 on every call cost more CPU than the rest of a submit. The
  // handshake has verified the chain; the identity is a pure function of the
  // certificate. Cleared when full.
  static constexpr size_t kMaxCachedIdentities = 1024;
  absl::StatusOr<Identity> CachedIdentity(const std::string& pem) const;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, absl::StatusOr<Identity>> cache_
      ABSL_GUARDED_BY(cache_mu_);
};

grpc::Status ToGrpc(const absl::Status& st);

}  // namespace fedgate::gateway
