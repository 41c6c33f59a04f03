// The participant side of running jobs at one site: the GPU ledger (two-phase
// holds), the slices of ranks it runs, their leases, and their logs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/capacity_view.h"
#include "federation/quota.h"
#include "federation/reservation.h"
#include "federation/usage.h"
#include "fedgate/v1/admin.pb.h"
#include "fedgate/v1/federation.pb.h"
#include "fedgate/v1/jobs.pb.h"
#include "gateway/app/config.h"
#include "gateway/exec/cgroup.h"
#include "gateway/exec/process_executor.h"
#include "gateway/exec/site_backend.h"

namespace fedgate::federation {
class Clock;
}

namespace fedgate::gateway {

class Store;

using SliceState = v1::SliceStatusResponse;

class Participant {
 public:
  // `store` remembers the rank processes of running slices, so that after a
  // crash the restarted gateway stops them (and reports their slices failed)
  // instead of leaving them running untracked.
  // At most `max_finished` finished slices whose coordinator has seen their
  // end are kept (the oldest go first), besides a 10-minute window.
  Participant(const Config& config, const federation::Clock* clock, Store* store,
              size_t max_finished = 512);
  ~Participant();
  // Who ranks run as and the shim that supervises them (before Start);
  // without a shim, ranks are the gateway's children and die with it.
  void SetExecutor(std::string shim, RankUser user) { exec_.Configure(std::move(shim), std::move(user)); }
  // How holds become real and ranks run (before Start); the process
  // backend unless set (executor.kind slurm: MakeSlurmBackend).
  void SetBackend(std::unique_ptr<SiteBackend> backend) { backend_ = std::move(backend); }
  // Per-slice cgroups, where DetectCgroups found them (before Start).
  void SetCgroups(CgroupSupport cg) { cgroups_ = std::move(cg); }
  // Re-reads the backend's nodes (Slurm: new nodes, GPUs its own users
  // took, drained or down nodes, none of whose GPUs are offered). The
  // sweeper runs it every advertise interval; a no-op for static nodes.
  void RefreshNodes();
  void Start();
  // Stops the sweeper and every rank.
  void Stop();
  // Stops the sweeper but leaves supervised ranks running (a gateway
  // SIGTERM): the restarted gateway re-attaches to them.
  void Detach();
  // Called (without locks) whenever free GPUs change, to re-advertise.
  void SetOnCapacityChange(std::function<void()> fn) { on_change_ = std::move(fn); }
  // Called (under the participant's lock) with usage records as they close.
  void SetOnUsage(std::function<void(const std::vector<federation::UsageRecord>&)> fn) {
    on_usage_ = std::move(fn);
  }
  // The same, as the peer RPC ListUsage answers it.
  absl::StatusOr<v1::ListUsageResponse> ListUsage(const std::string& from,
                                                  const v1::ListUsageRequest& req);
  // This site's usage records overlapping [since, until) (tenant "" = all).
  absl::StatusOr<std::vector<federation::UsageRecord>> Usage(int64_t since_ms, int64_t until_ms,
                                                             const std::string& tenant);

  // Each call names the coordinator site it comes from (authenticated by the
  // caller's certificate, or this site for local calls). A job belongs to
  // the coordinator that first reached this site for it: any other site gets
  // PERMISSION_DENIED on every call. Every field is validated before use.
  absl::StatusOr<v1::PrepareResponse> Prepare(const std::string& from,
                                              const v1::PrepareRequest& req);
  // Starts the ranks on the GPUs of the hold (never the indices a request
  // names): the request's ranks must match the hold node by node.
  absl::StatusOr<v1::CommitResponse> Commit(const std::string& from, const v1::CommitRequest& req);
  absl::StatusOr<v1::AbortResponse> Abort(const std::string& from, const v1::AbortRequest& req);
  absl::StatusOr<v1::SliceStatusResponse> Status(const std::string& from,
                                                 const v1::SliceStatusRequest& req);
  // Reads the rank's log by offset with pread: at most 1 MiB per call.
  absl::StatusOr<v1::ReadLogResponse> ReadLog(const std::string& from,
                                              const v1::ReadLogRequest& req);

  // Reaps exited ranks, stops slices whose lease lapsed, kills ranks past
  // their grace, frees the GPUs of slices whose every rank exited. The
  // sweeper thread runs it; tests call it with a FakeClock.
  void Sweep();

  // The GPUs that fail their health check now, per node (nodes not named
  // are healthy): they leave the ad, and slices running on them are stopped
  // (their coordinator retries the job elsewhere). `why` gives reasons.
  void SetUnhealthy(const std::map<std::string, std::set<uint32_t>>& failed,
                    const std::map<std::pair<std::string, uint32_t>, std::string>& why = {});

  // This site's nodes: GPUs, health, cordon state, running slices.
  std::vector<v1::NodeView> Nodes();
  // Cordons or uncordons a node (persisted, restored at start); NOT_FOUND
  // for a node this site does not have.
  absl::StatusOr<v1::NodeView> SetCordoned(const std::string& node, bool cordoned);
  // Stops every running slice with ranks on the node (their coordinators
  // retry the jobs elsewhere); returns how many.
  absl::StatusOr<uint32_t> StopSlicesOn(const std::string& node, const std::string& why);

