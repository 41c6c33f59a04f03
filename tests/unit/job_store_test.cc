#include "gateway/store/job_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <set>
#include <thread>

#include "gateway/store/store.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using testing::TempDir;

JobRecord Job(const std::string& tenant, const std::string& key, uint32_t gpus = 1) {
  JobRecord r;
  r.id = NewJobId();
  r.tenant = tenant;
  r.idempotency_key = key;
  r.spec.set_gpus(gpus);
  r.spec.add_command("true");
  r.created_at_unix_ms = r.updated_at_unix_ms = 1;
  return r;
}

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto meta = Store::Open(dir_.path());
    ASSERT_TRUE(meta.ok());
    meta_ = std::move(*meta);
    auto js = JobStore::Open(dir_ / "fedgate.db");
    ASSERT_TRUE(js.ok()) << js.status();
    jobs_ = std::move(*js);
  }
  TempDir dir_;
  std::unique_ptr<Store> meta_;
  std::unique_ptr<JobStore> jobs_;
};

TEST_F(JobStoreTest, SubmittedJobsSurviveAReopen) {
  auto a = jobs_->Submit(Job("vision", "", 4));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->created);
  jobs_.reset();
  jobs_ = std::move(*JobStore::Open(dir_ / "fedgate.db"));
  auto got = jobs_->Get(a->job.id);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->spec.gpus(), 4u);
  EXPECT_EQ((*got)->tenant, "vision");
  EXPECT_EQ((*got)->state, federation::JobState::kPending);
}

TEST_F(JobStoreTest, TheSameKeyGivesTheSameJobPerTenant) {
  auto a = jobs_->Submit(Job("vision", "k1"));
  auto b = jobs_->Submit(Job("vision", "k1"));
  auto c = jobs_->Submit(Job("speech", "k1"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->job.id, b->job.id);
  EXPECT_FALSE(b->created);
  EXPECT_NE(a->job.id, c->job.id) << "keys are per tenant";
  EXPECT_EQ(jobs_->List("", "", "", 100)->size(), 2u);
}

TEST_F(JobStoreTest, ConcurrentSubmitsAreGroupCommittedAndKeysStayUnique) {
  constexpr int kThreads = 32, kEach = 20;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::set<std::string> ids, keyed_ids;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto r = jobs_->Submit(Job("t" + std::to_string(t % 4), ""));
        auto k = jobs_->Submit(Job("shared", "same-key"));  // all threads race on one key
        std::lock_guard lock(mu);
        if (r.ok()) ids.insert(r->job.id);
        if (k.ok()) keyed_ids.insert(k->job.id);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ids.size(), size_t{kThreads * kEach});
  EXPECT_EQ(keyed_ids.size(), 1u) << "640 racing submits with one key made one job";
  EXPECT_LT(jobs_->commits(), uint64_t{2 * kThreads * kEach}) << "some fsyncs were shared";
  EXPECT_GT(jobs_->largest_batch(), 1u);
  EXPECT_EQ(jobs_->List("t1", "", "", 1000)->size(), size_t{kThreads / 4 * kEach});
}

TEST_F(JobStoreTest, ListPagesAndFilters) {
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(jobs_->Submit(Job("vision", "")).ok());
  std::string after;
  size_t seen = 0;
  for (int page = 0; page < 10; ++page) {
    auto rows = jobs_->List("vision", "", after, 10);
    ASSERT_TRUE(rows.ok());
    if (rows->empty()) break;
    seen += rows->size();
    after = rows->back().id;
  }
  EXPECT_EQ(seen, 25u);
  auto one = jobs_->List("vision", "", "", 1);
  JobRecord cancel = (*one)[0];
  cancel.state = federation::JobState::kCancelled;
  ASSERT_TRUE(jobs_->Save(&cancel, federation::JobActor::kCaller).ok());
  EXPECT_EQ(jobs_->List("vision", "CANCELLED", "", 100)->size(), 1u);
  JobRecord nope = Job("vision", "");
  nope.id = "j-0000000000000000";
  EXPECT_EQ(jobs_->Save(&nope, federation::JobActor::kCaller).code(),
            absl::StatusCode::kNotFound);
}

using federation::JobActor;
using federation::JobState;

// A service's replica range lives in its spec, which a save keeps.
TEST_F(JobStoreTest, ASaveKeepsTheSpecItCarries) {
  auto a = jobs_->Submit(Job("vision", ""));
  ASSERT_TRUE(a.ok());
  JobRecord next = a->job;
  next.spec.mutable_replicas()->set_desired(4);
  ASSERT_TRUE(jobs_->Save(&next, JobActor::kCoordinator).ok());
  EXPECT_EQ((*jobs_->Get(a->job.id))->spec.replicas().desired(), 4u);
  EXPECT_EQ((*jobs_->Get(a->job.id))->spec.command(0), a->job.spec.command(0));
}

