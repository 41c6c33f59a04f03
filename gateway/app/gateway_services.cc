// The coordinator's side of inference services (docs/services.md): the
// controller that keeps replicas running, how it probes replicas of other
// sites, and the bearer tokens of listen.serve.
#include "gateway/app/gateway.h"
#include "gateway/app/system_clock.h"
#include "gateway/ops/metrics.h"
#include "gateway/store/job_store.h"
#include "gateway/store/store.h"
#include "gateway/jobs/job_manager.h"
#include "gateway/peering/core.h"
#include "gateway/serve/replica_hop.h"
#include "gateway/serve/service_controller.h"
#include "gateway/serve/service_tokens.h"

namespace fedgate::gateway {

void Gateway::MakeServiceControl() {
  services_ = std::make_unique<ServiceController>(job_store_.get(), job_manager_.get(),
                                                  clock_.get(), metrics_.get(), config_.site);
  job_manager_->SetServiceStatus([s = services_.get()](const std::string& id, v1::Service* out) {
    s->Describe(id, out);
  });
  core_->SetServicesFn([s = services_.get()] { return s->Advertised(); });
  // A replica on another site is probed by its own site's gateway.
  hop_ = std::make_unique<ReplicaHop>(core_.get(), config_);
  services_->SetProber([hop = hop_.get(), site = config_.site](const Replica& r, const std::string& path,
                                                               int64_t timeout_ms) {
    if (r.site == site || !hop->usable()) return ProbeHttp(r.addr, r.port, path, timeout_ms);
    return hop->Probe(r, path, timeout_ms);
  });
  tokens_ = std::make_unique<ServiceTokens>(store_.get());
  job_manager_->SetTokenIssuer([t = tokens_.get()](const std::string& id, bool revoke)
                                   -> absl::StatusOr<std::string> {
    if (!revoke) return t->Issue(id);
    if (auto st = t->Revoke(id); !st.ok()) return st;
    return std::string();
  });
}

}  // namespace fedgate::gateway
