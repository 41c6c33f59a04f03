#include "gateway/datasets/dataset_stager.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "base/str_cat.h"
#include "federation/dataset.h"
#include "gateway/datasets/dataset_scan.h"

namespace fedgate::gateway {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kManifestTimeoutMs = 30000;

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Cancel(std::mutex& mu, grpc::ClientContext* const& active) {
  std::lock_guard lock(mu);
  if (active != nullptr) active->TryCancel();
}

std::string FolderName(const v1::StageItem& item) {
  return StrCat(item.name(), "@", item.digest().substr(0, 16));
}

}  // namespace

DatasetStager::DatasetStager(std::string site, std::string cache_dir, uint64_t max_bytes,
                             DatasetRegistry* registry, StubFor stubs, Metrics* metrics)
    : site_(std::move(site)),
      cache_dir_(std::move(cache_dir)),
      max_bytes_(max_bytes),
      registry_(registry),
      stubs_(std::move(stubs)),
      metrics_(metrics) {
  if (metrics_ != nullptr) {
    metrics_->Describe("fedgate_dataset_staged_bytes_total", "counter",
                       "Bytes of datasets this site pulled from holders.");
    metrics_->Describe("fedgate_dataset_evicted_total", "counter",
                       "Staged datasets removed from the cache to make room.");
  }
}

DatasetStager::~DatasetStager() { Stop(); }

void DatasetStager::Stop() {
  stop_ = true;
  std::map<std::string, std::unique_ptr<Copy>> copies;
  {
    std::lock_guard lock(mu_);
    copies.swap(copies_);
  }
  for (auto& [name, c] : copies) Cancel(c->mu, c->active);
  for (auto& [name, c] : copies) {
    if (c->thread.joinable()) c->thread.join();
  }
}

void DatasetStager::Refused(const std::string& reason) {
  if (metrics_ != nullptr) metrics_->Inc("fedgate_dataset_refused_total", {{"reason", reason}});
}

v1::StageResponse DatasetStager::Ensure(const std::vector<v1::StageItem>& items) {
  v1::StageResponse resp;
  std::vector<std::unique_ptr<Copy>> ended;  // joined after the lock
  {
    std::lock_guard lock(mu_);
    for (const auto& item : items) {
      auto* p = resp.add_items();
      p->set_name(item.name());
      p->set_bytes_total(item.bytes());
      if (auto held = registry_->Find(item.name()); held) {
        if (held->manifest.digest() == item.digest()) {
          p->set_bytes_done(item.bytes());
          p->set_done(true);
          if (auto done = copies_.find(item.name());
              done != copies_.end() && done->second->finished) {
            ended.push_back(std::move(done->second));
            copies_.erase(done);
          }
          continue;
        }
        if (!held->cached) {  // never replaced by a copy of other content
          p->set_error(StrCat(site_, " holds other content under the name ", item.name()));
          continue;
        }
      }
      auto it = copies_.find(item.name());
      if (it != copies_.end() && it->second->finished) {
        // A copy that failed is reported once, then a later ask tries again;
        // one that succeeded (its dataset since evicted) is simply done with.
        std::string error;
        {
          std::lock_guard c(it->second->mu);
          error = it->second->error;
        }
        ended.push_back(std::move(it->second));
        copies_.erase(it);
        it = copies_.end();
        if (!error.empty()) {
          p->set_error(error);
          continue;
        }
      }
      if (it == copies_.end()) {
        if (stop_) {
          p->set_error("the gateway is stopping");
          continue;
        }
        auto c = std::make_unique<Copy>();
        c->item = item;
        c->total = item.bytes();
        c->progress_ms = SteadyMs();
        Copy* raw = c.get();
        c->thread = std::thread([this, raw] { Run(raw); });
        it = copies_.emplace(item.name(), std::move(c)).first;
      }
      Copy& c = *it->second;
      if (SteadyMs() - c.progress_ms > kStallMs) {
        spdlog::warn("dataset {}: nothing from its holder for {} s: cut off", item.name(),
                     kStallMs / 1000);
        c.progress_ms = SteadyMs();  // the next holder gets its own time
        Cancel(c.mu, c.active);
      }
      p->set_bytes_done(c.done);
      p->set_bytes_total(c.total);
      std::lock_guard cl(c.mu);
      p->set_source(c.source);
    }
  }
  for (auto& c : ended) {
    if (c->thread.joinable()) c->thread.join();
  }
  return resp;
}

