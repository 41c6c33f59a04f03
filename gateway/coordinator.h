// The coordinator of the jobs submitted here: places pending jobs, runs the
// two-phase reservation (Prepare everywhere, decision written durably, then
// Commit), renews the slices' leases while polling their state, and retries
// elsewhere or fails a job when a rank fails or a site goes silent.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/security/tls_certificate_provider.h>

#include "absl/status/statusor.h"
#include "fedgate/v1/federation.grpc.pb.h"
#include "fedgate/v1/jobs.pb.h"
#include "gateway/job_store.h"

namespace fedgate::gateway {

class GatewayCore;
class Participant;

class Coordinator {
 public:
  Coordinator(GatewayCore* core, JobStore* store, Participant* local,
              std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider);
  ~Coordinator();
  void Start();
  void Stop();

  // Stops the job's slices everywhere (cancel).
  void AbortRun(const JobRecord& job, const std::string& reason);
  absl::StatusOr<v1::ReadLogResponse> ReadLog(const JobRecord& job, uint32_t rank);
  // How long a slice keeps running without hearing from this coordinator.
  int64_t lease_ms() const { return lease_ms_; }

 private:
  void Loop();
  void TryStart(JobRecord job, const std::vector<std::string>& unreachable);
  void Drive(JobRecord job);
  absl::Status CommitSite(const JobRecord& job, const v1::RunPlan& run, const v1::SiteRun& site);
  void Fail(JobRecord job, const v1::RunPlan& run, const std::string& reason,
            const std::string& bad_site);

  std::shared_ptr<v1::PeerService::Stub> Stub(const std::string& site);
  // Drops a site's channel after a transport failure; the next call dials anew.
  void Forget(const std::string& site, const grpc::Status& st);
  absl::StatusOr<v1::PrepareResponse> Prepare(const std::string& site, v1::PrepareRequest req);
  absl::Status Commit(const std::string& site, v1::CommitRequest req);
  absl::Status Abort(const std::string& site, v1::AbortRequest req);
  absl::StatusOr<v1::SliceStatusResponse> Status(const std::string& site,
                                                 v1::SliceStatusRequest req);

  GatewayCore* core_;
  JobStore* store_;
  Participant* local_;
  int64_t lease_ms_;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  std::mutex stubs_mu_;
  // Shared: a call in flight keeps its stub alive if Forget() drops it meanwhile.
  std::map<std::string, std::pair<std::string, std::shared_ptr<v1::PeerService::Stub>>> stubs_;
  std::map<std::string, std::map<std::string, int64_t>> last_ok_;  // job -> site -> ms
  uint64_t last_epoch_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fedgate::gateway
