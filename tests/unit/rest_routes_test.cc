// The REST routes the console and the gateway share: the federation views,
// a job's virtual cluster, and what stays an error.
#include "gateway/api/rest_routes.h"

#include <gtest/gtest.h>

namespace fedgate::gateway {
namespace {

using K = RestCall::Kind;

TEST(RestRoutes, FederationViews) {
  EXPECT_EQ(RouteRest("GET", "/v1/sites", "")->kind, K::kSites);
  EXPECT_EQ(RouteRest("GET", "/v1/links?x=1", "")->kind, K::kLinks);
  EXPECT_EQ(RouteRest("GET", "/v1/nodes", "")->kind, K::kNodes);
  EXPECT_EQ(RouteRest("POST", "/v1/sites", "").status().code(), absl::StatusCode::kNotFound);
}

TEST(RestRoutes, VirtualClusterOfAJob) {
  auto vc = RouteRest("GET", "/v1/jobs/j-1/vc", "");
  ASSERT_TRUE(vc.ok());
  EXPECT_EQ(vc->kind, K::kVc);
  EXPECT_EQ(vc->get.id(), "j-1");
  EXPECT_EQ(RouteRest("GET", "/v1/jobs//vc", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/a/b/vc", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/j-1", "")->kind, K::kGet);
}

// A call about one job names it, so that a member that does not coordinate
// the job can redirect it; ?follow=false keeps it here.
TEST(RestRoutes, ACallAboutOneJobNamesItAndMayBeKeptHere) {
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/j-1", "")->job_id, "j-1");
  EXPECT_TRUE(RouteRest("GET", "/v1/jobs/j-1", "")->follow);
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/j-2/vc", "")->job_id, "j-2");
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/j-3/events", "")->job_id, "j-3");
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/j-4/logs?rank=1", "")->job_id, "j-4");
  EXPECT_EQ(RouteRest("POST", "/v1/jobs/j-5:cancel", "{}")->job_id, "j-5");
  EXPECT_FALSE(RouteRest("GET", "/v1/jobs/j-1?follow=false", "")->follow);
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/j-1?follow=maybe", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(RouteRest("GET", "/v1/jobs", "")->job_id.empty()) << "a list is about no one job";
}

TEST(RestRoutes, EventsOfAJob) {
  auto ev = RouteRest("GET", "/v1/jobs/j-1/events?after_seq=7", "");
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->kind, K::kEvents);
  EXPECT_EQ(ev->events.id(), "j-1");
  EXPECT_EQ(ev->events.after_seq(), 7u);
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/j-1/events?after_seq=-1", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/a/b/events", "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(RouteRest("POST", "/v1/jobs/j-1/events", "").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RestRoutes, LogsAndUsageQueries) {
  auto logs = RouteRest("GET", "/v1/jobs/j-1/logs?rank=3&offset=99", "");
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(logs->logs.rank(), 3u);
  EXPECT_EQ(logs->logs.offset(), 99u);
  EXPECT_EQ(RouteRest("GET", "/v1/jobs/j-1/logs?rank=x", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto usage = RouteRest("GET", "/v1/usage?by=site&since=24h", "");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->usage.by(), "site");
  EXPECT_EQ(usage->usage.since(), "24h");
  EXPECT_EQ(RouteRest("GET", "/v1/jobs?state=NOPE", "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedgate::gateway