void DatasetStager::Run(Copy* c) {
  std::string errors;
  for (const auto& source : c->item.sources()) {
    if (stop_) break;
    {
      std::lock_guard lock(c->mu);
      c->source = source;
    }
    const auto t0 = std::chrono::steady_clock::now();
    c->progress_ms = SteadyMs();
    double transfer_s = 0;
    auto st = CopyFrom(source, c, &transfer_s);
    if (st.ok()) {
      const double all_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      spdlog::info("dataset {}: staged from {}: {} bytes in {:.3f} s of transfer, {:.3f} s in all",
                   c->item.name(), source, c->total.load(), transfer_s, all_s);
      break;
    }
    spdlog::warn("dataset {}: staging from {} failed: {}", c->item.name(), source,
                 std::string(st.message()));
    errors += StrCat(errors.empty() ? "" : "; ", source, ": ", st.message());
  }
  if (!registry_->Find(c->item.name())) {
    std::lock_guard lock(c->mu);
    c->error = errors.empty() ? "no holder to stage from" : errors;
  }
  c->finished = true;
}

absl::Status DatasetStager::CopyFrom(const std::string& source, Copy* c, double* transfer_s) {
  const v1::StageItem& item = c->item;
  auto stub = stubs_(source);
  if (stub == nullptr) return absl::UnavailableError(StrCat(source, " is not reachable"));
  v1::DatasetManifest m;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(kManifestTimeoutMs));
    v1::DatasetManifestRequest req;
    req.set_site(site_);
    req.set_name(item.name());
    auto st = stub->GetDatasetManifest(&ctx, req, &m);
    if (!st.ok()) return absl::UnavailableError(StrCat("manifest: ", st.error_message()));
  }
  // The holder must serve the content the coordinator chose, named safely.
  if (ManifestDigest(m) != item.digest() || m.digest() != item.digest()) {
    Refused("manifest_mismatch");
    return absl::FailedPreconditionError(StrCat(source, " serves a manifest of ", item.name(),
                                                " that does not match digest ",
                                                item.digest().substr(0, 16)));
  }
  uint64_t total = 0;
  for (const auto& f : m.files()) {
    if (!IsSafeRelativePath(f.path())) {
      Refused("bad_path");
      return absl::FailedPreconditionError(
          StrCat(source, " lists \"", f.path().substr(0, 100), "\": not a path inside a dataset"));
    }
    total += f.size_bytes();
  }
  c->total = total;
  if (auto st = MakeRoom(total, item.name()); !st.ok()) return st;
  const std::string staging = StrCat(cache_dir_, "/.staging/", FolderName(item));
  std::error_code ec;
  fs::create_directories(staging, ec);
  if (ec) return absl::InternalError(StrCat("cannot create ", staging, ": ", ec.message()));
  uint64_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& f : m.files()) {
    const std::string dest = StrCat(staging, "/", f.path());
    fs::create_directories(fs::path(dest).parent_path(), ec);
    if (auto st = FetchFile(stub.get(), item, f, dest, c); !st.ok()) return st;
    done += f.size_bytes();
    c->done = done;
  }
  *transfer_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Every byte checked before anything is visible to ranks.
  for (const auto& f : m.files()) {
    const std::string dest = StrCat(staging, "/", f.path());
    auto sum = FileSha256(dest, &stop_);
    if (!sum.ok()) return sum.status();
    if (*sum != f.sha256()) {
      fs::remove(dest, ec);
      c->done = c->done - std::min<uint64_t>(c->done, f.size_bytes());
      Refused("manifest_mismatch");
      return absl::DataLossError(
          StrCat(f.path(), " from ", source, " does not match its manifest (removed)"));
    }
    fs::permissions(dest, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read,
                    fs::perm_options::replace, ec);
  }
  for (auto it = fs::recursive_directory_iterator(staging, ec); it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_directory(ec)) {
      fs::permissions(it->path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                      fs::perms::others_read | fs::perms::others_exec,
                      fs::perm_options::replace, ec);
    }
  }
  fs::permissions(staging, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec,
                  fs::perm_options::replace, ec);
  const std::string final_dir = StrCat(cache_dir_, "/", FolderName(item));
  fs::remove_all(final_dir, ec);
  fs::rename(staging, final_dir, ec);
  if (ec) return absl::InternalError(StrCat("cannot move ", staging, " into place: ", ec.message()));
  m.set_name(item.name());
  // Times of the copies, so the next start does not hash them again.
  for (auto& f : *m.mutable_files()) {
    const auto t = fs::last_write_time(StrCat(final_dir, "/", f.path()), ec);
    f.set_mtime_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  }
  registry_->AddCached(item.name(), final_dir, std::move(m));
  return absl::OkStatus();
}

