// Day-two cleanup of data_dir/jobs (DESIGN.md retention): rank logs older
// than retention.logs are removed, and so is the whole folder of a job that
// has not been touched for retention.jobs. Folders of jobs that still have
// a live slice here are never touched. Usage records live in the store and
// are kept.
#pragma once

#include <cstdint>
#include <set>
#include <string>

namespace fedgate::gateway {

struct RetentionResult {
  int logs_removed = 0;
  int job_dirs_removed = 0;
};

// Ages come from file modification times against `now_unix_ms`.
RetentionResult ApplyRetention(const std::string& jobs_dir, int64_t now_unix_ms, int64_t logs_ms,
                               int64_t jobs_ms, const std::set<std::string>& live_jobs);

}  // namespace fedgate::gateway
