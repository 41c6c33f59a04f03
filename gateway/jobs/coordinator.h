// The coordinator of the jobs submitted here. Two loops, each its own thread:
// - placement: places pending jobs and runs the two-phase reservation
//   (Prepare on every chosen site at once, the decision written durably, then
//   Commit everywhere at once);
// - renewal: every fifth of the lease, pages through every running job and
//   asks every site of every job for its slice's state at once (which renews
//   the slice's lease), then ends, retries or re-commits jobs.
// Every write of a job is a compare-and-set through the job state machine:
// a loop that loses (the job was cancelled meanwhile) re-reads and never
// overwrites. Calls carry deadlines of a quarter of the lease; sites known to
// be down are not called.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
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
#include "federation/member_contact.h"
#include "federation/scheduler.h"
#include "fedgate/v1/federation.pb.h"
#include "fedgate/v1/jobs.pb.h"
#include "gateway/peering/core.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

class FanOut;
class ParticipantCalls;

class Coordinator {
 public:
  Coordinator(GatewayCore* core, JobStore* store, ParticipantCalls* participants);
  ~Coordinator();
  void Start();
  void Stop();

  // Stops the job's slices everywhere (cancel); returns without waiting for
  // the sites: a silent site's lease stops its slice anyway.
  void StopRun(const JobRecord& job, const std::string& reason, int64_t grace_ms = 0);
  // Reads a chunk of a rank's log from the site that runs it. The async form
  // calls `done` exactly once, possibly on the caller's thread.
  void ReadLogAsync(const JobRecord& job, const v1::ReadLogRequest& req,
                    std::function<void(absl::StatusOr<v1::ReadLogResponse>)> done);
  absl::StatusOr<v1::ReadLogResponse> ReadLog(const JobRecord& job, const v1::ReadLogRequest& req);
  // How long a slice keeps running without hearing from this coordinator.
  int64_t lease_ms() const { return lease_ms_; }
  // The deadline of a renewal (SliceStatus) and of an abort: well under a
  // third of the lease.
  int64_t rpc_timeout_ms() const { return lease_ms_ / 4; }
  // The deadline of Prepare and Commit, which run on the placement thread
  // (never in the way of renewals): a commit spawns every rank of a slice.
  int64_t reserve_timeout_ms() const { return std::clamp<int64_t>(lease_ms_ / 2, 2000, 5000); }

  // Called with each job's wait from submit to RUNNING (seconds) and its
  // tenant and priority; set before Start.
  void SetOnScheduled(std::function<void(double, const JobRecord&)> fn) {
    on_scheduled_ = std::move(fn);
  }

  // Called with each reservation phase ("prepare", "commit"), whether it
  // succeeded everywhere, and its duration in seconds; and with the end of
  // each reservation (committed or aborted). Set before Start.
  void SetOnReservation(std::function<void(const char*, bool, double)> fn) {
    on_phase_ = std::move(fn);
  }
  void SetOnReservationEnd(std::function<void(bool)> fn) { on_reservation_end_ = std::move(fn); }

  // One pass of each loop; the threads run them, tests call them directly
  // (with a FakeClock, without Start). Both block until every call they make
  // has answered or passed its deadline.
  void PlacePass();
  void RenewPass();

  // coordinator_moved.cc: a job this site took over (coordinator takeover),
  // written into its store at its new term; `grants` (a majority of the
  // members') go with its renewals until every site accepted them.
  // FAILED_PRECONDITION when the store has the job at that term already.
  absl::Status Adopt(JobRecord job, std::vector<v1::SignedGrant> grants);
  // coordinator_queue.cc: a job's record before its first world. At
  // submit, up to two peers are named witnesses of the queued record (none
  // with takeovers off, for a service, or with fewer than two peers up);
  // then they are sent it, and `then` runs once a majority of its members
  // keep it or every witness answered (a submit is acknowledged after it).
  void NameQueueWitnesses(JobRecord* job) const;
  void TellQueueWitnesses(const JobRecord& job, std::function<void()> then);
  // Jobs taken over by this site, and handed over by it, since start.
  uint64_t takeovers() const { return takeovers_; }
  uint64_t stepped_down() const { return stepped_down_; }

