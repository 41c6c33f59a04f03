// The participant side of running jobs at one site: the GPU ledger (two-phase
// holds), the slices of ranks it runs, their leases, and their logs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "federation/capacity_view.h"
#include "federation/coordinator_term.h"
#include "federation/quota.h"
#include "federation/reservation.h"
#include "federation/usage.h"
#include "fedgate/v1/admin.pb.h"
#include "fedgate/v1/federation.pb.h"
#include "fedgate/v1/jobs.pb.h"
#include "gateway/config/config.h"
#include "gateway/datasets/dataset_registry.h"
#include "gateway/jobs/kept_copy.h"
#include "gateway/datasets/dataset_stager.h"
#include "gateway/exec/cgroup.h"
#include "gateway/exec/cgroup_reaper.h"
#include "gateway/exec/process_executor.h"
#include "gateway/exec/rank_runner.h"
#include "gateway/exec/site_backend.h"
#include "gateway/jobs/slice.h"
#include "gateway/store/store.h"

namespace fedgate::federation {
class Clock;
}

namespace fedgate::gateway {

// Whether a program on this host listens on address:port (IPv4; false for
// an address that is not this host's).
bool PortTakenHere(const std::string& address, uint32_t port);

class AdAuthority;

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
  void SetExecutor(std::string shim, RankUser user);
  // Replaces how ranks are started (before Start): tests plug a fake.
  void SetRunner(std::unique_ptr<RankRunner> runner) { runner_ = std::move(runner); }
  // How holds become real and ranks run (before Start); the process
  // backend unless set (executor.kind slurm: MakeSlurmBackend).
  void SetBackend(std::unique_ptr<SiteBackend> backend) { backend_ = std::move(backend); }
  // The datasets this site holds (ranks get their folders); unset = none.
  void SetDatasets(const DatasetRegistry* datasets) { datasets_ = datasets; }
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
  // Called (without locks) with usage records as they close.
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
  // participant_stage.cc: keeps the prepared hold of the request's key while
  // this site stages the job's datasets, and reports the copies.
  absl::StatusOr<v1::StageResponse> Stage(const std::string& from, const v1::StageRequest& req);
  void SetStager(DatasetStager* stager) { stager_ = stager; }
  // Datasets the slices here read now.
  std::set<std::string> DatasetsInUse();
  // Starts the ranks on the GPUs of the hold (never the indices a request
  // names): the request's ranks must match the hold node by node.
  absl::StatusOr<v1::CommitResponse> Commit(const std::string& from, const v1::CommitRequest& req);
  absl::StatusOr<v1::AbortResponse> Abort(const std::string& from, const v1::AbortRequest& req);
  absl::StatusOr<v1::SliceStatusResponse> Status(const std::string& from,
                                                 const v1::SliceStatusRequest& req);
  // participant_job_copy.cc: the record of a job this site runs a slice of,
  // as its coordinator last sent it (nullopt = none kept here).
  absl::StatusOr<std::optional<v1::Job>> JobFromCopy(const std::string& job_id) const;
  using KeptCopy = gateway::KeptCopy;
  // A job whose coordinator this site has not heard for as long as this
  // site's place in the succession asks it to wait: this site may ask the
  // members to let it take over at `term` + 1.
  struct TakeoverDue {
    std::string job_id;
    uint64_t term = 0;
    std::string coordinator;  // "" while undecided
    std::vector<std::string> members;
    int64_t silent_ms = 0;
    uint64_t version = 0;  // of the kept record
    int position = 0;      // in the succession (0 = the first successor)
    uint64_t record_term = 0;  // the term the kept record was written at
  };
  std::vector<TakeoverDue> TakeoversDue();
  // participant_silence.cc: jobs whose slices here outlived their lease
  // without a renewal and whose coordinator's silence no majority has
  // confirmed yet, while their short fence still runs: this site asks the
  // members for pre-votes (the Takeover loop).
  struct SilenceDue {
    std::string job_id;
    uint64_t term = 0;
    std::vector<std::string> members;
    int64_t heard_ms = 0;  // the silence asked about: since this hearing
  };
  std::vector<SilenceDue> SilencesToConfirm();
  // A majority would vote the coordinator out: the job's slices here keep
  // the takeover fence (the shims' fence files pushed forward) unless the
  // coordinator was heard since or the short fence has already passed.
  bool ConfirmSilence(const std::string& job_id, int64_t heard_ms);
  // This site won `term` of the job with `grants`: its own record follows it
  // at once (stored), so it never grants the term after to anyone while it
  // coordinates (stickiness holds for the winner too).
  absl::Status TakeLead(const std::string& job_id, uint64_t term,
                        const std::vector<v1::SignedGrant>& grants);
  // Calls and copies refused for their term or content, by reason: "stale"
  // (an older term), "hostile" (a term or caller the record does not
  // grant), "bad_copy" (a record of another job, tenant or coordinator).
  std::map<std::string, uint64_t> TermRefusals();
  // Signs this site's grants and checks those a new coordinator presents
  // (before Start); without it no vote is granted and no new term accepted.
  void SetGrantAuthority(AdAuthority* authority) { grant_authority_ = authority; }
  // participant_vote.cc: a member of a job asks to coordinate it at a higher
  // term (`from` is the candidate). Answered by federation::AnswerVote on the
  // kept record; a granted real vote is stored before it is answered, and
  // signed. NOT_FOUND when no record of the job is kept here.
  absl::StatusOr<v1::VoteResponse> Vote(const std::string& from, const v1::VoteRequest& req);

