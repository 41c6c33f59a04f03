// The datasets this site holds: the configured ones, verified in the
// background at start against a manifest cached in data_dir (never inside
// the dataset), and announced once verified. A dataset that fails
// verification is refused: logged, counted, never announced or given to ranks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "fedgate/v1/federation.pb.h"
#include "gateway/config/config.h"
#include "gateway/ops/metrics.h"

namespace fedgate::gateway {

class DatasetRegistry {
 public:
  struct Held {
    std::string path;  // the folder ranks read
    v1::DatasetManifest manifest;
    bool cached = false;  // a staged copy
  };

  // `manifest_dir` is private to the gateway (under data_dir).
  DatasetRegistry(std::vector<DatasetConfig> configured, std::string manifest_dir, Metrics* metrics);
  ~DatasetRegistry();
  DatasetRegistry(const DatasetRegistry&) = delete;
  DatasetRegistry& operator=(const DatasetRegistry&) = delete;

  // Staged copies live here (<name>@<digest prefix>); those left by an
  // earlier run are verified at Start and announced again.
  void SetCacheDir(std::string dir) { cache_dir_ = std::move(dir); }
  // Verifies every configured dataset on a thread of its own.
  void Start();
  void Stop();
  // Blocks until the verification started by Start has ended (tests, tools).
  void WaitVerified();

  // What the ad announces: every verified dataset.
  std::vector<v1::DatasetAd> Ads() const;
  // A verified dataset by name.
  std::optional<Held> Find(const std::string& name) const;
  // Why a configured dataset is not offered ("" when it is or is pending).
  std::string Refusal(const std::string& name) const;

  // A staged copy, whole and verified, now held (its manifest is kept for
  // the next start).
  void AddCached(const std::string& name, const std::string& path, v1::DatasetManifest manifest);
  struct CachedCopy {
    std::string name, path;
    uint64_t bytes = 0;
    int64_t last_used_ms = 0;
  };
  // Staged copies, least recently used first.
  std::vector<CachedCopy> CachedByAge() const;
  // A staged copy taken out of the cache (its folder is the caller's to remove).
  void ForgetCached(const std::string& name);

 private:
  void VerifyAll();
  void LoadCache();
  void Refuse(const DatasetConfig& d, const std::string& reason, const std::string& why);

  const std::vector<DatasetConfig> configured_;
  const std::string manifest_dir_;
  Metrics* metrics_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);
  mutable std::map<std::string, int64_t> last_used_ms_ ABSL_GUARDED_BY(mu_);
  std::string cache_dir_;
  std::map<std::string, std::string> refused_ ABSL_GUARDED_BY(mu_);
  bool verified_ ABSL_GUARDED_BY(mu_) = false;
  std::condition_variable verified_cv_;
};

}  // namespace fedgate::gateway