  // For benchmarks and tests: renewal passes done, and the longest time a
  // running slice went without a successful renewal, among sites that answered.
  uint64_t renew_passes() const { return renew_passes_; }
  int64_t worst_renew_gap_ms() const { return worst_gap_ms_; }

 private:
  // coordinator_place.cc: the scheduling pass.
  void PlaceLoop();
  void LoadFairShare();
  // The decayed usage with the tenants' weights, for one pass.
  federation::FairShare CurrentShare();
  // coordinator_reserve.cc: one job's reservation round.
  // Places and reserves one job; true when its ranks were committed.
  bool TryStart(JobRecord job, const std::vector<std::string>& unreachable);
  // Saves why the job waits (when it changed); always false.
  bool Wait(JobRecord* job, std::string reason, int64_t now);
  // Why a guaranteed job of a governed tenant cannot hold quota now ("" =
  // it may try); sets its home and whether it stays within nominal quota.
  std::string QuotaWait(const JobRecord& job, const std::vector<std::string>& unreachable,
                        std::optional<GatewayCore::TenantHome>* home, bool* within_nominal);
  // A placement for the job, or why it waits (`*why`).
  std::optional<v1::PlanResponse> PlaceJob(const JobRecord& job, const v1::RunPlan& run,
                                           const std::vector<std::string>& unreachable,
                                           bool may_preempt, bool* preempt, std::string* why);
  // The virtual cluster of a placement: ranks site by site, node by node.
  v1::RunPlan VirtualCluster(const v1::PlanResponse& plan, const JobRecord& job,
                             const v1::RunPlan& previous, const std::string& quota_site,
                             uint64_t epoch) const;
  // Phase one on every site at once (and the home site's quota hold).
  std::vector<absl::StatusOr<v1::PrepareResponse>> PrepareAll(
      const JobRecord& job, const v1::RunPlan& next,
      const std::map<std::string, uint32_t>& quota_gpus, bool preempt,
      std::vector<v1::PrepareRequest>* reqs, int* quota_index);
  // The decision, durable, then phase two; true when every site committed.
  bool DecideAndCommit(JobRecord job, const v1::RunPlan& next);
  // coordinator_queue.cc: the decided record sent to the new world's
  // members and the queued record's before any commit; "" once a majority
  // of each keeps it, else why not (then nothing is committed).
  std::string RecordAtMajorities(const JobRecord& job, const v1::RunPlan& run,
                                 const std::vector<std::string>& queued);
  // The queued record a reservation that did not happen goes back to.
  static v1::RunPlan QueuedPlanOf(const v1::RunPlan& next, const std::vector<std::string>& queued,
                                  const std::string& self);
  // The record a job whose world ended goes back to the queue with: queued
  // at that world's members (its configuration), so the next world must
  // reach a majority of them and they keep the term meanwhile; `run` as it
  // is where nobody may take the job over.
  v1::RunPlan RequeuedPlanOf(const v1::RunPlan& run) const;
  // The peers that may be named witnesses now (heard, not gone silent).
  std::vector<std::string> UpPeers() const;
  // coordinator_stage.cc: what each site of `run` must stage, and the wait
  // for it ("" once every site has its datasets, else why not).
  struct StagePlan {
    std::string site;
    uint64_t epoch = 0;
    std::vector<v1::StageItem> items;
  };
  std::vector<StagePlan> StagingFor(const JobRecord& job, const v1::RunPlan& run);
  std::string StageDatasets(JobRecord* job, const v1::RunPlan& run);
  // Stages and then commits (or undoes) the reservation on a thread of its own.
  void StageThenCommit(JobRecord job, v1::RunPlan next);
  bool IsStaging(const std::string& job_id);
  void JoinStaging(bool all);
  // One ask of every staging site at once (each keeps its hold alive).
  std::vector<absl::StatusOr<v1::StageResponse>> AskStaging(const JobRecord& job,
                                                            const std::vector<StagePlan>& plans);
  // Adds an ended run's GPU-seconds to its tenant's fair-share usage.
  void RecordUsage(const JobRecord& job, const v1::RunPlan& run, int64_t now_ms);
  void UndoReservation(JobRecord job, const std::string& why);
  // coordinator_renew.cc: the renewal pass and what it concludes. One
  // job's calls: its sites' answers in the order of run.sites() (then its
  // quota home's), its witnesses' in the order of `witnesses`.
  struct RenewWork {
    JobRecord job;
    v1::RunPlan run;
    std::vector<absl::StatusOr<v1::SliceStatusResponse>> answers;
    std::vector<std::string> witnesses;  // but this site
    std::vector<absl::StatusOr<v1::SliceStatusResponse>> witness_answers;
  };
  void RenewLoop();
  // Asks every site of one job for its slice (calls to this site go to
  // `local`, made after the remote ones are out).
  void AskRenewal(RenewWork* w, const std::set<std::string>& down, FanOut* fan,
                  std::vector<std::function<void()>>* local);
  // The queued jobs of one renewal pass (PENDING before their first world,
  // and reserving it): their members are renewed, and told the end.
  void AskQueued(RenewWork* w, const std::set<std::string>& down, FanOut* fan);
  bool QueueHeard(const std::string& job_id, int64_t now);
  // coordinator_witness.cc: one renewal call to each of w->witnesses (not
  // those down), with the term's grants where not yet accepted, and the
  // record where `acked` (null: never) says the member's copy is older.
  void RenewMembers(RenewWork* w, const std::set<std::string>& down, FanOut* fan, uint64_t epoch,
                    const std::map<std::string, uint64_t>* acked);
  // What a pass's answers about queued jobs say: moved away, heard by a
  // majority, the members to tell their end; `queued` gets those still here.
  void NoteQueued(const std::vector<std::unique_ptr<RenewWork>>& work, int64_t sent, int64_t now,
                  std::set<std::string>* queued);
  // coordinator_moved.cc: the grants of a job taken over, on a renewal to a
  // site that has not accepted them yet, and which sites did.
  void AttachGrants(const JobRecord& job, const std::string& site, v1::SliceStatusRequest* req);
  void GrantsAnswered(const RenewWork& w);
  // True (and the job handed over) when a site says its term moved on to
  // another coordinator; answers of sites past the term count as silent.
  bool StepDownIfMoved(JobRecord job,
                       std::vector<absl::StatusOr<v1::SliceStatusResponse>>* answers,
                       int64_t now);
  // Whether this pass heard a majority of the job's members (always, for a
  // job that cannot be taken over): without it nothing about the job changes.
  bool HearsMajority(const RenewWork& w, int64_t sent);
  // coordinator_witness.cc: a job's witnesses keep its record, renewed with
  // the pass like a slice (no hold, no ranks), and, like its slice sites
  // where it may be taken over, are told when it ended (or left RUNNING) so
  // that they forget it rather than take it over.
  void AskWitnesses(RenewWork* w, const std::set<std::string>& down, FanOut* fan,
                    std::vector<std::function<void()>>* local);
  void CallWitnesses(RenewWork* w, const std::set<std::string>& down, FanOut* fan);
  void NoteSitesToTell(const RenewWork& w);
  void TellMembersTheEnd(const std::set<std::string>& running);
  // At start: the jobs that ended here within the time members keep a
  // finished slice's record are told again (who was told died with the
  // process), so a member does not take over a job that is over.
  void RememberEndsToTell();
  // coordinator_contact.cc: the unbroken contact with each member of a job
  // (renewals answered, sent at `sent`), and how long a site of it that
  // went silent may be before its slice counts as lost: the short fence
  // when no majority can have confirmed its coordinator silent.
  void NoteContacts(const RenewWork& w, int64_t sent, int64_t now);
  int64_t LostAfterMs(const JobRecord& job, const v1::RunPlan& run,
                      const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers);
  void Judge(JobRecord job, const v1::RunPlan& run,
             const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers, int64_t now);
  // coordinator_replace.cc: recovery: replace. The verdict on a renewal
  // pass (renewal thread), the replacement slices and the new world's start
  // (placement thread).
  void JudgeReplace(JobRecord job, v1::RunPlan run,
                    const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                    int64_t now, int64_t lost_after_ms);
  // Halts the ranks at the sites `which`, keeping their GPUs.
  void Halt(const JobRecord& job, const v1::RunPlan& run, const std::vector<int>& which);
  void DriveReplacement(JobRecord job, const std::vector<std::string>& unreachable);
  // One replacement slice for the lost slice at run.sites(idx); false while
  // it cannot be had (the reason says why).
  bool ReplaceSlice(JobRecord* job, v1::RunPlan* run, int idx,
                    const std::vector<std::string>& unreachable);
  // coordinator_members.cc: Raft's single-server changes of a job's
  // members (where it may be taken over). The replacement of `lost` by
  // `target` gives `next` its first step: the new site joins (or, when it
  // already is a member, the lost one leaves). UNAVAILABLE while an earlier
  // step is not accepted yet.
  std::string PendingMemberChange(const v1::RunPlan& run) const;  // "" = none
  absl::Status BeginMemberChange(const JobRecord& job, const v1::RunPlan& run,
                                 const std::string& lost, const std::string& target,
                                 v1::RunPlan* next);
  // On a pass that heard a majority: the next step, once a majority of the
  // members before the last one holds it. False when the record moved on
  // meanwhile (the job is judged next pass).
  bool AdvanceMemberChange(RenewWork* w, int64_t now);
  // Moves `plan` to the site with the fastest links to the survivors.
  void PreferFastLinks(const JobRecord& job, const v1::RunPlan& run, int idx,
                       const v1::JobSpec& spec, v1::PlanResponse* plan);
  absl::StatusOr<v1::PrepareResponse> PrepareReplacement(const JobRecord& job,
                                                         const v1::PlanResponse& plan,
                                                         uint64_t epoch, bool rank0);
  // Commits the replacement at run.sites(idx) without starting its ranks.
  absl::Status CommitParked(const JobRecord& job, const v1::RunPlan& next, int idx);
  void RelaunchWorld(JobRecord job, v1::RunPlan run);
  // Commits the sites `which` (indices into run.sites) and, unless kNone,
  // the tenant's home site when it runs no ranks: waiting for its answer
  // (kAwait) or only sending it (kSend).
  enum class QuotaCommit { kNone, kAwait, kSend };
  absl::Status CommitAll(const JobRecord& job, const v1::RunPlan& run,
                         const std::vector<int>& which, QuotaCommit quota);
  v1::CommitRequest CommitFor(const JobRecord& job, const v1::RunPlan& run) const;
  std::vector<int> RemoteFirst(const std::vector<std::string>& sites) const;
  void ReleaseQuota(const JobRecord& job, const v1::RunPlan& run, const std::string& why);
  // A slice was preempted: the job waits again, and this attempt does not
  // count against max_attempts.
  void Preempted(JobRecord job, const v1::RunPlan& run, const std::string& site,
                 const std::string& by);
  void Fail(JobRecord job, const v1::RunPlan& run, const std::string& reason,
            const std::string& bad_site);
  void Succeeded(JobRecord job, const v1::RunPlan& run, const std::string& reason, int64_t now);
  void Sleep(int64_t ms);
  // The compare-and-set write; false (logged) when the job moved meanwhile.
  bool Save(JobRecord* job);
  // Adds to the job's story what is no change of its state (logged on failure).
  void Tell(const std::string& job_id, JobStoryEvent event);

