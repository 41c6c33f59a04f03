// A slice's fence for its shims (gateway/exec/shim.h): the time past which
// its ranks stop by themselves when this gateway has stopped renewing it.
#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/str_cat.h"
#include "federation/saturating.h"
#include "gateway/jobs/participant.h"
#include "gateway/jobs/participant_limits.h"

namespace fedgate::gateway {

using participant_limits::kKillGraceMs;
using participant_limits::kShimFenceMarginMs;

std::string Participant::FencePath(const v1::ReservationKey& key) const {
  return StrCat(config_.data_dir, "/jobs/", key.job_id(), "/attempt-", key.attempt(), "/fence-",
                key.epoch());
}

Participant::FenceWrite Participant::FenceOfLocked(const Slice& s) const {
  const int64_t stop = federation::SatAdd(s.lease_deadline_ms,
                                          FenceExtraLocked(s.key.job_id(), s.lease_ms));
  return {FencePath(s.key), federation::SatAdd(stop, kShimFenceMarginMs)};
}

void Participant::WriteFence(const FenceWrite& f) {
  if (f.path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(f.path).parent_path(), ec);
  // Whole or not at all (renamed into place); no fsync: a host that loses
  // its page cache lost its ranks too. A writer per thread: concurrent
  // renewals never share a temporary file.
  const std::string tmp = StrCat(f.path, ".", ::gettid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    spdlog::warn("cannot write the fence {}: {}", f.path, std::strerror(errno));
    return;
  }
  const std::string text = StrCat(f.deadline_ms, " ", kKillGraceMs, "\n");
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), f.path.c_str()) != 0) ::unlink(tmp.c_str());
}

}  // namespace fedgate::gateway