absl::Status DatasetStager::FetchFile(v1::PeerService::Stub* stub, const v1::StageItem& item,
                                      const v1::DatasetFile& f, const std::string& dest, Copy* c) {
  std::error_code ec;
  uint64_t have = fs::exists(dest, ec) ? fs::file_size(dest, ec) : 0;
  if (have > f.size_bytes()) {
    fs::remove(dest, ec);
    have = 0;
  }
  if (have == f.size_bytes()) return absl::OkStatus();  // resumed: already whole
  const int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(StrCat("cannot write ", dest));
  const uint64_t base = c->done;
  grpc::ClientContext ctx;
  v1::FetchDatasetRequest req;
  req.set_site(site_);
  req.set_name(item.name());
  req.set_digest(item.digest());
  req.set_path(f.path());
  req.set_offset(have);
  {
    std::lock_guard lock(c->mu);
    c->active = &ctx;
  }
  if (stop_) ctx.TryCancel();
  auto reader = stub->FetchDataset(&ctx, req);
  v1::DatasetChunk chunk;
  absl::Status failed;
  while (reader->Read(&chunk)) {
    if (stop_) {
      ctx.TryCancel();
      failed = absl::CancelledError("stopped");
      break;
    }
    if (have + chunk.data().size() > f.size_bytes()) {
      ctx.TryCancel();
      Refused("manifest_mismatch");
      failed = absl::DataLossError(StrCat(f.path(), ": the holder sent more than its manifest says"));
      break;
    }
    if (::write(fd, chunk.data().data(), chunk.data().size()) !=
        static_cast<ssize_t>(chunk.data().size())) {
      ctx.TryCancel();
      failed = absl::InternalError(StrCat("cannot write ", dest));
      break;
    }
    have += chunk.data().size();
    c->done = base + have;
    c->progress_ms = SteadyMs();
    if (metrics_ != nullptr) {
      metrics_->Inc("fedgate_dataset_staged_bytes_total", {}, static_cast<double>(chunk.data().size()));
    }
  }
  ::close(fd);
  auto st = reader->Finish();
  {
    std::lock_guard lock(c->mu);
    c->active = nullptr;
  }
  if (!failed.ok()) return failed;
  if (!st.ok()) return absl::UnavailableError(StrCat(f.path(), ": ", st.error_message()));
  if (have != f.size_bytes()) {
    return absl::UnavailableError(StrCat(f.path(), ": the holder stopped at byte ", have, " of ",
                                         f.size_bytes()));
  }
  return absl::OkStatus();
}

absl::Status DatasetStager::MakeRoom(uint64_t bytes, const std::string& keep) {
  if (max_bytes_ == 0) return absl::OkStatus();
  std::lock_guard lock(room_mu_);
  auto cached = registry_->CachedByAge();
  uint64_t used = 0;
  for (const auto& c : cached) used += c.bytes;
  const std::set<std::string> busy = in_use_ ? in_use_() : std::set<std::string>{};
  for (const auto& c : cached) {
    if (used + bytes <= max_bytes_) break;
    if (c.name == keep || busy.contains(c.name)) continue;
    spdlog::info("dataset {}: evicted from the cache ({}) to make room", c.name,
                 federation::HumanBytes(c.bytes));
    registry_->ForgetCached(c.name);
    std::error_code ec;
    fs::remove_all(c.path, ec);
    used -= c.bytes;
    if (metrics_ != nullptr) metrics_->Inc("fedgate_dataset_evicted_total");
  }
  if (used + bytes > max_bytes_) {
    return absl::FailedPreconditionError(
        StrCat("datasets_cache.max ", federation::HumanBytes(max_bytes_), " has no room for ",
               federation::HumanBytes(bytes), " (", federation::HumanBytes(used),
               " held by copies in use)"));
  }
  return absl::OkStatus();
}

}  // namespace fedgate::gateway