  std::function<void(double, const JobRecord&)> on_scheduled_;
  std::function<void(const char*, bool, double)> on_phase_;
  std::function<void(bool)> on_reservation_end_;
  GatewayCore* core_;
  JobStore* store_;
  ParticipantCalls* participants_;
  const int64_t lease_ms_;
  // Decayed GPU-seconds per tenant of jobs that ended here (fair-share ties).
  std::mutex share_mu_;
  federation::FairShare share_ ABSL_GUARDED_BY(share_mu_);
  uint64_t last_epoch_ = 0;                                        // placement thread only
  std::map<std::string, std::map<std::string, int64_t>> last_ok_;  // renewal thread only
  // job -> member -> unbroken contact (renewal thread only).
  std::map<std::string, std::map<std::string, federation::MemberContact>> contact_;
  // The version of each job's record each site said it keeps (renewal
  // thread): a renewal carries the record to a site whose copy is older.
  std::map<std::string, std::map<std::string, uint64_t>> copy_acked_;
  // Checkpoint copies to ask for at the next renewal: job -> holder -> sites.
  std::map<std::string, std::map<std::string, std::vector<std::string>>> copy_asks_;  // renewal
  // Jobs taken over here whose grants not every site has accepted yet.
  struct Grants {
    uint64_t term = 0;
    std::vector<v1::SignedGrant> grants;
    std::set<std::string> accepted;  // sites that answered at the term
  };
  std::mutex grants_mu_;
  std::map<std::string, Grants> grants_ ABSL_GUARDED_BY(grants_mu_);  // by job id
  std::set<std::string> frozen_;  // jobs without a majority (renewal thread)
  // Jobs whose last pass heard a majority by their answers (renewal thread):
  // empty after a restart, so a job is not ended on this site's word alone
  // before its members have said it did not move.
  std::set<std::string> heard_majority_;
  // Queued jobs: the record version each witness keeps (renewal thread),
  // and when a majority last heard this coordinator (read by placement).
  std::map<std::string, std::map<std::string, uint64_t>> queued_acked_;
  std::mutex queue_mu_;
  std::map<std::string, int64_t> queue_heard_ms_ ABSL_GUARDED_BY(queue_mu_);
  // Jobs whose last commit went unanswered somewhere: a late commit may
  // start ranks there, so no next world before they surely stopped (until).
  std::map<std::string, int64_t> held_off_ms_ ABSL_GUARDED_BY(queue_mu_);
  void HoldOff(const JobRecord& job, const v1::RunPlan& run);
  bool HeldOff(const std::string& job_id, int64_t now);
  // Jobs seen running whose other members keep their record (witnesses;
  // slice sites where the job may be taken over), until each heard its end.
  struct Witnessed {
    v1::ReservationKey key;
    std::set<std::string> left;  // members not told yet
    int passes = 0;              // passes spent telling them
  };
  std::mutex witness_mu_;
  std::map<std::string, Witnessed> witnessed_ ABSL_GUARDED_BY(witness_mu_);
  // The members of a job's earlier world (an attempt re-placed) not told
  // yet: each is sent the current record, so that one that kept the old
  // one (a witness, a fenced slice) cannot lead the job back to it.
  std::map<std::string, Witnessed> superseded_ ABSL_GUARDED_BY(witness_mu_);
  // A new world of `job_id` (epoch `epoch`): its entry's members not told
  // yet move to superseded_, and the entry starts afresh.
  void SupersedeLocked(const std::string& job_id, uint64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(witness_mu_);
  void TellEarlierWorlds();
  // The notices of `notices` due this pass (none for a job in `running`);
  // those told, or past kEndNoticePasses, are dropped.
  std::vector<std::pair<std::string, Witnessed>> NoticesDueLocked(
      std::map<std::string, Witnessed>* notices, const std::set<std::string>& running)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(witness_mu_);
  // Sends `site` the record `copy` under `key`; its answer strikes it off.
  void SendNotice(std::map<std::string, Witnessed>* notices, const std::string& id,
                  const std::string& site, const v1::ReservationKey& key,
                  const v1::JobCopy& copy);
  std::atomic<uint64_t> takeovers_{0}, stepped_down_{0};
  std::atomic<uint64_t> renew_passes_{0};
  std::atomic<int64_t> worst_gap_ms_{0};
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool place_now_ ABSL_GUARDED_BY(wake_mu_) = false;
  bool renew_now_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::atomic<bool> stop_{false};
  std::thread placer_, renewer_;
  // Reservations waiting for their sites to stage datasets, each on a thread
  // of its own so the placement pass goes on meanwhile (coordinator_stage.cc).
  struct Staging {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> ended = std::make_shared<std::atomic<bool>>(false);
  };
  std::mutex staging_mu_;
  std::map<std::string, Staging> staging_ ABSL_GUARDED_BY(staging_mu_);  // by job id
};

}  // namespace fedgate::gateway
