#include "gateway/api/job_streams.h"

#include <mutex>

#include "federation/job_state.h"
#include "gateway/jobs/job_manager.h"
#include "gateway/security/authz.h"

namespace fedgate::gateway {
namespace {

// An unknown state ends a stream too: nothing more will come of it.
bool Ended(v1::Job::State state) {
  return !federation::FromProto(state) || federation::IsTerminal(state);
}

// Sends the job each time its state, attempt or reason changes; ends with OK
// once the job has ended.
class WatchReactor final : public grpc::ServerWriteReactor<v1::Job> {
 public:
  WatchReactor(JobManager* jobs, Identity caller, const std::string& id)
      : jobs_(jobs), caller_(std::move(caller)) {
    get_.set_id(id);
    if (auto st = jobs_->OpenStream(caller_); !st.ok()) {
      Finish(ToGrpc(st));
      return;
    }
    slot_ = true;
    // The first read answers bad ids and other tenants' jobs before any wait.
    auto first = jobs_->Get(caller_, get_);
    if (!first.ok()) {
      Finish(ToGrpc(first.status()));
      return;
    }
    std::lock_guard lock(mu_);
    token_ = jobs_->events()->Subscribe(id, false, [this] { Wake(); });
    SendLocked(first->job());
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    if (!ok) return FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    if (Ended(out_.state())) return FinishLocked(grpc::Status::OK);
    if (again_) {
      again_ = false;
      ReadLocked();
    }
  }

  void OnCancel() override {
    std::lock_guard lock(mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    if (token_ != 0) jobs_->events()->Unsubscribe(token_);
    { std::lock_guard lock(mu_); }  // whoever finished may still be unlocking
    if (slot_) jobs_->CloseStream(caller_);
    delete this;
  }

 private:
  void Wake() {
    std::lock_guard lock(mu_);
    if (writing_) {
      again_ = true;  // read again once the client has the last one
      return;
    }
    ReadLocked();
  }
  void ReadLocked() {
    if (finished_) return;
    auto got = jobs_->Get(caller_, get_);
    if (!got.ok()) return FinishLocked(ToGrpc(got.status()));
    SendLocked(got->job());
  }
  void SendLocked(const v1::Job& j) {
    if (finished_) return;
    std::string key = std::to_string(j.state()) + "|" + std::to_string(j.attempt()) + "|" + j.reason();
    if (key == last_) return;
    last_ = std::move(key);
    out_ = j;
    writing_ = true;
    StartWrite(&out_);
  }
  void FinishLocked(grpc::Status st) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(st));
  }

  JobManager* jobs_;
  const Identity caller_;
  v1::GetJobRequest get_;
  std::mutex mu_;
  uint64_t token_ = 0;
  bool slot_ = false;
  bool writing_ = false;
  bool again_ = false;
  bool finished_ = false;
  std::string last_;
  v1::Job out_;
};

// Streams a rank's log chunk by chunk from the request's offset: reads until
// nothing more is there, then (follow) waits for the next tick. Ends with OK
// when it has sent everything of a job that has ended (or at once without
// follow).
class LogsReactor final : public grpc::ServerWriteReactor<v1::LogsResponse> {
 public:
  LogsReactor(JobManager* jobs, Identity caller, const v1::LogsRequest& req)
      : jobs_(jobs), caller_(std::move(caller)), at_(req) {
    if (auto st = jobs_->OpenStream(caller_); !st.ok()) {
      Finish(ToGrpc(st));
      return;
    }
    slot_ = true;
    auto job = jobs_->Load(caller_, at_.id());
    if (!job.ok()) {
      Finish(ToGrpc(job.status()));
      return;
    }
    attempt_ = job->attempt;
    std::unique_lock lock(mu_);
    if (at_.follow()) {
      token_ = jobs_->events()->Subscribe(at_.id(), true, [this] { Wake(); });
    }
    StartReadLocked(lock);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mu_);
    busy_ = false;
    if (!ok) return FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    StartReadLocked(lock);  // more may be waiting: read on before the next tick
  }

  void OnCancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    // A read in flight finishes the call when it returns (by its deadline).
    if (!busy_ || writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    if (token_ != 0) jobs_->events()->Unsubscribe(token_);
    { std::lock_guard lock(mu_); }  // whoever finished may still be unlocking
    if (slot_) jobs_->CloseStream(caller_);
    delete this;
  }

 private:
  void Wake() {
    std::unique_lock lock(mu_);
    if (!busy_) StartReadLocked(lock);
  }

  // Loads the job (a new attempt starts a new log at 0), then reads a chunk.
  // The read's callback may run on this thread and may finish the call, so
  // the lock is let go first and `this` is not touched after the read starts.
  void StartReadLocked(std::unique_lock<std::mutex>& lock) {
    if (finished_) return;
    if (cancelled_) return FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    auto job = jobs_->Load(caller_, at_.id());
    if (!job.ok()) return FinishLocked(ToGrpc(job.status()));
    if (job->attempt != attempt_) {
      at_.set_offset(0);
      attempt_ = job->attempt;
    }
    const bool ended = federation::IsTerminal(job->state);
    busy_ = true;
    writing_ = false;
    lock.unlock();
    jobs_->ReadLogAsync(*job, at_, [this, ended](absl::StatusOr<v1::LogsResponse> log) {
      OnRead(std::move(log), ended);
    });
  }

  void OnRead(absl::StatusOr<v1::LogsResponse> log, bool ended) {
    std::lock_guard lock(mu_);
    if (cancelled_) return FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    if (!log.ok()) {
      // Before the rank has started there is no log yet: a follower waits.
      if (at_.follow() && absl::IsNotFound(log.status()) && !ended) {
        busy_ = false;
        return;
      }
      return FinishLocked(ToGrpc(log.status()));
    }
    if (!log->content().empty()) {
      at_.set_offset(log->offset() + log->content().size());
      out_ = std::move(*log);
      writing_ = true;
      StartWrite(&out_);
      return;
    }
    // Nothing new. A job that had ended before this read has no more to come.
    if (!at_.follow() || ended || Ended(log->state())) {
      return FinishLocked(grpc::Status::OK);
    }
    busy_ = false;
  }

  void FinishLocked(grpc::Status st) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(st));
  }

  JobManager* jobs_;
  const Identity caller_;
  v1::LogsRequest at_;
  uint32_t attempt_ = 0;
  std::mutex mu_;
  uint64_t token_ = 0;
  bool slot_ = false;
  bool busy_ = false;     // a read or a write is in flight
  bool writing_ = false;  // ... and it is the write
  bool cancelled_ = false;
  bool finished_ = false;
  v1::LogsResponse out_;
};

}  // namespace

grpc::ServerWriteReactor<v1::Job>* NewWatchReactor(JobManager* jobs, Identity caller,
                                                   const v1::WatchJobRequest& req) {
  return new WatchReactor(jobs, std::move(caller), req.id());
}

grpc::ServerWriteReactor<v1::LogsResponse>* NewLogsReactor(JobManager* jobs, Identity caller,
                                                           const v1::LogsRequest& req) {
  return new LogsReactor(jobs, std::move(caller), req);
}

}  // namespace fedgate::gateway
