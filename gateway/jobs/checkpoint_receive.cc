// The receiving side of checkpoint copies (CheckpointSync::Incoming, fed a
// PushCheckpoint stream chunk by chunk) and how much of a broken-off copy is
// here (CheckpointProgress). A copy is staged in the gateway's own folder,
// hashed as it arrives, checked against its manifest and moved into the
// ranks' folder by rename; nothing half-copied is ever visible there.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "base/str_cat.h"
#include "gateway/jobs/checkpoint_files.h"
#include "gateway/jobs/checkpoint_sync.h"
#include "gateway/ops/metrics.h"

namespace fedgate::gateway {
namespace {

namespace fs = std::filesystem;

// The staged file of a checkpoint that is one file (path "").
constexpr const char* kSingleFile = ".fedgate-file";

// A copy being received: in the gateway's own staging folder, never in the
// ranks' (which a rank could fill with links).
std::string StagingPath(const std::string& root, const std::string& job, uint64_t step) {
  return StrCat(root, "/", job, "-in-", step);
}

std::string StagedPath(const std::string& staging, const std::string& rel) {
  return rel.empty() ? StrCat(staging, "/", kSingleFile) : StrCat(staging, "/", rel);
}

}  // namespace

bool CheckpointSync::ClaimIncoming(const std::string& key) {
  std::lock_guard lock(mu_);
  return incoming_.insert(key).second;
}

void CheckpointSync::ReleaseIncoming(const std::string& key) {
  std::lock_guard lock(mu_);
  incoming_.erase(key);
}

absl::StatusOr<v1::CheckpointProgressResponse> CheckpointSync::Progress(
    const std::string& from, const v1::CheckpointProgressRequest& req) {
  auto j = participant_->CheckpointReceiver(from, req.job_id());
  if (!j.ok()) {
    Count("fedgate_checkpoint_errors_total", "not_a_member");
    spdlog::warn("checkpoint progress asked by {}: {}", from, std::string(j.status().message()));
    return j.status();
  }
  v1::CheckpointProgressResponse resp;
  std::error_code ec;
  if (fs::exists(StrCat(j->dir, "/", StepName(req.step())), ec)) {
    resp.set_present(true);
    return resp;
  }
  const std::string staging = StagingPath(j->staging, req.job_id(), req.step());
  for (fs::recursive_directory_iterator it(staging, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::string rel = fs::relative(it->path(), staging).string();
    if (rel == kSingleFile) rel.clear();
    (*resp.mutable_received_bytes())[rel] = it->file_size();
  }
  return resp;
}

CheckpointSync::Incoming::~Incoming() {
  if (claimed_) owner_->ReleaseIncoming(StrCat(job_, "/", step_));
  // A copy that broke off leaves its staging for the sender to resume.
}

absl::Status CheckpointSync::Incoming::Fail(absl::Status st, const char* reason) {
  spdlog::warn("checkpoint from {} (job {}, step-{}) refused: {}", from_, job_, step_,
               std::string(st.message()));
  owner_->Count("fedgate_checkpoint_errors_total", reason);
  return st;
}

absl::Status CheckpointSync::Incoming::Begin(const v1::CheckpointChunk& first) {
  begun_ = true;
  job_ = first.job_id();
  step_ = first.step();
  if (first.site() != from_) {
    return Fail(absl::InvalidArgumentError(StrCat("chunk names site \"", first.site(),
                                                  "\" but the certificate is of ", from_)),
                "not_a_member");
  }
  auto j = owner_->participant_->CheckpointReceiver(from_, job_);
  if (!j.ok()) return Fail(j.status(), "not_a_member");
  dir_ = j->dir;
  staging_root_ = j->staging;
  if (!owner_->ClaimIncoming(StrCat(job_, "/", step_))) {
    return Fail(absl::AbortedError("the same step is being received from another copy"), "io");
  }
  claimed_ = true;
  std::error_code ec;
  if (fs::exists(StrCat(dir_, "/", StepName(step_)), ec)) {
    present_ = true;
    return absl::OkStatus();
  }
  if (auto st = MakePrivateDir(staging_root_); !st.ok()) return Fail(st, "io");
  staging_ = StagingPath(staging_root_, job_, step_);
  fs::create_directories(staging_, ec);
  if (ec) {
    return Fail(absl::InternalError(StrCat("cannot create ", staging_, ": ", ec.message())), "io");
  }
  return absl::OkStatus();
}

absl::Status CheckpointSync::Incoming::Add(const v1::CheckpointChunk& c) {
  if (!begun_) return Begin(c);
  if (last_) return Fail(absl::InvalidArgumentError("data after the last chunk"), "bad_path");
  if (c.last()) {
    last_ = true;
    manifest_.assign(c.manifest().begin(), c.manifest().end());
    return absl::OkStatus();
  }
  if (present_) return absl::OkStatus();  // nothing to write: the step is here
  if (!SafeRelativePath(c.path()) || c.path() == kSingleFile) {
    return Fail(absl::InvalidArgumentError(StrCat("unsafe path \"", c.path().substr(0, 128), "\"")),
                "bad_path");
  }
  const std::string path = StagedPath(staging_, c.path());
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Fail(absl::InternalError(StrCat("cannot write ", path)), "io");
  struct stat st {};
  ::fstat(fd, &st);
  if (static_cast<uint64_t>(st.st_size) != c.offset()) {
    ::close(fd);
    return Fail(
        absl::FailedPreconditionError(StrCat("chunk at offset ", c.offset(), " of \"", c.path(),
                                             "\" but ", st.st_size, " bytes are here")),
        "bad_offset");
  }
  const ssize_t n = ::pwrite(fd, c.data().data(), c.data().size(), static_cast<off_t>(c.offset()));
  ::close(fd);
  if (n != static_cast<ssize_t>(c.data().size())) {
    return Fail(absl::InternalError(StrCat("short write to ", path)), "io");
  }
  // Hashed as it arrives (a resumed file's earlier bytes first), so the
  // check at the end does not read the copy again.
  auto& h = hashes_[c.path()];
  if (!h.sha) {
    h.sha = std::make_unique<Sha256>();
    h.sha->UpdateFromFile(path, c.offset());
    h.bytes = c.offset();
  }
  h.sha->Update(c.data().data(), c.data().size());
  h.bytes += c.data().size();
  bytes_ += c.data().size();
  owner_->Count("fedgate_checkpoint_bytes_total", "received", static_cast<double>(n));
  return absl::OkStatus();
}

absl::StatusOr<v1::PushCheckpointResponse> CheckpointSync::Incoming::Finish() {
  if (!begun_ || !last_) {
    return Fail(absl::InvalidArgumentError("the copy ended without its manifest"), "io");
  }
  Metrics* m = owner_->metrics_;
  if (present_) {
    resp_.set_already_present(true);
    if (m != nullptr)
      m->Inc("fedgate_checkpoint_copies_total", {{"direction", "received"}, {"result", "present"}});
    return resp_;
  }
  const bool single = manifest_.size() == 1 && manifest_[0].path().empty();
  std::set<std::string> listed;
  for (const auto& f : manifest_) {
    if (!SafeRelativePath(f.path()) || (f.path().empty() && !single)) {
      return Fail(absl::InvalidArgumentError("unsafe path in the manifest"), "bad_path");
    }
    const std::string path = StagedPath(staging_, f.path());
    listed.insert(path);
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    auto h = hashes_.find(f.path());
    auto sha = ec ? absl::StatusOr<std::string>(absl::NotFoundError("missing"))
               : h != hashes_.end() && h->second.bytes == f.size_bytes()
                   ? absl::StatusOr<std::string>(h->second.sha->Hex())
                   : Sha256File(path);
    if (ec || size != f.size_bytes() || !sha.ok() || *sha != f.sha256()) {
      // Nothing half-copied becomes visible: the staging goes, the sender
      // starts over.
      fs::remove_all(staging_, ec);
      return Fail(absl::DataLossError(StrCat("digest mismatch in \"", f.path(), "\" of step-",
                                             step_, ": the copy was discarded")),
                  "digest_mismatch");
    }
  }
  std::error_code ec;
  for (fs::recursive_directory_iterator it(staging_, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file() && !listed.contains(it->path().string())) {
      return Fail(absl::InvalidArgumentError("a file the manifest does not list"), "bad_path");
    }
  }
  const RankUser& user = owner_->participant_->rank_user();
  if (user.switch_user) ChownTree(staging_, user.uid, user.gid);
  const std::string from = single ? StagedPath(staging_, "") : staging_;
  if (auto st = PublishInto(from, dir_, StepName(step_)); !st.ok()) {
    fs::remove_all(staging_, ec);
    return Fail(st, "io");
  }
  if (single) fs::remove_all(staging_, ec);
  if (m != nullptr)
    m->Inc("fedgate_checkpoint_copies_total", {{"direction", "received"}, {"result", "ok"}});
  spdlog::info("job {}: checkpoint step-{} received from {} ({} bytes)", job_, step_, from_,
               bytes_);
  return resp_;
}

}  // namespace fedgate::gateway
