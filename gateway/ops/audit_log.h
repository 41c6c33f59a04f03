// The append-only audit log of admin actions (peers, cordons, quotas): one
// JSON object per line in data_dir/audit.log, with the caller's identity,
// the action, its arguments and its outcome, refused attempts included.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fedgate::gateway {

class AuditLog {
 public:
  // Opens (creates, mode 0600) `path` for appending; a log that cannot be
  // opened is an error at start, not a silent gap later.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(const std::string& path);
  ~AuditLog();
  // {"time":…,"identity":…,"action":…,"args":{…},"result":"OK"|code,"message":…}
  void Record(const std::string& identity, const std::string& action,
              const std::vector<std::pair<std::string, std::string>>& args,
              const absl::Status& result, int64_t unix_ms);

 private:
  explicit AuditLog(int fd) : fd_(fd) {}
  std::mutex mu_;
  int fd_;
};

}  // namespace fedgate::gateway
