// The participant side of running jobs at one site: the GPU ledger (two-phase
// holds), the slices of ranks it runs, their leases, and their logs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/reservation.h"
#include "fedgate/v1/federation.pb.h"
#include "gateway/config.h"
#include "gateway/process_executor.h"

namespace fedgate::federation {
class Clock;
}

namespace fedgate::gateway {

class Store;

class Participant {
 public:
  // `store` remembers the rank processes of running slices, so that after a
  // crash the restarted gateway stops them (and reports their slices failed)
  // instead of leaving them running untracked.
  Participant(const Config& config, const federation::Clock* clock, Store* store);
  ~Participant();
  void Start();
  void Stop();
  // Called (without locks) whenever free GPUs change, to re-advertise.
  void SetOnCapacityChange(std::function<void()> fn) { on_change_ = std::move(fn); }

  absl::StatusOr<v1::PrepareResponse> Prepare(const v1::PrepareRequest& req);
  absl::Status Commit(const v1::CommitRequest& req);
  absl::Status Abort(const v1::AbortRequest& req);
  v1::SliceStatusResponse Status(const v1::SliceStatusRequest& req);
  absl::StatusOr<v1::ReadLogResponse> ReadLog(const std::string& job_id, uint32_t rank);

  // Free GPUs per node right now (total minus held and running).
  std::map<std::string, uint32_t> FreeGpus();

 private:
  struct RankProc {
    uint32_t rank = 0;
    pid_t pid = -1;
    bool exited = false;
    int code = 0;
  };
  struct Slice {
    v1::ReservationKey key;
    std::vector<RankProc> ranks;
    int64_t lease_deadline_ms = 0;
    int64_t lease_ms = 0;
    std::string state = "running";  // running, succeeded, failed
    std::string message;
    bool stopping = false;
    int64_t kill_at_ms = 0;
  };
  void Sweep();
  void CleanUpAfterRestart();
  void StopSliceLocked(Slice* s, const std::string& why);
  std::string LogPath(const std::string& job, uint32_t attempt, uint32_t rank) const;

  Config config_;
  const federation::Clock* clock_;
  Store* store_;
  ProcessExecutor exec_;
  std::mutex mu_;
  federation::ReservationLedger ledger_;
  std::map<std::string, Slice> slices_;               // by job id
  std::map<std::string, uint32_t> latest_attempt_;    // by job id, for logs
  std::function<void()> on_change_;
  std::atomic<bool> stop_{false};
  std::thread sweeper_;
};

}  // namespace fedgate::gateway
