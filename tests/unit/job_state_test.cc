#include "federation/job_state.h"

#include <gtest/gtest.h>

#include "federation/saturating.h"

namespace fedgate::federation {
namespace {

using S = JobState;
using A = JobActor;

TEST(JobStateTest, NamesRoundTrip) {
  for (S s : {S::kPending, S::kReserving, S::kRunning, S::kSucceeded, S::kFailed, S::kCancelled}) {
    auto back = ParseJobState(JobStateName(s));
    ASSERT_TRUE(back.has_value()) << JobStateName(s);
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(JobStateName(S::kRunning), "RUNNING");
  EXPECT_FALSE(ParseJobState("running").has_value());
  EXPECT_FALSE(ParseJobState("").has_value());
}

TEST(JobStateTest, TheCoordinatorDrivesTheLifecycle) {
  EXPECT_TRUE(CheckTransition(S::kPending, S::kReserving, A::kCoordinator).ok());
  EXPECT_TRUE(CheckTransition(S::kReserving, S::kRunning, A::kCoordinator).ok());
  EXPECT_TRUE(CheckTransition(S::kReserving, S::kPending, A::kCoordinator).ok());
  EXPECT_TRUE(CheckTransition(S::kRunning, S::kSucceeded, A::kCoordinator).ok());
  EXPECT_TRUE(CheckTransition(S::kRunning, S::kPending, A::kCoordinator).ok());
  EXPECT_TRUE(CheckTransition(S::kRunning, S::kFailed, A::kCoordinator).ok());
  // A new reason while waiting is a write in place.
  EXPECT_TRUE(CheckTransition(S::kPending, S::kPending, A::kCoordinator).ok());
  // No skipping the reservation.
  EXPECT_FALSE(CheckTransition(S::kPending, S::kRunning, A::kCoordinator).ok());
  EXPECT_FALSE(CheckTransition(S::kPending, S::kSucceeded, A::kCoordinator).ok());
  // Only a caller cancels.
  EXPECT_FALSE(CheckTransition(S::kRunning, S::kCancelled, A::kCoordinator).ok());
}

TEST(JobStateTest, CallersOnlyCancelAndOnlyWhatIsLive) {
  for (S from : {S::kPending, S::kReserving, S::kRunning}) {
    EXPECT_TRUE(CheckTransition(from, S::kCancelled, A::kCaller).ok()) << JobStateName(from);
    EXPECT_FALSE(CheckTransition(from, S::kRunning, A::kCaller).ok());
    EXPECT_FALSE(CheckTransition(from, S::kPending, A::kCaller).ok());
  }
}

TEST(JobStateTest, NothingLeavesAnEndedJob) {
  for (S end : {S::kSucceeded, S::kFailed, S::kCancelled}) {
    EXPECT_TRUE(IsTerminal(end));
    for (S to : {S::kPending, S::kReserving, S::kRunning, S::kSucceeded, S::kFailed,
                 S::kCancelled}) {
      for (A who : {A::kCoordinator, A::kCaller}) {
        auto st = CheckTransition(end, to, who);
        EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition)
            << JobStateName(end) << " -> " << JobStateName(to);
      }
    }
  }
  // The message names the state, for the caller's error line.
  EXPECT_NE(CheckTransition(S::kCancelled, S::kPending, A::kCoordinator).message().find(
                "CANCELLED"),
            std::string::npos);
}

TEST(SaturatingTest, NeverWraps) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(SatAdd(kMax - 1, 10), kMax);
  EXPECT_EQ(SatAdd(kMin + 1, -10), kMin);
  EXPECT_EQ(SatAdd(5, 7), 12);
  EXPECT_EQ(SatSub(kMin + 1, 10), kMin);
  EXPECT_EQ(SatSub(kMax - 1, -10), kMax);
  EXPECT_EQ(SatSub(10, 3), 7);
  EXPECT_EQ(SatMul(kMax / 2, 3), kMax);
  EXPECT_EQ(SatMul(kMax / 2, -3), kMin);
  EXPECT_EQ(SatMul(-4, 5), -20);
  EXPECT_EQ(ClampMs(-1, 1000, 60000), 1000);
  EXPECT_EQ(ClampMs(kMax, 1000, 60000), 60000);
}

}  // namespace
}  // namespace fedgate::federation
