#include "gateway/jobs/retention.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

namespace fs = std::filesystem;
using fedgate::testing::TempDir;
using fedgate::testing::WriteText;
constexpr int64_t kDay = 24LL * 3600 * 1000;

void Age(const std::string& path, int64_t days) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::hours(24 * days));
}

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(Retention, OldLogsGoFirstThenWholeFinishedJobsAndLiveJobsAreNeverTouched) {
  TempDir tmp;
  const std::string jobs = tmp / "jobs";
  const std::string old_job = jobs + "/j-00000000000000a1", recent = jobs + "/j-00000000000000a2",
                    live = jobs + "/j-00000000000000a3", other = jobs + "/not-a-job";
  for (const auto& d : {old_job, recent, live, other}) fs::create_directories(d + "/attempt-1");
  for (const auto& d : {old_job, recent, live, other}) {
    WriteText(d + "/attempt-1/rank-0.log", "x");
    WriteText(d + "/owner", "site");
  }
  // old_job: everything 40 days old; recent: a 10-day-old log, a fresh owner
  // file; live and other: 40 days old too.
  for (const auto& d : {old_job, live, other}) {
    Age(d + "/attempt-1/rank-0.log", 40);
    Age(d + "/owner", 40);
  }
  Age(recent + "/attempt-1/rank-0.log", 10);

  // Work folders (the ranks' HOME): one per job above, and two whose job
  // has no folder in data_dir/jobs: one 40 days old, one fresh.
  const std::string work = tmp / "work";
  const std::string orphan_old = work + "/j-00000000000000b1", orphan_new = work + "/j-00000000000000b2";
  for (const auto& d : {old_job, recent, live, other}) {
    const std::string w = work + "/" + fs::path(d).filename().string();
    fs::create_directories(w + "/.cache");
    WriteText(w + "/.cache/model.bin", "weights");
  }
  for (const auto& d : {orphan_old, orphan_new}) fs::create_directories(d + "/sub");
  Age(orphan_old, 40);

  auto r = ApplyRetention(jobs, work, Now(), 7 * kDay, 30 * kDay, {"j-00000000000000a3"});
  EXPECT_EQ(r.job_dirs_removed, 1);
  EXPECT_FALSE(fs::exists(old_job)) << "untouched for 40 days: removed whole";
  EXPECT_TRUE(fs::exists(recent + "/owner"));
  EXPECT_FALSE(fs::exists(recent + "/attempt-1/rank-0.log")) << "a log past 7 days goes alone";
  EXPECT_EQ(r.logs_removed, 2) << "old_job's log and recent's log";
  EXPECT_TRUE(fs::exists(live + "/attempt-1/rank-0.log")) << "a job with a live slice is skipped";
  EXPECT_TRUE(fs::exists(other + "/attempt-1/rank-0.log")) << "only folders named like job ids";
  EXPECT_EQ(r.work_dirs_removed, 2);
  EXPECT_FALSE(fs::exists(work + "/j-00000000000000a1")) << "goes with its job's folder";
  EXPECT_FALSE(fs::exists(orphan_old)) << "no job folder, 40 days old";
  EXPECT_TRUE(fs::exists(orphan_new + "/sub")) << "no job folder but fresh";
  for (const auto& id : {"j-00000000000000a2", "j-00000000000000a3", "not-a-job"}) {
    EXPECT_TRUE(fs::exists(work + "/" + id + "/.cache/model.bin")) << id;
  }

  // Removing the log touched recent's folders; its age is still its files'.
  Age(recent + "/owner", 31);
  r = ApplyRetention(jobs, work, Now(), 7 * kDay, 30 * kDay, {});
  EXPECT_FALSE(fs::exists(recent));
  EXPECT_FALSE(fs::exists(live)) << "no longer live: 40 days old";
  EXPECT_TRUE(fs::exists(other));
  EXPECT_EQ(r.work_dirs_removed, 2);
  EXPECT_FALSE(fs::exists(work + "/j-00000000000000a2"));
  EXPECT_FALSE(fs::exists(work + "/j-00000000000000a3"));
  EXPECT_TRUE(fs::exists(work + "/not-a-job/.cache/model.bin"));
  EXPECT_TRUE(fs::exists(orphan_new));
  const auto none = ApplyRetention(tmp / "missing", tmp / "missing-too", Now(), kDay, kDay, {});
  EXPECT_EQ(none.job_dirs_removed + none.work_dirs_removed, 0);
}

}  // namespace
}  // namespace fedgate::gateway
