// The job API's service calls: list the caller's services, scale one, issue or
// revoke its bearer token. Replicas and their rotation live in the service
// controller (serve/), which fills what only it knows through the status hook.
#include <algorithm>

#include "base/str_cat.h"
#include "federation/job_state.h"
#include "federation/service_spec.h"
#include "gateway/jobs/job_manager.h"
#include "gateway/jobs/job_story.h"
#include "gateway/peering/core.h"

namespace fedgate::gateway {

using federation::JobState;

v1::Service JobManager::ServiceOf(const JobRecord& r) {
  v1::Service s;
  s.set_name(r.spec.name());
  s.set_id(r.id);
  s.set_tenant(r.tenant);
  s.set_state(federation::ToProto(r.state));
  s.set_reason(r.reason);
  s.set_endpoint(StrCat("/v1/services/", r.spec.name(), "/"));
  s.set_coordinator(core_->config().site);
  const auto p = federation::PolicyOf(r.spec);
  s.mutable_replicas()->set_min(p.min);
  s.mutable_replicas()->set_max(p.max);
  s.mutable_replicas()->set_desired(p.desired);
  if (service_status_) service_status_(r.id, &s);
  return s;
}

absl::StatusOr<std::vector<JobRecord>> JobManager::ActiveServices(const Identity& caller,
                                                                 const std::string& name) {
  if (store_ == nullptr) return absl::UnavailableError("this gateway keeps no job store");
  auto active = store_->ListAllActive();
  if (!active.ok()) return active.status();
  std::vector<JobRecord> out;
  for (auto& j : *active) {
    if (!federation::IsService(j.spec) || !j.moved_to.empty()) continue;
    if (caller.role == Role::kUser && j.tenant != caller.tenant) continue;
    if (!name.empty() && j.spec.name() != name) continue;
    out.push_back(std::move(j));
  }
  std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) {
    return std::tie(a.tenant, a.spec.name()) < std::tie(b.tenant, b.spec.name());
  });
  return out;
}

absl::StatusOr<v1::ListServicesResponse> JobManager::ListServices(const Identity& caller,
                                                                  const v1::ListServicesRequest& req) {
  if (caller.role == Role::kGateway) {
    return absl::PermissionDeniedError(StrCat(caller.ToUri(), " may not list services"));
  }
  auto found = ActiveServices(caller, req.name());
  if (!found.ok()) return found.status();
  if (!req.name().empty() && found->empty()) {
    return absl::NotFoundError(StrCat("no running service \"", req.name().substr(0, 63), "\" here"));
  }
  v1::ListServicesResponse resp;
  for (const auto& r : *found) *resp.add_services() = ServiceOf(r);
  return resp;
}

absl::StatusOr<v1::ScaleServiceResponse> JobManager::ScaleService(const Identity& caller,
                                                                  const v1::ScaleServiceRequest& req) {
  if (caller.role != Role::kUser) {
    return absl::PermissionDeniedError(
        StrCat(caller.ToUri(), " cannot scale: services are scaled by their tenant's users"));
  }
  if (req.min() == 0) return absl::InvalidArgumentError("min must be >= 1");
  if (req.max() < req.min()) {
    return absl::InvalidArgumentError(StrCat("max ", req.max(), " is less than min ", req.min()));
  }
  if (req.max() > federation::kMaxReplicas) {
    return absl::InvalidArgumentError(
        StrCat("max ", req.max(), " is over the limit of ", federation::kMaxReplicas));
  }
  for (int tries = 0;; ++tries) {
    auto found = ActiveServices(caller, req.name());
    if (!found.ok()) return found.status();
    if (found->empty()) {
      return absl::NotFoundError(StrCat("no running service \"", req.name().substr(0, 63), "\" here"));
    }
    JobRecord next = found->front();
    auto* r = next.spec.mutable_replicas();
    const uint32_t before = federation::PolicyOf(next.spec).desired;
    r->set_min(req.min());
    r->set_max(req.max());
    r->set_desired(std::clamp(before, req.min(), req.max()));
    next.updated_at_unix_ms = core_->clock()->NowMs();
    next.new_events.push_back(StoryEvent(
        next.updated_at_unix_ms, "scaled", core_->config().site,
        StrCat("replicas min ", req.min(), " max ", req.max(), " by ", caller.ToUri(), ": desired ",
               before, " -> ", r->desired())));
    // The coordinator's own write of the spec (the state stays).
    auto st = store_->Save(&next, federation::JobActor::kCoordinator);
    if (absl::IsAborted(st) && tries < 20) continue;
    if (!st.ok()) return st;
    events_->Notify(next.id);
    v1::ScaleServiceResponse resp;
    *resp.mutable_service() = ServiceOf(next);
    return resp;
  }
}

absl::StatusOr<v1::ServiceTokenResponse> JobManager::ServiceToken(const Identity& caller,
                                                                  const v1::ServiceTokenRequest& req) {
  if (caller.role != Role::kUser) {
    return absl::PermissionDeniedError(
        StrCat(caller.ToUri(), " cannot hold tokens: services' tokens are their tenant's"));
  }
  if (!token_issuer_) return absl::UnavailableError("this gateway issues no service tokens");
  auto found = ActiveServices(caller, req.name());
  if (!found.ok()) return found.status();
  if (found->empty()) {
    return absl::NotFoundError(StrCat("no running service \"", req.name().substr(0, 63), "\" here"));
  }
  const JobRecord& svc = found->front();
  auto token = token_issuer_(svc.id, req.revoke());
  if (!token.ok()) return token.status();
  // The story says who, never the token.
  (void)store_->AppendEvents(svc.id, {StoryEvent(core_->clock()->NowMs(), "token", core_->config().site,
                                                 StrCat(req.revoke() ? "bearer token revoked by " : "bearer token issued to ",
                                                        caller.ToUri()))});
  v1::ServiceTokenResponse resp;
  resp.set_token(*token);
  resp.set_service_id(svc.id);
  resp.set_revoked(req.revoke());
  return resp;
}

}  // namespace fedgate::gateway