  // recovery: replace and checkpoints.
  // The job's checkpoint folder here (FEDGATE_CHECKPOINT_DIR of its ranks).
  std::string CheckpointDir(const std::string& job) const;
  // Called (without locks) when a coordinator asks this site to copy a
  // checkpoint step of a job to other sites.
  void SetOnCheckpointAsk(
      std::function<void(const std::string&, uint64_t, std::vector<std::string>)> fn) {
    on_checkpoint_ask_ = std::move(fn);
  }
  // A job whose checkpoints this site copies: where they are, how many to
  // keep, the other sites of its world, who owns the files.
  struct CheckpointJob {
    // dir: the ranks' folder (theirs: never trusted); staging: the gateway's
    // own folder beside it (same file system, no rank may enter), where
    // copies are received, and pruned steps are moved before removal.
    std::string job_id, dir, staging;
    uint32_t keep = 0;
    std::vector<std::string> others;
  };
  std::vector<CheckpointJob> CheckpointJobs();
  // May `from` send this site checkpoints of `job`? The job's folder when
  // it may (a site of the world of a slice of the job held here).
  absl::StatusOr<CheckpointJob> CheckpointReceiver(const std::string& from,
                                                   const std::string& job);
  const RankUser& rank_user() const { return runner_->user(); }
  // participant_service.cc: where the running replica `job_id` (a service's
  // one-rank slice here) listens, for its coordinator `from` relaying a
  // request of `tenant`: NOT_FOUND when none runs here, PERMISSION_DENIED
  // when it is another coordinator's or tenant's.
  struct ServedReplica {
    std::string addr;
    uint32_t port = 0;
  };
  absl::StatusOr<ServedReplica> ServiceReplica(const std::string& from, const std::string& tenant,
                                               const std::string& job_id);
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

  // The participant's lock, for tests that check no slow work runs under
  // it (a fake RankRunner tries it from another thread).
  std::mutex& mutex_for_test() ABSL_LOCK_RETURNED(mu_) { return mu_; }

 private:
  // Lock order: quota_write_mu_, then mu_, then stored_mu_ (the reaper's
  // and the store's own locks are leaves). Under mu_ only memory is changed
  // and processes are signalled; spawns, store writes, cgroup writes and
  // sleeps happen after it is released. The one file written under it is a
  // preemption's deadline file, which must exist before its SIGTERM.
  struct LaunchPlan;  // participant_commit.cc
  // The folder of every dataset the commit names; FAILED_PRECONDITION for
  // one this site does not hold (verified).
  absl::StatusOr<std::map<std::string, std::string>> DatasetDirs(const v1::CommitRequest& req) const;
  struct SweepOutcome;  // participant_sweep.cc
  using Allocs = SiteBackend::Allocs;

