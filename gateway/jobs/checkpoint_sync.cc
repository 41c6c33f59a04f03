#include "gateway/jobs/checkpoint_sync.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "base/str_cat.h"
#include "gateway/jobs/checkpoint_files.h"
#include "gateway/ops/metrics.h"

namespace fedgate::gateway {
namespace {

namespace fs = std::filesystem;

constexpr size_t kChunkBytes = 1 << 20;
constexpr int64_t kPassMs = 500;
constexpr int64_t kRetryMs = 5000;
constexpr int64_t kProgressTimeoutMs = 3000;

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status FromGrpc(const grpc::Status& st) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
}

}  // namespace

CheckpointSync::CheckpointSync(std::string site, Participant* participant, StubFor stubs,
                               Metrics* metrics)
    : site_(std::move(site)),
      participant_(participant),
      stubs_(std::move(stubs)),
      metrics_(metrics) {}

CheckpointSync::~CheckpointSync() { Stop(); }

void CheckpointSync::DescribeMetrics(Metrics* m) {
  m->Describe("fedgate_checkpoint_bytes_total", "counter",
              "Checkpoint bytes copied between sites, by direction (sent, received).");
  m->Describe("fedgate_checkpoint_copies_total", "counter",
              "Checkpoint copies that ended, by direction and result (ok, present, failed).");
  m->Describe("fedgate_checkpoint_copy_seconds", "histogram",
              "Duration of one checkpoint copy to one site, sender side.",
              {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800});
  m->Describe("fedgate_checkpoint_errors_total", "counter",
              "Checkpoint problems, by reason (malformed_name, source_removed, digest_mismatch, "
              "not_a_member, bad_path, bad_offset, io, send).");
}

void CheckpointSync::Count(const char* name, const std::string& reason, double by) {
  if (metrics_ == nullptr) return;
  if (std::string(name) == "fedgate_checkpoint_bytes_total") {
    metrics_->Inc(name, {{"direction", reason}}, by);
  } else {
    metrics_->Inc(name, {{"reason", reason}}, by);
  }
}

void CheckpointSync::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void CheckpointSync::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  {
    std::lock_guard lock(active_mu_);
    if (active_ != nullptr) active_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

void CheckpointSync::Ask(const std::string& job, uint64_t step, std::vector<std::string> to) {
  {
    std::lock_guard lock(mu_);
    for (const auto& a : asks_) {
      if (a.job == job && a.step == step && a.to == to) return;  // asked every renewal
    }
    asks_.push_back({job, step, std::move(to)});
  }
  cv_.notify_all();
}

void CheckpointSync::Loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(kPassMs),
                   [&] { return stop_ || !asks_.empty(); });
      if (stop_) return;
    }
    Pass();
  }
}

void CheckpointSync::Pass() {
  // A coordinator's asks first: a replacement slice waits for them.
  std::deque<Ask_> asks;
  {
    std::lock_guard lock(mu_);
    asks.swap(asks_);
  }
  const auto jobs = participant_->CheckpointJobs();
  std::map<std::string, std::string> dirs;
  for (const auto& j : jobs) dirs[j.job_id] = j.dir;
  for (const auto& a : asks) {
    auto d = dirs.find(a.job);
    if (d == dirs.end()) continue;
    for (const auto& to : a.to) {
      if (sent_[{a.job, to}] >= a.step) continue;
      if (Push(a.job, d->second, a.step, to).ok()) sent_[{a.job, to}] = a.step;
    }
  }
  // Then every new newest step to every other site of its world.
  for (const auto& j : jobs) {
    std::vector<std::string> malformed;
    auto steps = ListCheckpointSteps(j.dir, &malformed);
    for (const auto& name : malformed) {
      if (!warned_.insert(StrCat(j.job_id, "/", name)).second) continue;
      spdlog::warn("job {}: checkpoint \"{}\" ignored: step-<N> needs a number", j.job_id, name);
      Count("fedgate_checkpoint_errors_total", "malformed_name");
    }
    if (steps.size() > j.keep) {
      for (uint64_t gone : PruneCheckpoints(j.dir, j.keep, j.staging)) {
        spdlog::info("job {}: checkpoint step-{} removed (keep {})", j.job_id, gone, j.keep);
      }
      steps = ListCheckpointSteps(j.dir);
    }
    if (steps.empty()) continue;
    const uint64_t newest = steps.back();
    for (const auto& to : j.others) {
      uint64_t& have = sent_[{j.job_id, to}];
      if (have >= newest) continue;
      auto retry = retry_at_ms_.find(to);
      if (retry != retry_at_ms_.end() && SteadyMs() < retry->second) continue;
      auto st = Push(j.job_id, j.dir, newest, to);
      if (st.ok()) {
        have = newest;
        retry_at_ms_.erase(to);
      } else {
        retry_at_ms_[to] = SteadyMs() + kRetryMs;
      }
    }
  }
  std::erase_if(sent_, [&](const auto& e) { return !dirs.contains(e.first.first); });
}

