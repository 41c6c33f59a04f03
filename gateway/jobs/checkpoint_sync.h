// Checkpoints at every site of a job (checkpoint: in its spec). A thread of
// its own watches the checkpoint folders of this site's slices: a new
// step-<N> is copied to every other site of the job's world over the
// gateways' mTLS connections (PushCheckpoint: streamed in 1 MiB chunks,
// resumed where a broken copy stopped, checked by SHA-256, made visible at
// the destination by rename), and only the newest `keep` stay. Copies run
// one at a time on that thread: ads, renewals and reservation calls never
// wait for them. The ranks' folder is theirs and never trusted: files are
// read without following links and only when the ranks' user owns them;
// a copy is received in the gateway's own staging folder (never under a
// name like step-<digits>) and moved into place through a descriptor that
// does not follow a link; pruned steps are moved out before removal.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "fedgate/v1/federation.grpc.pb.h"
#include "gateway/jobs/checkpoint_files.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

class Metrics;

class CheckpointSync {
 public:
  using StubFor = std::function<std::shared_ptr<v1::PeerService::Stub>(const std::string&)>;
  CheckpointSync(std::string site, Participant* participant, StubFor stubs, Metrics* metrics);
  ~CheckpointSync();
  static void DescribeMetrics(Metrics* metrics);
  void Start();
  void Stop();

  // A coordinator asks: copy `step` of `job` to `to` (a replacement slice's
  // site). Queued; the copy thread does it next.
  void Ask(const std::string& job, uint64_t step, std::vector<std::string> to);

  // One incoming copy (a PushCheckpoint stream), fed chunk by chunk.
  class Incoming {
   public:
    ~Incoming();
    absl::Status Add(const v1::CheckpointChunk& chunk);
    // After the last chunk: checks and publishes the step.
    absl::StatusOr<v1::PushCheckpointResponse> Finish();

   private:
    friend class CheckpointSync;
    explicit Incoming(CheckpointSync* owner, std::string from)
        : owner_(owner), from_(std::move(from)) {}
    absl::Status Begin(const v1::CheckpointChunk& first);
    absl::Status Fail(absl::Status st, const char* reason);
    CheckpointSync* owner_;
    std::string from_, job_, dir_, staging_root_, staging_;
    uint64_t step_ = 0;
    bool begun_ = false, present_ = false, last_ = false, claimed_ = false;
    uint64_t bytes_ = 0;
    v1::PushCheckpointResponse resp_;
    std::vector<v1::CheckpointFile> manifest_;
    struct Hashing {
      std::unique_ptr<Sha256> sha;
      uint64_t bytes = 0;
    };
    std::map<std::string, Hashing> hashes_;  // by path, as chunks arrive
  };
  std::unique_ptr<Incoming> Receive(const std::string& from) {
    return std::unique_ptr<Incoming>(new Incoming(this, from));
  }
  absl::StatusOr<v1::CheckpointProgressResponse> Progress(const std::string& from,
                                                          const v1::CheckpointProgressRequest& req);

  // One pass of the copy thread (tests call it directly).
  void Pass();

 private:
  struct Ask_ {
    std::string job;
    uint64_t step = 0;
    std::vector<std::string> to;
  };
  void Loop();
  // Copies one step to one site; OK when the site has it afterwards.
  absl::Status Push(const std::string& job, const std::string& dir, uint64_t step,
                    const std::string& to);
  absl::Status PushFiles(v1::PeerService::Stub* stub, const std::string& job,
                         const std::string& step_path, uint64_t step,
                         std::vector<v1::CheckpointFile> manifest,
                         const v1::CheckpointProgressResponse& have);
  // Streams one file from `offset` (hashing it whole) and fills in its
  // digest; false when the stream broke.
  absl::StatusOr<bool> SendFile(grpc::ClientWriter<v1::CheckpointChunk>* writer,
                                const std::string& step_path, uint64_t offset,
                                std::vector<char>* buf, v1::CheckpointFile* f);
  void Count(const char* name, const std::string& reason, double by = 1);
  bool ClaimIncoming(const std::string& key);
  void ReleaseIncoming(const std::string& key);

  const std::string site_;
  Participant* participant_;
  StubFor stubs_;
  Metrics* metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Ask_> asks_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> incoming_ ABSL_GUARDED_BY(mu_);  // job/step being received
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Copy thread only: newest step each site has of each job, when a failed
  // site may be tried again, names already complained about.
  std::map<std::pair<std::string, std::string>, uint64_t> sent_;
  std::map<std::string, int64_t> retry_at_ms_;
  std::set<std::string> warned_;
  // The copy in flight, cancelled by Stop (set and cleared by the copy
  // thread, under the lock, so Stop never touches a finished one).
  std::mutex active_mu_;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(active_mu_) = nullptr;
  std::thread thread_;
};

}  // namespace fedgate::gateway
