// Staging: a site chosen for a job without its datasets pulls them from
// holders before its ranks start. One copy per dataset at a time, each on a
// thread of its own (a reservation round only asks how far it got): the
// holder's manifest must have the digest the coordinator chose, files come
// by offset into <datasets_cache.path>/.staging/ (a broken copy resumes
// there, from the next holder if one went away), every file is checked
// against its SHA-256, and the folder is renamed into place only when whole,
// so ranks never see a partial copy. Staged copies are kept as a cache,
// least recently used evicted first (never one a slice uses) within
// datasets_cache.max.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "fedgate/v1/federation.grpc.pb.h"
#include "gateway/datasets/dataset_registry.h"
#include "gateway/ops/metrics.h"

namespace fedgate::gateway {

class DatasetStager {
 public:
  using StubFor = std::function<std::shared_ptr<v1::PeerService::Stub>(const std::string&)>;
  DatasetStager(std::string site, std::string cache_dir, uint64_t max_bytes,
                DatasetRegistry* registry, StubFor stubs, Metrics* metrics);
  ~DatasetStager();
  DatasetStager(const DatasetStager&) = delete;
  DatasetStager& operator=(const DatasetStager&) = delete;

  // Datasets slices of this site read now (never evicted).
  void SetInUse(std::function<std::set<std::string>()> fn) { in_use_ = std::move(fn); }

  // Starts the copy of every item this site lacks (or reports the one
  // running, or the one that failed since the last ask); never waits.
  v1::StageResponse Ensure(const std::vector<v1::StageItem>& items);
  // Cancels the copies in flight and waits for their threads.
  void Stop();

 private:
  struct Copy {
    v1::StageItem item;
    std::atomic<uint64_t> done{0};
    std::atomic<uint64_t> total{0};
    std::atomic<bool> finished{false};
    std::atomic<int64_t> progress_ms{0};  // steady clock: the last byte (or start)
    std::mutex mu;
    std::string error, source;               // under mu
    grpc::ClientContext* active = nullptr;   // under mu: the fetch in flight
    std::thread thread;
  };
  // A holder that sends nothing for this long is cut off (the next one is
  // tried): a hung connection must not hold a copy forever.
  static constexpr int64_t kStallMs = 60000;
  void Run(Copy* c);
  // `*transfer_s`: the time the files took to arrive (before they are checked).
  absl::Status CopyFrom(const std::string& source, Copy* c, double* transfer_s);
  absl::Status FetchFile(v1::PeerService::Stub* stub, const v1::StageItem& item,
                         const v1::DatasetFile& f, const std::string& dest, Copy* c);
  // Room for `bytes` more in the cache: least recently used copies that no
  // slice reads are removed. FAILED_PRECONDITION when that is not enough.
  absl::Status MakeRoom(uint64_t bytes, const std::string& keep);
  void Refused(const std::string& reason);

  const std::string site_, cache_dir_;
  const uint64_t max_bytes_;
  DatasetRegistry* registry_;
  StubFor stubs_;
  Metrics* metrics_;
  std::function<std::set<std::string>()> in_use_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Copy>> copies_ ABSL_GUARDED_BY(mu_);  // by name
  std::mutex room_mu_;  // one eviction decision at a time
};

}  // namespace fedgate::gateway
