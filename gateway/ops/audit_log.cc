#include "gateway/ops/audit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/statusor.h"
#include "base/str_cat.h"
#include "base/text.h"
#include "spdlog/spdlog.h"

namespace fedgate::gateway {

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(StrCat("cannot open audit log ", path, ": ", strerror(errno)));
  return std::unique_ptr<AuditLog>(new AuditLog(fd));
}

AuditLog::~AuditLog() { ::close(fd_); }

void AuditLog::Record(const std::string& identity, const std::string& action,
                      const std::vector<std::pair<std::string, std::string>>& args,
                      const absl::Status& result, int64_t unix_ms) {
  std::string a;
  for (const auto& [k, v] : args) {
    a += StrCat(a.empty() ? "" : ",", "\"", JsonEscape(k), "\":\"", JsonEscape(v.substr(0, 256)), "\"");
  }
  const std::string line =
      StrCat("{\"time_unix_ms\":", unix_ms, ",\"identity\":\"", JsonEscape(identity),
             "\",\"action\":\"", JsonEscape(action), "\",\"args\":{", a, "},\"result\":\"",
             result.ok() ? "OK" : absl::StatusCodeToString(result.code()), "\",\"message\":\"",
             JsonEscape(std::string(result.message()).substr(0, 512)), "\"}\n");
  std::lock_guard lock(mu_);
  // One write of the whole line with O_APPEND: lines never interleave.
  if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    spdlog::error("audit log write failed: {}", strerror(errno));
    return;
  }
  ::fdatasync(fd_);
}

}  // namespace fedgate::gateway
