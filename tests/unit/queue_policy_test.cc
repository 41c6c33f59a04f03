#include "federation/queue_policy.h"

#include <gtest/gtest.h>

namespace fedgate::federation {
namespace {

constexpr int64_t kHour = 3600 * 1000;

TEST(QueuePolicy, ShortestPerGpuFirst) {
  ShortestJobFirst sjf;
  std::vector<QueuedJob> jobs = {
      {"long", 1, 4 * kHour, false, 0},   // 4h per GPU
      {"wide", 8, 8 * kHour, false, 0},   // 1h per GPU
      {"short", 1, kHour / 2, false, 0},  // 0.5h per GPU
  };
  EXPECT_EQ(sjf.Order(jobs, 0), (std::vector<std::string>{"short", "wide", "long"}));
}

TEST(QueuePolicy, AgingLetsALongJobOvertake) {
  ShortestJobFirst sjf(1.0);
  // "long" waited 3.75h; a new 0.5h job arrives now.
  std::vector<QueuedJob> jobs = {{"long", 1, 4 * kHour, false, 0},
                                 {"new", 1, kHour / 2, false, 3 * kHour + 3 * kHour / 4}};
  const int64_t now = 3 * kHour + 3 * kHour / 4;
  EXPECT_EQ(sjf.Order(jobs, now).front(), "long") << "0.25h left vs 0.5h";
  EXPECT_EQ(sjf.Order(jobs, kHour).front(), "new") << "after 1h the long job still waits";
  // With aging off, the long job would starve forever.
  ShortestJobFirst no_aging(0.0);
  EXPECT_EQ(no_aging.Order(jobs, 100 * kHour).front(), "new");
}

TEST(QueuePolicy, GuaranteedBeforeSpotAndStableTies) {
  ShortestJobFirst sjf;
  std::vector<QueuedJob> jobs = {{"spot-short", 1, 60'000, true, 0},
                                 {"g-b", 1, kHour, false, 5},
                                 {"g-a", 1, kHour, false, 5},
                                 {"g-early", 1, kHour, false, 1}};
  EXPECT_EQ(sjf.Order(jobs, 5),
            (std::vector<std::string>{"g-early", "g-a", "g-b", "spot-short"}));
}

}  // namespace
}  // namespace fedgate::federation