  // participant_restart.cc: what the previous run left.
  void CleanUpAfterRestart();
  // participant_fence.cc: the deadline each slice's shims stop its ranks at
  // by themselves, should this gateway stop renewing it (dead, stopped or
  // cut off): the participant's own stop time plus a margin, so that a live
  // gateway stops them first. Written beside the slice's logs (not in the
  // ranks' reach), pushed forward by each renewal, never by a restart.
  struct FenceWrite {
    std::string path;
    int64_t deadline_ms = 0;
  };
  std::string FencePath(const v1::ReservationKey& key) const;
  FenceWrite FenceOfLocked(const Slice& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void WriteFence(const FenceWrite& f) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status StatusLocked(const std::string& from, const v1::SliceStatusRequest& req,
                            v1::SliceStatusResponse* resp, bool* checkpoints, FenceWrite* fence)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Abort with keep_hold: stops the ranks, keeps the GPUs.
  absl::StatusOr<v1::AbortResponse> Halt(const std::string& from, const v1::AbortRequest& req);
  // participant_relaunch.cc: a commit of a higher restart to a parked slice.
  absl::StatusOr<v1::CommitResponse> Relaunch(const std::string& from,
                                              const v1::CommitRequest& req);
  void RestoreCordons();
  // Re-attaches to a slice stored before a restart; false when it cannot
  // (then its ranks are stopped).
  bool ReattachLocked(const StoredSlice& row, const v1::SliceRecord& rec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stored slice that cannot be followed: its ranks are killed and it
  // answers FAILED to its coordinator.
  Slice StopStoredSliceLocked(const StoredSlice& row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueLeftoverCgroupsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseUsageOfStopped(const std::set<SliceKey>& attached);

  // participant_commit.cc
  absl::Status CheckCommitRequest(const v1::CommitRequest& req) const;
  // Which held GPU each rank of the request takes (the hold's indices, in
  // order, node by node); INVALID_ARGUMENT unless the ranks fit exactly.
  static absl::StatusOr<std::vector<uint32_t>> MatchRanksToHold(const federation::Hold& held,
                                                                const v1::CommitRequest& req);
  absl::Status PrepareWorkDir(const std::string& job, bool checkpoints) const;
  absl::StatusOr<LaunchPlan> CommitHoldLocked(const std::string& from, const v1::CommitRequest& req,
                                              std::string cgroup)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What ranks of `req` start with on the GPUs of `hold` (commit and restart).
  LaunchPlan PlanLaunchLocked(const federation::Hold& hold, std::vector<uint32_t> gpu_of,
                              const v1::CommitRequest& req, std::string cgroup) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::pair<std::string, std::string>> RankEnvironment(
      const LaunchPlan& plan, const v1::CommitRequest& req, int i) const;
  void LaunchRanks(const LaunchPlan& plan, const v1::CommitRequest& req, Slice* out,
                   v1::SliceRecord* rec);
  // What a restart needs to know of the slice besides its ranks.
  void FillRecord(const LaunchPlan& plan, const v1::CommitRequest& req, v1::SliceRecord* rec);
  void RecordSlice(const LaunchPlan& plan, const Slice& launched, const v1::SliceRecord& rec,
                   bool open_usage = true);
  void AttachLaunched(const v1::ReservationKey& key, Slice launched);

  // participant_job_copy.cc: keeps `copy` from `from` beside the hold of
  // `key` when it is newer than the kept one; returns the version kept
  // afterwards (0 = none). Writes the store: call without mu_.
  uint64_t KeepJobCopy(const std::string& from, const v1::ReservationKey& key,
                       const v1::JobCopy& copy);
  // participant_witness.cc: the record `from` sent, when it names this site
  // one of the job's witnesses (checked in full by CheckCopy after); and a
  // witness's record forgotten once its job left RUNNING (returns `version`,
  // so the coordinator counts it told).
  std::optional<v1::Job> WitnessCopy(const v1::JobCopy& copy, const std::string& job_id,
                                     const std::string& from) const;
  // A copy saying the job left RUNNING, from the coordinator of the record
  // kept here (nullopt: not such a copy): the record is forgotten, or, while
  // a slice here still holds GPUs, marked ended. Returns the version to ack.
  std::optional<uint64_t> ForgetEndedCopy(const std::string& from, const std::string& job_id,
                                          const v1::JobCopy& copy) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t CopyVersionLocked(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fencing: with a record of the job kept here, a call is served only at
  // the record's term and from its coordinator (FAILED_PRECONDITION for an
  // older term, PERMISSION_DENIED for a term or caller it does not grant).
  // `grants` (verified) let a call move the record to a higher term: the
  // job's holds then belong to `from`, and `*persist` is what to store
  // before answering. `brought`: the record the call carries, if any (a
  // newer one may be a step of a change of members not kept here yet).
  // How much longer than its lease a slice of the job runs unrenewed: the
  // time a takeover needs, when the job may be taken over (else 0).
  int64_t FenceExtraLocked(const std::string& job_id, int64_t lease_ms) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct BroughtRecord {
    uint64_t version = 0;
    std::vector<std::string> members;
  };
  static std::optional<BroughtRecord> Brought(const v1::SliceStatusRequest& req);
  absl::Status CheckTermLocked(const v1::ReservationKey& key, const std::string& from,
                               const std::vector<federation::Grant>& grants = {},
                               std::optional<StoredJobTerm>* persist = nullptr,
                               const BroughtRecord* brought = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The grants that verify (signature, certificate, granter), without locks;
  // those that do not are counted as "bad_grant".
  std::vector<federation::Grant> VerifyGrants(
      const google::protobuf::RepeatedPtrField<v1::SignedGrant>& signed_grants);
  // Stores a changed term state of a kept job (before the answer goes out).
  absl::Status PersistTerm(const std::string& job_id, const std::optional<StoredJobTerm>& t);
  // Copies of jobs no slice of which holds GPUs here: forgotten in memory, and
  // returned for the caller to delete from the store after the lock.
  std::vector<std::string> OrphanCopiesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoadCopies();
  void MarkCopiesRestoredAloneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // participant_sweep.cc
  void SweepSliceLocked(Slice* s, int64_t now, SweepOutcome* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets finished slices past the window or the cap; their keys.
  std::vector<SliceKey> PruneFinishedLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A released slice's end as its row keeps it (no GPUs); and back, at a
  // restart (participant_restart.cc).
  static v1::SliceRecord EndedRecordOf(const Slice& s);
  static Slice EndedSliceOf(const StoredSlice& row, const v1::SliceRecord& rec);
  void FinishSweep(SweepOutcome out);
  void RunSweeper();

  std::string WorkDir(const std::string& job) const;
  // Reservations whose hold is gone (aborted, expired, released): given
  // back by the caller after the lock is dropped.
  std::vector<Allocs> StaleAllocsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::NodeView NodeLocked(const federation::Node& n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const federation::Node* FindNodeLocked(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // keep_hold: the ranks stop but the GPUs stay held (recovery: replace);
  // the slice parks once every rank exited.
  void StopSliceLocked(Slice* s, const std::string& why, int64_t grace_ms = 0,
                       bool keep_hold = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For a guaranteed job that found too few free GPUs: stops the cheapest
  // preemptible slices covering what it lacks and keeps their GPUs for it.
  // The refusal to return (UNAVAILABLE "preempting ...", or the original).
  absl::Status PreemptLocked(const std::string& job_id,
                             const std::vector<federation::NodeRequest>& want,
                             const absl::Status& refused) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t GpusComingLocked(const std::string& job_id, const std::string& node,
                            size_t* waiting) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The backend's reservation for a prepared hold (Slurm: an allocation
  // per node), made without the lock; an error drops the hold.
  absl::Status ReserveInBackend(const v1::PrepareRequest& req, const v1::PrepareResponse& resp);

  // participant_quota.cc
  v1::TenantQuota QuotaViewLocked(const federation::TenantQuota& q) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoadQuotas();
  // One stored row per committed quota hold, written without mu_; the sweep
  // deletes released ones. A row written after its hold was released and
  // swept stays until a restart restores it and its lease lapses.
  void PersistQuotaHold(const federation::QuotaHold& h) ABSL_LOCKS_EXCLUDED(mu_);
  // Stored rows whose hold is gone (clears quota_dirty_); DeleteQuotaRows
  // removes them in one transaction, outside mu_.
  std::vector<SliceKey> ReleasedQuotaRowsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeleteQuotaRows(const std::vector<SliceKey>& released) ABSL_LOCKS_EXCLUDED(mu_);

  // participant_logs.cc
  std::string LogPath(const std::string& job, uint32_t attempt, uint32_t rank) const;
  absl::Status WriteLogOwner(const std::string& job, const std::string& from);
  static uint32_t LatestAttempt(const std::string& job_dir);

  const Config config_;
  const federation::Clock* clock_;
  const size_t max_finished_;
  Store* store_;
  std::unique_ptr<RankRunner> runner_ = std::make_unique<ProcessExecutor>();
  std::unique_ptr<SiteBackend> backend_ = MakeProcessBackend();
  const DatasetRegistry* datasets_ = nullptr;
  DatasetStager* stager_ = nullptr;
  CgroupSupport cgroups_;
  CgroupReaper reaper_;
  std::mutex quota_write_mu_;  // one SetQuota at a time writes the quotas row
  std::mutex mu_;
  // The site's nodes: the config's, or the resource manager's (RefreshNodes).
  std::vector<federation::Node> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<SliceKey, Allocs> allocs_ ABSL_GUARDED_BY(mu_);
  federation::ReservationLedger ledger_ ABSL_GUARDED_BY(mu_);
  federation::QuotaLedger quota_ ABSL_GUARDED_BY(mu_);
  bool quota_dirty_ ABSL_GUARDED_BY(mu_) = false;  // holds released since last stored
  std::mutex stored_mu_;
  std::set<federation::QuotaLedger::Key> stored_quota_holds_ ABSL_GUARDED_BY(stored_mu_);
  std::map<SliceKey, Slice> slices_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, KeptCopy> copies_ ABSL_GUARDED_BY(mu_);  // by job id
  std::map<std::string, uint64_t> term_refused_ ABSL_GUARDED_BY(mu_);  // by reason
  AdAuthority* grant_authority_ = nullptr;
  std::function<void()> on_change_;
  std::function<void(const std::string&, uint64_t, std::vector<std::string>)> on_checkpoint_ask_;
  std::function<void(const std::vector<federation::UsageRecord>&)> on_usage_;
  std::atomic<bool> stop_{false};
  bool detached_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

}  // namespace fedgate::gateway
