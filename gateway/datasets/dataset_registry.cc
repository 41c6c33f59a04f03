#include "gateway/datasets/dataset_registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/str_cat.h"
#include "federation/dataset.h"
#include "gateway/datasets/dataset_scan.h"

namespace fedgate::gateway {
namespace fs = std::filesystem;
namespace {

v1::DatasetManifest ReadManifest(const std::string& file) {
  v1::DatasetManifest m;
  std::ifstream in(file, std::ios::binary);
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    if (!m.ParseFromString(ss.str())) m.Clear();
  }
  return m;
}

// Written to a temporary file, fsynced by close, then renamed over the old.
void WriteManifest(const std::string& file, const v1::DatasetManifest& m) {
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !m.SerializeToOstream(&out)) {
      spdlog::warn("cannot cache the manifest of dataset {} at {}", m.name(), file);
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
}

}  // namespace

DatasetRegistry::DatasetRegistry(std::vector<DatasetConfig> configured, std::string manifest_dir,
                                 Metrics* metrics)
    : configured_(std::move(configured)), manifest_dir_(std::move(manifest_dir)), metrics_(metrics) {
  if (metrics_ != nullptr) {
    metrics_->Describe("fedgate_dataset_refused_total", "counter",
                       "Datasets or dataset files refused, by reason: missing, symlink_out, "
                       "not_a_file, manifest_mismatch, bad_path, bad_name.");
    metrics_->Describe("fedgate_datasets", "gauge", "Datasets this site holds, by state.");
  }
}

DatasetRegistry::~DatasetRegistry() { Stop(); }

void DatasetRegistry::Start() {
  thread_ = std::thread([this] { VerifyAll(); });
}

void DatasetRegistry::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void DatasetRegistry::WaitVerified() {
  std::unique_lock lock(mu_);
  verified_cv_.wait(lock, [&] { return verified_; });
}

void DatasetRegistry::Refuse(const DatasetConfig& d, const std::string& reason,
                             const std::string& why) {
  spdlog::error("dataset {} at {} refused: {}", d.name, d.path, why);
  if (metrics_ != nullptr) metrics_->Inc("fedgate_dataset_refused_total", {{"reason", reason}});
  std::lock_guard lock(mu_);
  refused_[d.name] = why;
}

void DatasetRegistry::VerifyAll() {
  std::error_code ec;
  fs::create_directories(manifest_dir_, ec);
  for (const auto& d : configured_) {
    if (stop_) break;
    const std::string cache = StrCat(manifest_dir_, "/", d.name, ".manifest");
    v1::DatasetManifest previous = ReadManifest(cache);
    previous.set_name(d.name);
    previous.set_version(d.version);
    spdlog::info("dataset {}: verifying {} ({} file(s) known from its cached manifest)", d.name,
                 d.path, previous.files_size());
    auto scanned = ScanDataset(d.path, previous, [&](const ScanProgress& p) {
      spdlog::info("dataset {}: {} of {} verified ({} unchanged since the last start)", d.name,
                   federation::HumanBytes(p.bytes_hashed + p.bytes_reused),
                   federation::HumanBytes(p.bytes_total), federation::HumanBytes(p.bytes_reused));
    }, &stop_);
    if (!scanned.ok()) {
      if (absl::IsCancelled(scanned.status())) break;
      const std::string msg(scanned.status().message());
      const std::string reason = absl::IsNotFound(scanned.status())         ? "missing"
                                 : msg.find("symlink") != std::string::npos ? "symlink_out"
                                 : msg.find("not a regular") != std::string::npos ? "not_a_file"
                                                                                  : "bad_path";
      Refuse(d, reason, msg);
      continue;
    }
    WriteManifest(cache, *scanned);
    uint64_t bytes = 0;
    for (const auto& f : scanned->files()) bytes += f.size_bytes();
    spdlog::info("dataset {} version {}: {} file(s), {}, digest {}", d.name,
                 d.version.empty() ? "-" : d.version, scanned->files_size(),
                 federation::HumanBytes(bytes), scanned->digest().substr(0, 16));
    std::lock_guard lock(mu_);
    held_[d.name] = Held{fs::canonical(d.path, ec).string(), std::move(*scanned), false};
  }
  LoadCache();
  {
    std::lock_guard lock(mu_);
    verified_ = true;
  }
  verified_cv_.notify_all();
}