absl::Status CheckpointSync::Push(const std::string& job, const std::string& dir, uint64_t step,
                                  const std::string& to) {
  const auto t0 = std::chrono::steady_clock::now();
  auto fail = [&](absl::Status st, const char* reason) {
    spdlog::warn("job {}: checkpoint step-{} not copied to {}: {}", job, step, to,
                 std::string(st.message()));
    Count("fedgate_checkpoint_errors_total", reason);
    if (metrics_ != nullptr) {
      metrics_->Inc("fedgate_checkpoint_copies_total",
                    {{"direction", "sent"}, {"result", "failed"}});
    }
    return st;
  };
  const std::string step_path = StrCat(dir, "/", StepName(step));
  auto manifest = CheckpointFiles(step_path);  // digests are taken while streaming
  if (!manifest.ok()) return fail(manifest.status(), "source_removed");
  auto stub = stubs_(to);
  if (stub == nullptr) return fail(absl::UnavailableError(StrCat(to, " is not reachable")), "send");
  v1::CheckpointProgressRequest ask;
  ask.set_site(site_);
  ask.set_job_id(job);
  ask.set_step(step);
  v1::CheckpointProgressResponse have;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(kProgressTimeoutMs));
    if (auto st = FromGrpc(stub->CheckpointProgress(&ctx, ask, &have)); !st.ok()) {
      return fail(st, "send");
    }
  }
  if (!have.present()) {
    if (auto st = PushFiles(stub.get(), job, step_path, step, *manifest, have); !st.ok()) {
      return fail(st, absl::IsNotFound(st) ? "source_removed" : "send");
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (metrics_ != nullptr) {
    metrics_->Observe("fedgate_checkpoint_copy_seconds", {}, secs);
    metrics_->Inc("fedgate_checkpoint_copies_total",
                  {{"direction", "sent"}, {"result", have.present() ? "present" : "ok"}});
  }
  spdlog::info("job {}: checkpoint step-{} {} {} in {:.2f} s", job, step,
               have.present() ? "already at" : "copied to", to, secs);
  return absl::OkStatus();
}

absl::Status CheckpointSync::PushFiles(v1::PeerService::Stub* stub, const std::string& job,
                                       const std::string& step_path, uint64_t step,
                                       std::vector<v1::CheckpointFile> manifest,
                                       const v1::CheckpointProgressResponse& have) {
  grpc::ClientContext ctx;
  {
    std::lock_guard lock(active_mu_);
    active_ = &ctx;
  }
  struct Clear {
    CheckpointSync* self;
    ~Clear() {
      std::lock_guard lock(self->active_mu_);
      self->active_ = nullptr;
    }
  } clear{this};
  {
    std::lock_guard lock(mu_);
    if (stop_) return absl::CancelledError("stopping");
  }
  v1::PushCheckpointResponse resp;
  auto writer = stub->PushCheckpoint(&ctx, &resp);
  v1::CheckpointChunk head;
  head.set_site(site_);
  head.set_job_id(job);
  head.set_step(step);
  bool ok = writer->Write(head);
  std::vector<char> buf(kChunkBytes);
  for (auto& f : manifest) {
    if (!ok) break;
    uint64_t offset = 0;
    if (auto it = have.received_bytes().find(f.path()); it != have.received_bytes().end()) {
      offset = it->second <= f.size_bytes() ? it->second : 0;
    }
    auto sent = SendFile(writer.get(), step_path, offset, &buf, &f);
    if (!sent.ok()) {
      ctx.TryCancel();
      return sent.status();
    }
    ok = *sent;
  }
  if (ok) {
    v1::CheckpointChunk last;
    *last.mutable_manifest() = {manifest.begin(), manifest.end()};
    last.set_last(true);
    ok = writer->Write(last);
  }
  if (ok) writer->WritesDone();
  return FromGrpc(writer->Finish());
}

absl::StatusOr<bool> CheckpointSync::SendFile(grpc::ClientWriter<v1::CheckpointChunk>* writer,
                                              const std::string& step_path, uint64_t offset,
                                              std::vector<char>* buf, v1::CheckpointFile* f) {
  const RankUser& user = participant_->rank_user();
  const uid_t* owner = user.switch_user ? &user.uid : nullptr;
  const std::string src = f->path().empty() ? step_path : StrCat(step_path, "/", f->path());
  auto fd = OpenCheckpointFile(src, owner);
  if (!fd.ok()) {
    return absl::IsPermissionDenied(fd.status())
               ? fd.status()
               : absl::NotFoundError(StrCat(src, " was removed while it was copied"));
  }
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{*fd};
  // What the receiver has is hashed here too, read but not sent.
  Sha256 sha;
  uint64_t at = 0;
  while (at < f->size_bytes()) {
    const size_t want = std::min<uint64_t>(buf->size(), f->size_bytes() - at);
    const ssize_t got = ::pread(*fd, buf->data(), want, static_cast<off_t>(at));
    if (got != static_cast<ssize_t>(want)) {
      return absl::NotFoundError(StrCat(src, " shrank or vanished while it was copied"));
    }
    sha.Update(buf->data(), want);
    if (at >= offset) {
      v1::CheckpointChunk c;
      c.set_path(f->path());
      c.set_offset(at);
      c.set_data(buf->data(), want);
      if (!writer->Write(c)) return false;  // the stream broke: Finish says why
      Count("fedgate_checkpoint_bytes_total", "sent", static_cast<double>(want));
    }
    at += want;
  }
  char extra = 0;
  if (::pread(*fd, &extra, 1, static_cast<off_t>(at)) != 0) {
    return absl::NotFoundError(StrCat(src, " grew while it was copied"));
  }
  f->set_sha256(sha.Hex());
  return true;
}

}  // namespace fedgate::gateway
