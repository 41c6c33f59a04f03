// The job manager on a real core and a real job store, no coordinator: what
// a tenant may submit, see and cancel; a bad spec changes nothing; an
// idempotency key returns the same job; Watch/Logs streams are capped.
#include "gateway/jobs/job_manager.h"

#include <gtest/gtest.h>

#include "tests/support/test_core.h"

namespace fedgate::gateway {
namespace {

Identity User(const std::string& tenant, const std::string& name = "alice") {
  return *ParseSpiffeId("spiffe://aidc/tenant/" + tenant + "/user/" + name);
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(t_.Start("30m"));
    // The same file as the core's store (migrated by Store::Open), as in the gateway.
    auto store = JobStore::Open(t_.dir / "data/fedgate.db");
    ASSERT_TRUE(store.ok()) << store.status();
    jobs_ = std::move(*store);
    manager_ = std::make_unique<JobManager>(t_.core.get(), jobs_.get());
  }
  v1::SubmitJobRequest Spec(uint32_t gpus, const std::string& key = "") {
    v1::SubmitJobRequest r;
    r.mutable_spec()->set_name("train");
    r.mutable_spec()->set_gpus(gpus);
    r.mutable_spec()->add_command("python3");
    r.set_idempotency_key(key);
    return r;
  }
  size_t Stored() {
    auto all = jobs_->ListAllActive();
    EXPECT_TRUE(all.ok());
    return all.ok() ? all->size() : 0;
  }
  testing::TestCore t_;
  std::unique_ptr<JobStore> jobs_;
  std::unique_ptr<JobManager> manager_;
};

TEST_F(JobManagerTest, ATenantSeesAndCancelsOnlyItsOwnJobs) {
  auto sub = manager_->Submit(User("vision"), Spec(2));
  ASSERT_TRUE(sub.ok()) << sub.status();
  const std::string id = sub->job().id();
  EXPECT_EQ(sub->job().tenant(), "vision") << "from the certificate";
  v1::GetJobRequest get;
  get.set_id(id);
  EXPECT_TRUE(manager_->Get(User("vision", "bob"), get).ok()) << "same tenant, another user";
  EXPECT_EQ(manager_->Get(User("nlp"), get).status().code(), absl::StatusCode::kNotFound);
  auto listed = manager_->List(User("nlp"), v1::ListJobsRequest());
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs_size(), 0);
  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  EXPECT_EQ(manager_->Cancel(User("nlp"), cancel).status().code(), absl::StatusCode::kNotFound);
  auto cancelled = manager_->Cancel(User("vision"), cancel);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->job().state(), v1::Job::CANCELLED);
  EXPECT_EQ(manager_->Cancel(User("vision"), cancel).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "an ended job stays ended";
  // Its story: submitted then finished, each with its reason; another
  // tenant learns nothing of it.
  v1::JobEventsRequest ev;
  ev.set_id(id);
  EXPECT_EQ(manager_->Events(User("nlp"), ev).status().code(), absl::StatusCode::kNotFound);
  auto story = manager_->Events(User("vision", "bob"), ev);
  ASSERT_TRUE(story.ok()) << story.status();
  ASSERT_EQ(story->events_size(), 2);
  EXPECT_EQ(story->events(0).type(), "submitted");
  EXPECT_NE(story->events(0).message().find("spiffe://aidc/tenant/vision/user/alice"),
            std::string::npos);
  EXPECT_EQ(story->events(1).type(), "finished");
  EXPECT_EQ(story->events(1).message().rfind("CANCELLED: cancelled by", 0), 0u)
      << story->events(1).message();
  EXPECT_EQ(story->events(1).time().size(), 24u) << story->events(1).time();  // ms, UTC
  EXPECT_EQ(story->events(1).time().back(), 'Z');
}

TEST_F(JobManagerTest, ABadSpecIsRefusedAndStoresNothing) {
  for (uint32_t gpus : {0u, 1u << 21}) {
    auto sub = manager_->Submit(User("vision"), Spec(gpus));
    EXPECT_EQ(sub.status().code(), absl::StatusCode::kInvalidArgument) << gpus;
  }
  v1::SubmitJobRequest no_command = Spec(1);
  no_command.mutable_spec()->clear_command();
  EXPECT_EQ(manager_->Submit(User("vision"), no_command).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::GetJobRequest get;
  get.set_id("../../etc/passwd");
  EXPECT_EQ(manager_->Get(User("vision"), get).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Stored(), 0u);
}

TEST_F(JobManagerTest, TheSameIdempotencyKeyReturnsTheSameJob) {
  auto a = manager_->Submit(User("vision"), Spec(1, "k-1"));
  auto b = manager_->Submit(User("vision"), Spec(1, "k-1"));
  auto other = manager_->Submit(User("nlp"), Spec(1, "k-1"));
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  EXPECT_EQ(a->job().id(), b->job().id());
  EXPECT_NE(a->job().id(), other->job().id()) << "keys are per tenant";
  EXPECT_EQ(Stored(), 2u);
}

TEST_F(JobManagerTest, StreamsPerCallerAreCapped) {
  const int cap = t_.core->config().api.max_streams_per_caller;
  for (int i = 0; i < cap; ++i) ASSERT_TRUE(manager_->OpenStream(User("vision")).ok()) << i;
  EXPECT_EQ(manager_->OpenStream(User("vision")).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(manager_->OpenStream(User("vision", "bob")).ok()) << "per identity";
  manager_->CloseStream(User("vision"));
  EXPECT_TRUE(manager_->OpenStream(User("vision")).ok());
}

}  // namespace
}  // namespace fedgate::gateway
