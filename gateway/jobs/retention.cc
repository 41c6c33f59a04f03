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

RetentionResult ApplyRetention(const std::string& jobs_dir, const std::string& work_dir,
                               int64_t now_unix_ms, int64_t logs_ms, int64_t jobs_ms,
                               const std::set<std::string>& live_jobs) {
  RetentionResult out;
  std::error_code ec;
  auto remove_work = [&](const std::string& id) {
    std::error_code we;
    if (!work_dir.empty() && fs::remove_all(fs::path(work_dir) / id, we) > 0 && !we) {
      ++out.work_dirs_removed;
    }
  };
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
      remove_work(id);
    }
  }
  // Work folders of jobs whose folder here is gone (removed by an older
  // version, or data_dir replaced): their own age decides. The walk does not
  // descend: a rank's files there may be many.
  if (!work_dir.empty()) {
    for (const auto& w : fs::directory_iterator(work_dir, ec)) {
      const std::string id = w.path().filename().string();
      std::error_code we;
      if (!w.is_directory(we) || !federation::IsValidJobId(id) || live_jobs.contains(id)) continue;
      const bool has_job_dir = fs::exists(fs::path(jobs_dir) / id, we);
      if (has_job_dir || we) continue;  // unreadable data_dir: assume it has one
      const int64_t m = MtimeUnixMs(w.path(), we);
      if (!we && now_unix_ms - m > jobs_ms) remove_work(id);
    }
  }
  if (out.logs_removed + out.job_dirs_removed + out.work_dirs_removed > 0) {
    spdlog::info("retention: removed {} rank log(s), {} finished job folder(s) under {} and {} "
                 "work folder(s) under {}",
                 out.logs_removed, out.job_dirs_removed, jobs_dir, out.work_dirs_removed,
                 work_dir);
  }
  return out;
}

}  // namespace fedgate::gateway