TEST_F(JobStoreTest, AStaleWriterLosesTheCompareAndSet) {
  auto a = jobs_->Submit(Job("vision", ""));
  ASSERT_TRUE(a.ok());
  // The coordinator read the job, and so did a cancel.
  JobRecord coordinator = a->job, cancel = a->job;
  cancel.state = JobState::kCancelled;
  cancel.reason = "cancelled by alice";
  ASSERT_TRUE(jobs_->Save(&cancel, JobActor::kCaller).ok());
  EXPECT_EQ(cancel.version, a->job.version + 1);
  // The coordinator's copy is stale: placing it must not undo the cancel.
  coordinator.state = JobState::kReserving;
  auto st = jobs_->Save(&coordinator, JobActor::kCoordinator);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  auto got = jobs_->Get(a->job.id);
  EXPECT_EQ((*got)->state, JobState::kCancelled);
  EXPECT_EQ((*got)->reason, "cancelled by alice");
  // Re-read: the state machine now refuses any move out of CANCELLED.
  JobRecord fresh = **got;
  fresh.state = JobState::kPending;
  EXPECT_EQ(jobs_->Save(&fresh, JobActor::kCoordinator).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*jobs_->Get(a->job.id))->state, JobState::kCancelled);
}

TEST_F(JobStoreTest, VersionsFollowEveryWriteAndSurviveAReopen) {
  auto a = jobs_->Submit(Job("vision", ""));
  JobRecord j = a->job;
  // A new job is at version 1: its queued record's first copy is newer
  // than a witness's none.
  EXPECT_EQ(j.version, 1u);
  for (JobState s : {JobState::kReserving, JobState::kRunning, JobState::kPending}) {
    j.state = s;
    ASSERT_TRUE(jobs_->Save(&j, JobActor::kCoordinator).ok()) << federation::JobStateName(s);
  }
  EXPECT_EQ(j.version, 4u);
  // A skipped phase is refused and leaves the row as it was.
  j.state = JobState::kSucceeded;
  EXPECT_EQ(jobs_->Save(&j, JobActor::kCoordinator).code(), absl::StatusCode::kFailedPrecondition);
  jobs_.reset();
  jobs_ = std::move(*JobStore::Open(dir_ / "fedgate.db"));
  auto got = jobs_->Get(a->job.id);
  EXPECT_EQ((*got)->version, 4u);
  EXPECT_EQ((*got)->state, JobState::kPending);
}

TEST_F(JobStoreTest, EventsLandWithTheirWriteAndOnlyWithIt) {
  JobRecord r = Job("vision", "");
  r.new_events.push_back({1, "submitted", "cn-a", "by alice", 0});
  auto a = jobs_->Submit(r);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->job.new_events.empty());
  JobRecord j = a->job, stale = a->job;
  j.state = JobState::kReserving;
  j.new_events.push_back({2, "placed", "", "on cn-a", 0});
  ASSERT_TRUE(jobs_->Save(&j, JobActor::kCoordinator).ok());
  EXPECT_TRUE(j.new_events.empty());
  // A write that loses its compare-and-set tells nothing.
  stale.state = JobState::kReserving;
  stale.new_events.push_back({3, "placed", "", "a stale placement", 0});
  EXPECT_EQ(jobs_->Save(&stale, JobActor::kCoordinator).code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(jobs_->AppendEvents(j.id, {{4, "staging", "cn-b", "41 %", 0}}).ok());
  // Another job's events stay its own.
  JobRecord other = Job("vision", "");
  other.new_events.push_back({5, "submitted", "cn-a", "other", 0});
  ASSERT_TRUE(jobs_->Submit(other).ok());
  jobs_.reset();
  jobs_ = std::move(*JobStore::Open(dir_ / "fedgate.db"));
  auto ev = jobs_->Events(j.id, 0, 100);
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_EQ(ev->size(), 3u);
  EXPECT_EQ((*ev)[0].type, "submitted");
  EXPECT_EQ((*ev)[0].site, "cn-a");
  EXPECT_EQ((*ev)[1].type, "placed");
  EXPECT_EQ((*ev)[1].message, "on cn-a");
  EXPECT_EQ((*ev)[2].type, "staging");
  EXPECT_EQ((*ev)[2].time_ms, 4);
  EXPECT_LT((*ev)[0].seq, (*ev)[1].seq);
  EXPECT_LT((*ev)[1].seq, (*ev)[2].seq);
  auto after = jobs_->Events(j.id, (*ev)[1].seq, 100);
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].type, "staging");
}