void DatasetRegistry::LoadCache() {
  std::error_code ec;
  if (cache_dir_.empty() || !fs::is_directory(cache_dir_, ec)) return;
  for (const auto& e : fs::directory_iterator(cache_dir_, ec)) {
    if (stop_) return;
    const std::string folder = e.path().filename().string();
    const size_t at = folder.find('@');
    if (at == std::string::npos || !e.is_directory(ec)) continue;  // .staging, strays
    const std::string name = folder.substr(0, at);
    const v1::DatasetManifest saved = ReadManifest(StrCat(manifest_dir_, "/cached-", name, ".manifest"));
    auto scanned = ScanDataset(e.path().string(), saved, {}, &stop_);
    if (!scanned.ok() || saved.digest().empty() || scanned->digest() != saved.digest() ||
        saved.digest().substr(0, 16) != folder.substr(at + 1)) {
      spdlog::warn("staged copy {} does not match its manifest: removed", e.path().string());
      if (metrics_ != nullptr) metrics_->Inc("fedgate_dataset_refused_total", {{"reason", "manifest_mismatch"}});
      fs::remove_all(e.path(), ec);
      continue;
    }
    spdlog::info("dataset {}: staged copy {} kept from the last run", name, e.path().string());
    std::lock_guard lock(mu_);
    if (!held_.contains(name)) held_[name] = Held{e.path().string(), std::move(*scanned), true};
  }
}

void DatasetRegistry::AddCached(const std::string& name, const std::string& path,
                                v1::DatasetManifest manifest) {
  std::error_code ec;
  fs::create_directories(manifest_dir_, ec);
  WriteManifest(StrCat(manifest_dir_, "/cached-", name, ".manifest"), manifest);
  std::lock_guard lock(mu_);
  held_[name] = Held{path, std::move(manifest), true};
}

std::vector<DatasetRegistry::CachedCopy> DatasetRegistry::CachedByAge() const {
  std::lock_guard lock(mu_);
  std::vector<CachedCopy> out;
  for (const auto& [name, h] : held_) {
    if (!h.cached) continue;
    uint64_t bytes = 0;
    for (const auto& f : h.manifest.files()) bytes += f.size_bytes();
    auto used = last_used_ms_.find(name);
    out.push_back({name, h.path, bytes, used == last_used_ms_.end() ? 0 : used->second});
  }
  std::sort(out.begin(), out.end(),
            [](const CachedCopy& a, const CachedCopy& b) { return a.last_used_ms < b.last_used_ms; });
  return out;
}

void DatasetRegistry::ForgetCached(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = held_.find(name);
  if (it != held_.end() && it->second.cached) held_.erase(it);
  std::error_code ec;
  fs::remove(StrCat(manifest_dir_, "/cached-", name, ".manifest"), ec);
}

std::vector<v1::DatasetAd> DatasetRegistry::Ads() const {
  std::lock_guard lock(mu_);
  std::vector<v1::DatasetAd> out;
  for (const auto& [name, h] : held_) {
    v1::DatasetAd ad;
    ad.set_name(name);
    ad.set_version(h.manifest.version());
    uint64_t bytes = 0;
    for (const auto& f : h.manifest.files()) bytes += f.size_bytes();
    ad.set_bytes(bytes);
    ad.set_files(static_cast<uint64_t>(h.manifest.files_size()));
    ad.set_digest(h.manifest.digest());
    ad.set_cached(h.cached);
    out.push_back(std::move(ad));
  }
  return out;
}

std::optional<DatasetRegistry::Held> DatasetRegistry::Find(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = held_.find(name);
  if (it == held_.end()) return std::nullopt;
  last_used_ms_[name] = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  return it->second;
}

std::string DatasetRegistry::Refusal(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = refused_.find(name);
  return it == refused_.end() ? "" : it->second;
}

}  // namespace fedgate::gateway
