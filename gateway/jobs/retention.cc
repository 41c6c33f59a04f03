#include "gateway/jobs/retention.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "federation/names.h"
#include "spdlog/spdlog.h"

namespace fs = std::filesystem;

namespace fedgate::gateway {
namespace {

int64_t MtimeUnixMs(const fs::path& p, std::error_code& ec) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    ec = std::error_code(errno, std::generic_category());
    return 0;
  }
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
}

}  // namespace

RetentionResult ApplyRetention(const std::string& jobs_dir, int64_t now_unix_ms, int64_t logs_ms,
                               int64_t jobs_ms, const std::set<std::string>& live_jobs) {
  RetentionResult out;
  std::error_code ec;
  for (const auto& job : fs::directory_iterator(jobs_dir, ec)) {
    const std::string id = job.path().filename().string();
    // Only folders the participant made (validated job ids), never a live one.
    if (!job.is_directory(ec) || !federation::IsValidJobId(id) || live_jobs.contains(id)) continue;
    int64_t newest = 0;
    for (const auto& f : fs::recursive_directory_iterator(job.path(), ec)) {
      std::error_code fe;
      if (!f.is_regular_file(fe)) continue;
      const int64_t m = MtimeUnixMs(f.path(), fe);
      if (fe) continue;
      // The job's age is that of its newest file, removed logs included
      // (removing a file touches its folder, which must not reset the age).
      newest = std::max(newest, m);
      if (f.path().extension() == ".log" && now_unix_ms - m > logs_ms) {
        if (fs::remove(f.path(), fe)) ++out.logs_removed;
      }
    }
    std::error_code de;
    if (newest == 0) newest = MtimeUnixMs(job.path(), de);
    if (now_unix_ms - newest > jobs_ms) {
      if (fs::remove_all(job.path(), de) > 0 && !de) ++out.job_dirs_removed;
    }
  }
  if (out.logs_removed + out.job_dirs_removed > 0) {
    spdlog::info("retention: removed {} rank log(s) and {} finished job folder(s) under {}",
                 out.logs_removed, out.job_dirs_removed, jobs_dir);
  }
  return out;
}

}  // namespace fedgate::gateway