TEST_F(JobStoreTest, ATakenOverJobIsWrittenOnceAtItsTermAndAMovedOneIsNoLongerDriven) {
  JobRecord r = Job("vision", "");
  r.state = JobState::kRunning;
  r.attempt = 1;
  r.run = "plan";
  r.version = 7;  // newer than every site's copy
  r.term = 2;
  r.new_events.push_back({5, "coordinator_moved", "cn-b", "term 2", 0});
  ASSERT_TRUE(jobs_->Adopt(r).ok());
  EXPECT_EQ(jobs_->Adopt(r).code(), absl::StatusCode::kFailedPrecondition) << "term 2 is here";
  auto got = jobs_->Get(r.id);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->term, 2u);
  EXPECT_EQ((*got)->version, 7u);
  EXPECT_EQ((*got)->run, "plan");
  EXPECT_TRUE((*got)->moved_to.empty()) << "this site coordinates it";
  EXPECT_TRUE((*got)->idempotency_key.empty());
  ASSERT_EQ(jobs_->Events(r.id, 0, 10)->size(), 1u);
  auto active = jobs_->ListAllActive();
  ASSERT_EQ(active->size(), 1u);

  // Taken over again from here: the row names the coordinator, keeps its
  // state, and the loops no longer see it.
  JobRecord moved = **got;
  moved.term = 3;
  moved.moved_to = "cn-c";
  ASSERT_TRUE(jobs_->Save(&moved, JobActor::kCoordinator).ok());
  EXPECT_TRUE(jobs_->ListAllActive()->empty());
  jobs_.reset();
  jobs_ = std::move(*JobStore::Open(dir_ / "fedgate.db"));
  got = jobs_->Get(r.id);
  EXPECT_EQ((*got)->moved_to, "cn-c");
  EXPECT_EQ((*got)->term, 3u);
  EXPECT_EQ((*got)->state, JobState::kRunning);
  // A later term taken over back here replaces the row; an older one does not.
  r.term = 2;
  EXPECT_EQ(jobs_->Adopt(r).code(), absl::StatusCode::kFailedPrecondition);
  r.term = 4;
  r.version = 9;
  ASSERT_TRUE(jobs_->Adopt(r).ok());
  got = jobs_->Get(r.id);
  EXPECT_TRUE((*got)->moved_to.empty());
  EXPECT_EQ((*got)->term, 4u);
  EXPECT_EQ(jobs_->ListAllActive()->size(), 1u);
}

