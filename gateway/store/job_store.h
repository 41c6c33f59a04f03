// Durable jobs in the gateway's SQLite file. One writer thread owns the write
// connection and group-commits: every submit waiting when a transaction starts
// joins it, so many submits share one fsync. A submit returns only once its
// row is durable (WAL, synchronous=FULL). Reads use their own connection.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "federation/job_state.h"
#include "fedgate/v1/jobs.pb.h"

struct sqlite3;

namespace fedgate::gateway {

// One step of a job's story (v1::JobEvent without its formatting).
struct JobStoryEvent {
  int64_t time_ms = 0;
  std::string type;     // submitted, placed, staging, reserved, started, ...
  std::string site;     // "" = the job as a whole
  std::string message;
  uint64_t seq = 0;     // set when read back
};

struct JobRecord {
  std::string id;
  std::string tenant;
  std::string idempotency_key;  // "" = none
  v1::JobSpec spec;
  federation::JobState state = federation::JobState::kPending;
  uint32_t attempt = 0;
  std::string reason;
  int64_t created_at_unix_ms = 0;
  int64_t updated_at_unix_ms = 0;
  std::string run;  // serialized v1::RunPlan, "" before the first attempt
  uint64_t version = 0;  // bumped by every write; Save compares it
  uint64_t term = 1;     // the coordination term (a takeover raises it)
  // Who coordinates the job when this site no longer does (it moved at
  // `term`); "" = this site does.
  std::string moved_to;
  // Written by the next Submit or Save in the same transaction as the row
  // (a state and the event that says why land together), then cleared.
  std::vector<JobStoryEvent> new_events;
};

struct SubmitOutcome {
  JobRecord job;
  bool created = false;  // false: the idempotency key matched an earlier job
};

class JobStore {
 public:
  // `path` is the SQLite file, already migrated by Store::Open.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();

  absl::StatusOr<SubmitOutcome> Submit(JobRecord job);
  // The same without blocking: `done` runs on the writer thread once the row
  // is durable (or the write failed). Lets callers keep many submits in
  // flight so they share one fsync.
  void SubmitAsync(JobRecord job, std::function<void(absl::StatusOr<SubmitOutcome>)> done);
  absl::StatusOr<std::optional<JobRecord>> Get(const std::string& id);
  // Jobs of `tenant` ("" = every tenant) with ids after `after_id`, in id
  // order, at most `limit`; `state` filters when not empty.
  absl::StatusOr<std::vector<JobRecord>> List(const std::string& tenant, const std::string& state,
                                              const std::string& after_id, int limit);
  // Durably writes state, reason, attempt and run of an existing job, as a
  // compare-and-set: only if the stored version is still `job->version` (else
  // ABORTED: someone wrote since it was read; re-read and decide again) and
  // the state machine lets `who` move the stored state to `job->state` (else
  // FAILED_PRECONDITION). On success `job->version` is the new version.
  absl::Status Save(JobRecord* job, federation::JobActor who);
  // Writes a job taken over by this site (coordinator takeover) as its
  // record says, events included: a new row, or one of an older term.
  // FAILED_PRECONDITION, nothing written, when the row is at `job.term` or
  // later already.
  absl::Status Adopt(JobRecord job);
  // Appends events to a job's story without touching the job (progress that
  // is no change of state); durable on return. FAILED_PRECONDITION, and
  // nothing written, once the job has ended: its story ends with "finished".
  absl::Status AppendEvents(const std::string& job_id, const std::vector<JobStoryEvent>& events);
  // The job's events with seq > `after_seq`, oldest first, at most `limit`.
  absl::StatusOr<std::vector<JobStoryEvent>> Events(const std::string& job_id, uint64_t after_seq,
                                                    int limit);
  // Called with the job's id after every Save that landed (set before use).
  void SetOnWrite(std::function<void(const std::string&)> fn) { on_write_ = std::move(fn); }
  // Called on the writer thread after every transaction: its duration
  // (seconds, fsync included) and how many writes it carried.
  void SetOnCommit(std::function<void(double, size_t)> fn) { on_commit_ = std::move(fn); }
  // Every job that has not ended (PENDING, RESERVING, RUNNING), in no
  // particular order, read in one snapshot.
  absl::StatusOr<std::vector<JobRecord>> ListAllActive();
  // Jobs this site coordinates that ended (a terminal state) at or after
  // `since_unix_ms`: a restarted coordinator tells their members again.
  absl::StatusOr<std::vector<JobRecord>> ListEndedSince(int64_t since_unix_ms);
  // Jobs per state name (every state, zero included), and the creation time
  // of the oldest PENDING job (nullopt when none waits).
  struct Counts {
    std::map<std::string, int64_t> by_state;
    std::optional<int64_t> oldest_pending_created_ms;
    // (state, tenant, priority) -> GPUs, for PENDING, RESERVING and RUNNING.
    std::map<std::tuple<std::string, std::string, std::string>, int64_t> active_gpus;
  };
  absl::StatusOr<Counts> Count();

  // Transactions committed and the largest number of writes one carried.
  uint64_t commits() const { return commits_; }
  uint64_t largest_batch() const { return largest_batch_; }

 private:
  struct Write {
    std::function<absl::Status(sqlite3*)> apply;
    std::function<void(absl::Status)> done;
  };
  JobStore() = default;
  // The rows of one SELECT of kColumns (`arg` bound to ?1), read in one
  // snapshot; `what` names it in errors.
  absl::StatusOr<std::vector<JobRecord>> ListRows(const std::string& sql, const char* what,
                                                  std::optional<int64_t> arg);
  absl::Status Enqueue(std::function<absl::Status(sqlite3*)> apply);
  void EnqueueAsync(std::function<absl::Status(sqlite3*)> apply,
                    std::function<void(absl::Status)> done);
  void WriterLoop();

  std::function<void(const std::string&)> on_write_;
  std::function<void(double, size_t)> on_commit_;
  sqlite3* writer_ = nullptr;
  sqlite3* reader_ = nullptr;
  std::mutex read_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Write>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::atomic<uint64_t> commits_{0};
  std::atomic<uint64_t> largest_batch_{0};
};

// "j-" and 16 hex characters.
std::string NewJobId();

}  // namespace fedgate::gateway
