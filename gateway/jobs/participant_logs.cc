// Rank logs (read by offset, only by the job's coordinator) and this site's
// usage records.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/number.h"
#include "base/str_cat.h"
#include "federation/clock.h"
#include "gateway/jobs/participant.h"
#include "gateway/jobs/participant_limits.h"

namespace fedgate::gateway {

using namespace participant_limits;  // NOLINT: the bounds of this room

absl::Status Participant::WriteLogOwner(const std::string& job, const std::string& from) {
  const std::string dir = StrCat(config_.data_dir, "/jobs/", job);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(dir + "/owner", std::ios::trunc);
  out << from << "\n";
  out.close();
  if (ec || !out) {
    return absl::InternalError(StrCat("cannot write ", dir, "/owner: ",
                                      ec ? ec.message() : std::strerror(errno)));
  }
  return absl::OkStatus();
}

// The highest attempt-N folder of a job's logs (0 when there is none).
uint32_t Participant::LatestAttempt(const std::string& dir) {
  uint32_t best = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename();
    if (name.rfind("attempt-", 0) != 0) continue;
    if (auto n = ParseNumber<uint32_t>(std::string_view(name).substr(8))) best = std::max(best, *n);
  }
  return best;
}

std::string Participant::LogPath(const std::string& job, uint32_t attempt, uint32_t rank) const {
  return StrCat(config_.data_dir, "/jobs/", job, "/attempt-", attempt, "/rank-", rank, ".log");
}

absl::StatusOr<v1::ReadLogResponse> Participant::ReadLog(const std::string& from,
                                                         const v1::ReadLogRequest& req) {
  if (auto st = CheckJobId(req.job_id()); !st.ok()) return st;
  {
    std::lock_guard lock(mu_);
    if (auto st = ledger_.CheckOwner(req.job_id(), from); !st.ok()) return st;
  }
  const std::string dir = StrCat(config_.data_dir, "/jobs/", req.job_id());
  std::string owner;
  std::getline(std::ifstream(dir + "/owner"), owner);
  if (owner.empty()) {
    return absl::NotFoundError(StrCat("no ranks of job ", req.job_id(), " ran at this site"));
  }
  if (owner != from) {
    return absl::PermissionDeniedError(
        StrCat("job ", req.job_id(), " is coordinated by ", owner, ", not by ", from));
  }
  uint32_t attempt = req.attempt();
  if (attempt == 0) attempt = LatestAttempt(dir);
  const std::string path = LogPath(req.job_id(), attempt, req.rank());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(StrCat("rank ", req.rank(), " of job ", req.job_id(),
                                      " attempt ", attempt, " is not here"));
  }
  struct stat st{};
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint32_t max = req.max_bytes() == 0 ? kMaxLogChunk : std::min(req.max_bytes(), kMaxLogChunk);
  const uint64_t offset = std::min<uint64_t>(req.offset(), size);
  std::string buf(std::min<uint64_t>(max, size - offset), '\0');
  ssize_t got = buf.empty() ? 0 : ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
  ::close(fd);
  if (got < 0) return absl::InternalError(StrCat("reading ", path, ": ", std::strerror(errno)));
  buf.resize(static_cast<size_t>(got));
  v1::ReadLogResponse resp;
  resp.set_content(std::move(buf));
  resp.set_offset(offset);
  resp.set_size_bytes(size);
  return resp;
}

absl::StatusOr<std::vector<federation::UsageRecord>> Participant::Usage(int64_t since_ms,
                                                                       int64_t until_ms,
                                                                       const std::string& tenant) {
  if (store_ == nullptr) return std::vector<federation::UsageRecord>{};
  return store_->ListUsage(since_ms, until_ms, tenant);
}

absl::StatusOr<v1::ListUsageResponse> Participant::ListUsage(const std::string& /*from*/,
                                                             const v1::ListUsageRequest& req) {
  const int64_t until = req.until_unix_ms() > 0 ? req.until_unix_ms() : INT64_MAX;
  auto recs = Usage(req.since_unix_ms(), until, req.tenant());
  if (!recs.ok()) return recs.status();
  v1::ListUsageResponse out;
  out.set_now_unix_ms(clock_->NowMs());
  for (const auto& r : *recs) {
    auto* p = out.add_records();
    p->set_job_id(r.job_id);
    p->set_attempt(r.attempt);
    p->set_epoch(r.epoch);
    p->set_site(r.site);
    p->set_node(r.node);
    p->set_gpu_model(r.gpu_model);
    p->set_gpus(r.gpus);
    p->set_tenant(r.tenant);
    p->set_priority(r.priority);
    p->set_start_unix_ms(r.start_ms);
    p->set_end_unix_ms(r.end_ms);
    p->set_reason(r.reason);
  }
  return out;
}

}  // namespace fedgate::gateway