TEST_F(JobStoreTest, ProgressToldAfterTheEndIsRefusedSoTheStoryEndsWithIt) {
  JobRecord r = Job("vision", "");
  auto a = jobs_->Submit(r);
  ASSERT_TRUE(a.ok());
  JobRecord j = a->job;
  j.state = JobState::kCancelled;
  j.new_events.push_back({2, "finished", "", "CANCELLED: by alice", 0});
  ASSERT_TRUE(jobs_->Save(&j, JobActor::kCaller).ok());
  // A commit that returns after the cancel tells "started" too late.
  EXPECT_EQ(jobs_->AppendEvents(j.id, {{3, "started", "", "attempt 1", 0}}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(jobs_->AppendEvents("no-such-job", {{3, "started", "", "", 0}}).code(),
            absl::StatusCode::kNotFound);
  auto ev = jobs_->Events(j.id, 0, 100);
  ASSERT_TRUE(ev.ok());
  ASSERT_FALSE(ev->empty());
  EXPECT_EQ(ev->back().type, "finished");
}

TEST_F(JobStoreTest, EachFilterPagesInIdOrderAndKeepsToItsRows) {
  // Two tenants, every third job of each cancelled.
  std::set<std::string> cancelled_vision, cancelled_all;
  for (int i = 0; i < 30; ++i) {
    auto a = jobs_->Submit(Job(i % 2 ? "vision" : "speech", ""));
    ASSERT_TRUE(a.ok());
    if (i % 3 == 0) {
      JobRecord j = a->job;
      j.state = federation::JobState::kCancelled;
      ASSERT_TRUE(jobs_->Save(&j, federation::JobActor::kCaller).ok());
      cancelled_all.insert(j.id);
      if (i % 2) cancelled_vision.insert(j.id);
    }
  }
  auto pages = [&](const std::string& tenant, const std::string& state) {
    std::vector<std::string> ids;
    std::string after;
    while (true) {
      auto rows = jobs_->List(tenant, state, after, 4);
      EXPECT_TRUE(rows.ok());
      if (!rows.ok() || rows->empty()) return ids;
      for (const auto& r : *rows) {
        EXPECT_TRUE(tenant.empty() || r.tenant == tenant) << r.id;
        EXPECT_TRUE(state.empty() || federation::JobStateName(r.state) == state) << r.id;
        ids.push_back(r.id);
      }
      after = rows->back().id;
    }
  };
  const auto all = pages("", ""), vision = pages("vision", ""), by_state = pages("", "CANCELLED"),
             both = pages("vision", "CANCELLED");
  for (const auto* ids : {&all, &vision, &by_state, &both}) {
    EXPECT_TRUE(std::is_sorted(ids->begin(), ids->end()));
  }
  EXPECT_EQ(all.size(), 30u);
  EXPECT_EQ(vision.size(), 15u);
  EXPECT_EQ(std::set<std::string>(by_state.begin(), by_state.end()), cancelled_all);
  EXPECT_EQ(std::set<std::string>(both.begin(), both.end()), cancelled_vision);
  EXPECT_EQ(jobs_->ListAllActive()->size(), 30u - cancelled_all.size());
}

TEST_F(JobStoreTest, ListAllActiveReadsEveryActiveJob) {
  for (int i = 0; i < 23; ++i) ASSERT_TRUE(jobs_->Submit(Job("vision", "")).ok());
  auto done = jobs_->List("vision", "", "", 1);
  JobRecord c = (*done)[0];
  c.state = JobState::kCancelled;
  ASSERT_TRUE(jobs_->Save(&c, JobActor::kCaller).ok());
  auto all = jobs_->ListAllActive();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 22u) << "every active job, the cancelled one left out";
  std::set<std::string> ids;
  for (const auto& j : *all) ids.insert(j.id);
  EXPECT_EQ(ids.size(), 22u);
}

// A restarted coordinator tells the members of the jobs that ended lately:
// only those it still coordinates, only terminal ones, only recent ones.
TEST_F(JobStoreTest, ListEndedSinceReadsTheRecentEndsThisSiteCoordinates) {
  std::vector<JobRecord> j;
  for (int i = 0; i < 5; ++i) j.push_back(jobs_->Submit(Job("vision", ""))->job);
  auto end = [&](JobRecord* r, JobState st, int64_t at, const std::string& moved_to = "") {
    r->state = st;
    r->updated_at_unix_ms = at;
    r->moved_to = moved_to;
    ASSERT_TRUE(jobs_->Save(r, JobActor::kCaller).ok());
  };
  end(&j[0], JobState::kCancelled, 5'000);
  end(&j[1], JobState::kCancelled, 100);  // ended long ago
  end(&j[2], JobState::kCancelled, 6'000, "cn-c");  // moved: cn-c tells them
  auto got = jobs_->ListEndedSince(1'000);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].id, j[0].id);
  EXPECT_EQ((*got)[0].state, JobState::kCancelled);
  EXPECT_EQ(jobs_->ListEndedSince(0)->size(), 2u) << "the pending ones and the moved one left out";
}

}  // namespace
}  // namespace fedgate::gateway

namespace fedgate::gateway {
namespace {

// The job API asks for one row past a full page (page_size 1000 -> 1001) to
// know whether another page follows: the store must return it.
TEST_F(JobStoreTest, ListReturnsTheRowPastAFullPage) {
  std::vector<std::future<absl::StatusOr<SubmitOutcome>>> pending;
  for (int i = 0; i < 1001; ++i) {
    auto p = std::make_shared<std::promise<absl::StatusOr<SubmitOutcome>>>();
    pending.push_back(p->get_future());
    jobs_->SubmitAsync(Job("vision", ""), [p](absl::StatusOr<SubmitOutcome> r) {
      p->set_value(std::move(r));
    });
  }
  for (auto& f : pending) ASSERT_TRUE(f.get().ok());
  auto rows = jobs_->List("vision", "", "", 1001);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 1001u);
}

}  // namespace
}  // namespace fedgate::gateway

namespace fedgate::gateway {
namespace {

TEST_F(JobStoreTest, CountsJobsByStateAndTheOldestPending) {
  JobRecord a = Job("vision", ""), b = Job("vision", ""), c = Job("nlp", "");
  a.created_at_unix_ms = 500;
  b.created_at_unix_ms = 300;
  c.created_at_unix_ms = 100;
  for (auto* j : {&a, &b, &c}) ASSERT_TRUE(jobs_->Submit(*j).ok());
  auto got = jobs_->Get(c.id);
  ASSERT_TRUE(got.ok() && got->has_value());
  JobRecord cancelled = **got;
  cancelled.state = JobState::kCancelled;
  ASSERT_TRUE(jobs_->Save(&cancelled, JobActor::kCaller).ok());
  auto counts = jobs_->Count();
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->by_state.at("PENDING"), 2);
  EXPECT_EQ(counts->by_state.at("CANCELLED"), 1);
  EXPECT_EQ(counts->by_state.at("RUNNING"), 0) << "every state is listed, zero included";
  EXPECT_EQ(counts->by_state.size(), 6u);
  ASSERT_TRUE(counts->oldest_pending_created_ms.has_value());
  EXPECT_EQ(*counts->oldest_pending_created_ms, 300) << "the cancelled one is older but not pending";
}

}  // namespace
}  // namespace fedgate::gateway
