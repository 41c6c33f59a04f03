// Day-two cleanup of data_dir/jobs (DESIGN.md retention): rank logs older
// than retention.logs are removed, and so is the whole folder of a job that
// has not been touched for retention.jobs, with the job's work folder (the
// ranks' HOME under executor.work_dir). A work folder whose job has no
// folder in data_dir/jobs goes once the work folder itself is that old.
// Folders of jobs that still have a live slice here are never touched.
// Usage records live in the store and are kept.
#pragma once

#include <cstdint>
#include <set>
#include <string>

namespace fedgate::gateway {

struct RetentionResult {
  int logs_removed = 0;
  int job_dirs_removed = 0;
  int work_dirs_removed = 0;
};

// Ages come from file modification times against `now_unix_ms`; an empty
// `work_dir` leaves work folders alone.
RetentionResult ApplyRetention(const std::string& jobs_dir, const std::string& work_dir,
                               int64_t now_unix_ms, int64_t logs_ms, int64_t jobs_ms,
                               const std::set<std::string>& live_jobs);

}  // namespace fedgate::gateway
