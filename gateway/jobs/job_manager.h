// The coordinator's job API: submit (durable, idempotent), get, list, cancel,
// logs and the wake-ups of Watch/Logs streams (api/job_streams.h). Tenants
// come from the caller's identity. Cancel is a compare-and-set through the job
// state machine; the Coordinator reserves and runs what is queued.
#pragma once

#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "federation/usage.h"
#include "fedgate/v1/jobs.pb.h"
#include "gateway/security/identity.h"
#include "gateway/jobs/job_events.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

class Coordinator;
class GatewayCore;

class JobManager {
 public:
  // `store` may be null only for the no-store benchmark baseline
  // (FEDGATE_BENCH_NO_STORE=1): jobs then live in memory and are lost.
  JobManager(GatewayCore* core, JobStore* store);
  ~JobManager();
  // Set once the coordinator exists; cancel and logs go through it.
  void SetCoordinator(Coordinator* c) { coordinator_ = c; }
  // The records this site keeps of jobs it runs slices of (the
  // participant's): Get answers from them for a job coordinated elsewhere.
  using CopyReader = std::function<absl::StatusOr<std::optional<v1::Job>>(const std::string&)>;
  void SetCopyReader(CopyReader r) { read_copy_ = std::move(r); }

  absl::StatusOr<v1::SubmitJobResponse> Submit(const Identity& caller,
                                               const v1::SubmitJobRequest& req);
  // Non-blocking: `done` runs once the job is durable (on the store's writer
  // thread) or refused (on the caller's thread).
  void SubmitAsync(const Identity& caller, const v1::SubmitJobRequest& req,
                   std::function<void(absl::StatusOr<v1::SubmitJobResponse>)> done);
  // A service's replica (spec from federation::ReplicaSpec), submitted by
  // the service controller as the service's tenant; the record once durable.
  absl::StatusOr<JobRecord> SubmitReplica(const std::string& tenant, const v1::JobSpec& spec);
  // job_manager_services.cc: the caller's running services; a service's
  // replica range. The service controller fills replicas, readiness and
  // rate through the status hook.
  absl::StatusOr<v1::ListServicesResponse> ListServices(const Identity& caller,
                                                        const v1::ListServicesRequest& req);
  absl::StatusOr<v1::ScaleServiceResponse> ScaleService(const Identity& caller,
                                                        const v1::ScaleServiceRequest& req);
  absl::StatusOr<v1::ServiceTokenResponse> ServiceToken(const Identity& caller,
                                                        const v1::ServiceTokenRequest& req);
  using ServiceStatus = std::function<void(const std::string& id, v1::Service* out)>;
  void SetServiceStatus(ServiceStatus fn) { service_status_ = std::move(fn); }
  // Issues (revoke false) or revokes a service's bearer token.
  using TokenIssuer = std::function<absl::StatusOr<std::string>(const std::string& id, bool revoke)>;
  void SetTokenIssuer(TokenIssuer fn) { token_issuer_ = std::move(fn); }
  absl::StatusOr<v1::GetJobResponse> Get(const Identity& caller, const v1::GetJobRequest& req);
  absl::StatusOr<v1::ListJobsResponse> List(const Identity& caller,
                                            const v1::ListJobsRequest& req);
  absl::StatusOr<v1::CancelJobResponse> Cancel(const Identity& caller,
                                               const v1::CancelJobRequest& req);
  absl::StatusOr<v1::LogsResponse> Logs(const Identity& caller, const v1::LogsRequest& req);
  // The job's story, oldest first (at most 10 000 events after `after_seq`).
  absl::StatusOr<v1::JobEventsResponse> Events(const Identity& caller,
                                               const v1::JobEventsRequest& req);

  // Usage records of every reachable site in [since, until) of one tenant
  // ("" = all), the sites that could not answer, and the time "now" counts as.
  struct GatheredUsage {
    std::vector<federation::UsageRecord> records;
    std::vector<std::string> unreachable;
  };
  using UsageGatherer = std::function<GatheredUsage(int64_t since_ms, int64_t until_ms,
                                                    const std::string& tenant)>;
  void SetUsageGatherer(UsageGatherer g, federation::Pricing pricing) {
    gather_usage_ = std::move(g);
    pricing_ = std::move(pricing);
  }
  // Tenants see their own usage only; a site admin sees every tenant's.
  absl::StatusOr<v1::UsageResponse> Usage(const Identity& caller, const v1::UsageRequest& req);
  // Quotas as the home sites advertise them; a tenant sees only its own.
  absl::StatusOr<v1::QuotasResponse> Quotas(const Identity& caller, const v1::QuotasRequest& req);

  // Reads a chunk of a rank's log at `req.offset()`; `done` runs exactly once,
  // possibly on the caller's thread.
  void ReadLogAsync(const JobRecord& job, const v1::LogsRequest& req,
                    std::function<void(absl::StatusOr<v1::LogsResponse>)> done);

  // The caller's job (NOT_FOUND for another tenant's), id validated.
  absl::StatusOr<JobRecord> Load(const Identity& caller, const std::string& id);

  // Counts an open Watch/Logs stream of the caller; RESOURCE_EXHAUSTED past
  // api.max_streams_per_caller. Pair with CloseStream.
  absl::Status OpenStream(const Identity& caller);
  void CloseStream(const Identity& caller);
  // Wakes the open streams: call Notify after every write of a job.
  JobEvents* events() { return events_.get(); }

 private:
  v1::Job ToProto(const JobRecord& r, bool with_plan);
  // Submit past the API's own checks (`service` unset, a service's name).
  void SubmitUnchecked(const Identity& caller, const v1::SubmitJobRequest& req,
                       std::function<void(absl::StatusOr<v1::SubmitJobResponse>)> done);
  v1::Service ServiceOf(const JobRecord& r);
  absl::StatusOr<std::vector<JobRecord>> ActiveServices(const Identity& caller,
                                                        const std::string& name);
  // A service's name is a URL segment, unique among the tenant's running services.
  absl::Status CheckServiceName(const std::string& tenant, const std::string& name);

  GatewayCore* core_;
  JobStore* store_;
  Coordinator* coordinator_ = nullptr;
  std::unique_ptr<JobEvents> events_;
  std::mutex streams_mu_;
  // Open streams by caller identity.
  std::map<std::string, int> streams_ ABSL_GUARDED_BY(streams_mu_);
  std::mutex mem_mu_;  // the no-store baseline only
  std::map<std::string, JobRecord> mem_ ABSL_GUARDED_BY(mem_mu_);
  UsageGatherer gather_usage_;
  federation::Pricing pricing_;
  CopyReader read_copy_;
  ServiceStatus service_status_;
  TokenIssuer token_issuer_;
};

}  // namespace fedgate::gateway
