#include "gateway/security/authz.h"

#include <spdlog/spdlog.h>

#include "base/str_cat.h"
#include "gateway/ops/metrics.h"

namespace fedgate::gateway {

absl::Status Decide(const Identity& caller, RpcClass cls, std::string_view federation,
                    std::string_view site, const std::function<bool(std::string_view)>& approved,
                    bool federation_jobs) {
  const std::string who = caller.ToUri();
  if (caller.federation != federation) {
    return absl::PermissionDeniedError(
        fedgate::StrCat(who, " belongs to federation \"", caller.federation, "\", not \"",
                     federation, "\""));
  }
  switch (cls) {
    case RpcClass::kPeer:
    case RpcClass::kReservation:
      if (caller.role != Role::kGateway) {
        return absl::PermissionDeniedError(fedgate::StrCat(who, " is not a gateway"));
      }
      if (caller.site == site) {
        return absl::PermissionDeniedError(fedgate::StrCat(who, " is this gateway's own identity"));
      }
      if (cls == RpcClass::kReservation && federation_jobs) return absl::OkStatus();
      if (!approved(caller.site)) {
        return absl::PermissionDeniedError(
            fedgate::StrCat("site \"", caller.site, "\" is not an approved peer of ", site,
                            cls == RpcClass::kReservation
                                ? " (which accepts jobs only from its peers: accept_jobs_from)"
                                : ""));
      }
      return absl::OkStatus();
    case RpcClass::kAdmin:
      if (caller.role != Role::kAdmin || caller.site != site) {
        return absl::PermissionDeniedError(fedgate::StrCat(who, " is not an admin of ", site));
      }
      return absl::OkStatus();
    case RpcClass::kJob:
      if (caller.role == Role::kUser || (caller.role == Role::kAdmin && caller.site == site)) {
        return absl::OkStatus();
      }
      return absl::PermissionDeniedError(
          fedgate::StrCat(who, " is neither a tenant's user nor an admin of ", site));
  }
  return absl::PermissionDeniedError("unknown RPC class");
}

Authorizer::Authorizer(std::string federation, std::string site,
                       std::function<bool(std::string_view)> is_approved_peer, Metrics* metrics,
                       bool federation_jobs, std::shared_ptr<RevocationList> crl)
    : federation_(std::move(federation)),
      site_(std::move(site)),
      approved_(std::move(is_approved_peer)),
      metrics_(metrics),
      federation_jobs_(federation_jobs),
      crl_(std::move(crl)) {}

absl::StatusOr<Identity> Authorizer::Authorize(const grpc::AuthContext& ctx, RpcClass cls,
                                               std::string_view method) const {
  const char* cls_name = cls == RpcClass::kAdmin ? "admin"
                         : cls == RpcClass::kJob ? "job"
                                                 : "peer";
  auto refuse = [&](const absl::Status& st, const char* reason) {
    metrics_->Inc("fedgate_authz_refusals_total", {{"rpc_class", cls_name}, {"reason", reason}});
    spdlog::warn("authz: refused {} call {}: {}", cls_name, method, std::string(st.message()));
    return st;
  };
  auto pems = ctx.FindPropertyValues("x509_pem_cert");
  if (pems.empty()) {
    return refuse(absl::UnauthenticatedError("no client certificate"), "no_certificate");
  }
  const std::string pem(pems[0].data(), pems[0].size());
  if (crl_ != nullptr) {
    if (auto st = crl_->Check(pem); !st.ok()) return refuse(st, "revoked");
  }
  auto id = CachedIdentity(pem);
  if (!id.ok()) {
    return refuse(absl::UnauthenticatedError(fedgate::StrCat("client certificate refused: ",
                                                          id.status().message())),
                  "bad_identity");
  }
  if (auto st = Decide(*id, cls, federation_, site_, approved_, federation_jobs_); !st.ok()) {
    return refuse(st, "role");
  }
  return id;
}

absl::StatusOr<Identity> Authorizer::CachedIdentity(const std::string& pem) const {
  {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(pem);
    if (it != cache_.end()) return it->second;
  }
  auto id = IdentityFromCertPem(pem);
  std::lock_guard lock(cache_mu_);
  if (cache_.size() >= kMaxCachedIdentities) cache_.clear();
  cache_.emplace(pem, id);
  return id;
}

grpc::Status ToGrpc(const absl::Status& st) {
  if (st.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

}  // namespace fedgate::gateway