  // Free GPUs per node right now (total minus held, running and unhealthy).
  std::map<std::string, uint32_t> FreeGpus();
  // What the ad says of each node besides free GPUs: GPUs a guaranteed job
  // may preempt, and GPUs being freed for preemptors (by job).
  federation::NodeExtras NodeExtras();

  // Quotas of the tenants whose home is this site, with their use now.
  std::vector<v1::TenantQuota> Quotas();
  // Sets a tenant's quota here (stored, so it outlives a restart).
  absl::StatusOr<v1::TenantQuota> SetQuota(const federation::TenantQuota& q);

 private:
  struct RankProc {
    uint32_t rank = 0;
    pid_t pid = -1;
    uint64_t start_time = 0;  // of pid, from /proc
    std::string exit_file;    // written by its shim
    bool exited = false;
    int code = 0;
  };
  struct Slice {
    v1::ReservationKey key;
    std::vector<RankProc> ranks;
    int64_t lease_deadline_ms = 0;
    int64_t lease_ms = 0;
    v1::SliceStatusResponse::State state = v1::SliceStatusResponse::RUNNING;
    std::string message;
    bool stopping = false;
    int64_t kill_at_ms = 0;
    bool preemptible = false;  // spot or borrowed
    int64_t started_at_ms = 0;
    std::map<std::string, uint32_t> gpus_by_node;
    std::string preempted_by;  // the job that preempted it
    std::vector<std::string> preempt_files;
    std::string cgroup;  // "" = none
    bool released = false;    // every rank exited and the hold's GPUs are free
    bool reported = false;    // ... and its coordinator has asked since
    int64_t ended_at_ms = 0;  // when released; finished slices are pruned later
    // A finished slice only answers status calls (state, message, exit
    // codes): what ran, stopped or preempted its ranks goes, so that the
    // window of finished slices stays small.
    void DropRunningState() {
      for (auto& r : ranks) std::string().swap(r.exit_file);
      std::vector<std::string>().swap(preempt_files);
      std::string().swap(cgroup);
      gpus_by_node.clear();
    }
  };
  using SliceKey = std::pair<std::string, uint64_t>;  // job id, epoch
  void CleanUpAfterRestart();
  // Re-attaches to a slice stored before a restart; false when it cannot
  // (then its ranks are stopped).
  bool ReattachLocked(const std::string& job_id, uint32_t attempt, uint64_t epoch,
                      const v1::SliceRecord& rec);
  std::string WorkDir(const std::string& job) const;
  // The backend's reservations of live holds (Slurm allocations).
  using Allocs = SiteBackend::Allocs;
  std::map<SliceKey, Allocs> allocs_;
  std::unique_ptr<SiteBackend> backend_ = MakeProcessBackend();
  CgroupSupport cgroups_;
  // Cgroups of released slices whose killed processes were still exiting,
  // with the sweeps tried so far: removed by a later sweep, not left behind.
  std::vector<std::pair<std::string, int>> cgroups_to_remove_;
  void RemoveCgroupsLocked();
  void QueueLeftoverCgroupsLocked();  // at start, after re-attaching
  // Reservations whose hold is gone (aborted, expired, released): given
  // back by the caller after the lock is dropped.
  std::vector<Allocs> StaleAllocsLocked();
  v1::NodeView NodeLocked(const federation::Node& n) const;
  const federation::Node* FindNode(const std::string& name) const;
  void StopSliceLocked(Slice* s, const std::string& why, int64_t grace_ms = 0);
  // For a guaranteed job that found too few free GPUs: stops the cheapest
  // preemptible slices covering what it lacks and keeps their GPUs for it.
  // The refusal to return (UNAVAILABLE "preempting ...", or the original).
  absl::Status PreemptLocked(const std::string& job_id, const std::vector<federation::NodeRequest>& want,
                             const absl::Status& refused);
  v1::TenantQuota QuotaViewLocked(const federation::TenantQuota& q) const;
  void LoadQuotas();
  // One stored row per committed quota hold, written with or without mu_;
  // the sweep deletes released ones. A row written after its hold was
  // released and swept stays until a restart restores it and its lease lapses.
  void PersistQuotaHold(const federation::QuotaHold& h);
  // Stored rows whose hold is gone (clears quota_dirty_); DeleteQuotaRows
  // removes them in one transaction, outside mu_.
  std::vector<std::pair<std::string, uint64_t>> ReleasedQuotaRowsLocked();
  void DeleteQuotaRows(const std::vector<std::pair<std::string, uint64_t>>& released);
  std::string LogPath(const std::string& job, uint32_t attempt, uint32_t rank) const;
  absl::Status WriteLogOwner(const std::string& job, const std::string& from);
  static uint32_t LatestAttempt(const std::string& job_dir);

  Config config_;
  const federation::Clock* clock_;
  const size_t max_finished_;
  Store* store_;
  ProcessExecutor exec_;
  std::mutex mu_;
  federation::ReservationLedger ledger_;
  federation::QuotaLedger quota_;
  bool quota_dirty_ = false;  // holds released since they were last stored
  std::mutex stored_mu_;  // after mu_ when both are held
  std::set<federation::QuotaLedger::Key> stored_quota_holds_;
  std::map<SliceKey, Slice> slices_;
  std::function<void()> on_change_;
  std::function<void(const std::vector<federation::UsageRecord>&)> on_usage_;
  std::atomic<bool> stop_{false};
  bool detached_ = false;
  std::thread sweeper_;
};

}  // namespace fedgate::gateway
