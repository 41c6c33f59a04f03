// JobEvents: writes wake the streams of that job only, ticks wake followers,
// and an unsubscribed stream is never woken again (its owner may be gone).
#include "gateway/jobs/job_events.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace fedgate::gateway {
namespace {

// Counts wakes and lets the test wait for a number of them.
struct Counter {
  std::mutex mu;
  std::condition_variable cv;
  int n = 0;
  void Hit() {
    std::lock_guard lock(mu);
    ++n;
    cv.notify_all();
  }
  bool WaitFor(int want) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return n >= want; });
  }
  int Get() {
    std::lock_guard lock(mu);
    return n;
  }
};

TEST(JobEventsTest, AWriteWakesTheStreamsOfThatJobOnly) {
  JobEvents ev(/*tick_ms=*/3600 * 1000);  // no tick within the test
  ev.Start();
  Counter a, b;
  ev.Subscribe("j-a", false, [&] { a.Hit(); });
  ev.Subscribe("j-a", false, [&] { a.Hit(); });
  ev.Subscribe("j-b", false, [&] { b.Hit(); });
  ev.Notify("j-a");
  ASSERT_TRUE(a.WaitFor(2));
  ev.Notify("j-nobody");
  ev.Notify("j-b");
  ASSERT_TRUE(b.WaitFor(1));
  EXPECT_EQ(a.Get(), 2) << "a write of j-b or of an unwatched job woke j-a";
}

TEST(JobEventsTest, TicksWakeOnlyFollowers) {
  JobEvents ev(/*tick_ms=*/5);
  ev.Start();
  Counter follow, watch;
  ev.Subscribe("j-a", true, [&] { follow.Hit(); });
  ev.Subscribe("j-a", false, [&] { watch.Hit(); });
  ASSERT_TRUE(follow.WaitFor(3));
  EXPECT_EQ(watch.Get(), 0);
}

TEST(JobEventsTest, NoWakeAfterUnsubscribeReturns) {
  JobEvents ev(/*tick_ms=*/1);
  ev.Start();
  std::atomic<bool> gone{false};
  std::atomic<int> late{0};
  Counter seen;
  const uint64_t t = ev.Subscribe("j-a", true, [&] {
    if (gone) ++late;
    seen.Hit();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow wake
  });
  ASSERT_TRUE(seen.WaitFor(2));
  ev.Unsubscribe(t);  // may run while the wake runs: must wait for it
  gone = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(late.load(), 0);
  EXPECT_EQ(ev.subscribers(), 0u);
}

TEST(JobEventsTest, AWakeMayUnsubscribeItself) {
  JobEvents ev(/*tick_ms=*/1);
  ev.Start();
  Counter seen;
  uint64_t t = 0;
  std::mutex mu;
  {
    std::lock_guard lock(mu);
    t = ev.Subscribe("j-a", true, [&] {
      std::lock_guard l(mu);
      ev.Unsubscribe(t);  // on the dispatcher thread: must not wait for itself
      seen.Hit();
    });
  }
  ASSERT_TRUE(seen.WaitFor(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(seen.Get(), 1);
}

TEST(JobEventsTest, StopEndsTheDispatcher) {
  JobEvents ev(/*tick_ms=*/1);
  ev.Start();
  Counter seen;
  ev.Subscribe("j-a", true, [&] { seen.Hit(); });
  ASSERT_TRUE(seen.WaitFor(1));
  ev.Stop();
  const int n = seen.Get();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(seen.Get(), n);
}

}  // namespace
}  // namespace fedgate::gateway
