#include "federation/autoscale.h"
#include "federation/job_spec.h"
#include "federation/service_spec.h"

#include <gtest/gtest.h>

namespace fedgate::federation {
namespace {

v1::JobSpec Service() {
  v1::JobSpec s;
  s.set_kind("service");
  s.set_name("chat");
  s.set_gpus(1);
  s.add_command("python3");
  return s;
}

TEST(ServiceSpec, DefaultsAreThoseOfTheContract) {
  const auto s = WithDefaults(Service());
  EXPECT_EQ(s.replicas().min(), 1u);
  EXPECT_EQ(s.replicas().max(), 1u);
  EXPECT_EQ(s.readiness().path(), "/healthz");
  EXPECT_EQ(s.readiness().period(), "2s");
  EXPECT_EQ(s.readiness().timeout(), "1s");
  EXPECT_EQ(s.readiness().failure_threshold(), 3u);
  EXPECT_FALSE(s.has_autoscale());
  EXPECT_TRUE(s.idempotent());
  const auto p = PolicyOf(s);
  EXPECT_EQ(p.request_timeout_ms, 30000);
  EXPECT_EQ(p.max_body, 64ull << 20);
  EXPECT_EQ(p.desired, 1u);
  // A batch job gets none of them.
  v1::JobSpec job = Service();
  job.clear_kind();
  EXPECT_FALSE(WithDefaults(job).has_replicas());
}

TEST(ServiceSpec, BadFieldsAreNamed) {
  auto err = [](const v1::JobSpec& s) { return std::string(ValidateJobSpec(s, {}).message()); };
  EXPECT_TRUE(ValidateJobSpec(Service(), {}).ok());
  auto s = Service();
  s.set_kind("daemon");
  EXPECT_NE(err(s).find("kind must be job or service"), std::string::npos) << err(s);
  s = Service();
  s.set_gpus(2);
  EXPECT_NE(err(s).find("must be 1"), std::string::npos) << err(s);
  s = Service();
  s.mutable_replicas()->set_min(3);
  s.mutable_replicas()->set_max(2);
  EXPECT_NE(err(s).find("replicas.max 2 is less than replicas.min 3"), std::string::npos) << err(s);
  s.mutable_replicas()->set_max(65);
  EXPECT_NE(err(s).find("over the limit of 64"), std::string::npos) << err(s);
  s = Service();
  s.mutable_readiness()->set_path("healthz");
  EXPECT_NE(err(s).find("readiness.path must start with /"), std::string::npos) << err(s);
  s = Service();
  s.mutable_autoscale()->set_target_rps_per_replica(0);
  EXPECT_NE(err(s).find("autoscale.target_rps_per_replica must be > 0"), std::string::npos);
  s.mutable_autoscale()->set_target_rps_per_replica(40);
  s.mutable_autoscale()->set_window("ten seconds");
  EXPECT_NE(err(s).find("autoscale.window"), std::string::npos) << err(s);
  s = Service();
  s.set_max_body("64 parsecs");
  EXPECT_NE(err(s).find("max_body"), std::string::npos) << err(s);
  s = Service();
  s.set_spot_replicas(1.5);
  EXPECT_NE(err(s).find("spot_replicas"), std::string::npos) << err(s);
  // Service fields on a batch job are refused, not ignored.
  v1::JobSpec job = Service();
  job.clear_kind();
  job.mutable_replicas()->set_max(4);
  EXPECT_NE(err(job).find("are for kind: service"), std::string::npos) << err(job);
}

TEST(ServiceSpec, SizesParseWithTheirUnits) {
  EXPECT_EQ(*ParseSizeBytes("64MiB"), 64ull << 20);
  EXPECT_EQ(*ParseSizeBytes("1GiB"), 1ull << 30);
  EXPECT_EQ(*ParseSizeBytes("1000"), 1000u);
  EXPECT_EQ(*ParseSizeBytes("2MB"), 2000000u);
  EXPECT_FALSE(ParseSizeBytes("").ok());
  EXPECT_FALSE(ParseSizeBytes("MiB").ok());
  EXPECT_FALSE(ParseSizeBytes("5 MiB").ok());
  EXPECT_FALSE(ParseSizeBytes("99999999999999999999").ok());
}

TEST(ServiceSpec, AReplicaIsAOneRankJobOfTheService) {
  auto s = WithDefaults(Service());
  s.set_spot_replicas(0.5);
  s.mutable_replicas()->set_max(5);
  const auto r = ReplicaSpec(s, "j-0123456789abcdef", /*spot=*/true);
  EXPECT_EQ(r.service(), "j-0123456789abcdef");
  EXPECT_EQ(r.kind(), "");
  EXPECT_EQ(r.gpus(), 1u);
  EXPECT_EQ(r.max_sites(), 1u);
  EXPECT_EQ(r.priority(), "spot");
  EXPECT_FALSE(r.has_replicas());
  EXPECT_TRUE(ValidateJobSpec(r, {}).ok()) << ValidateJobSpec(r, {});
  auto p = PolicyOf(s);
  EXPECT_EQ(SpotAllowance(p, 1), 0u);
  EXPECT_EQ(SpotAllowance(p, 3), 1u);  // half of the 2 above min
  EXPECT_EQ(SpotAllowance(p, 5), 2u);
}

ServicePolicy Scaling() {
  ServicePolicy p;
  p.min = 1;
  p.max = 6;
  p.autoscale = true;
  p.target_rps = 40;
  p.up_after_ms = 15000;
  p.down_after_ms = 60000;
  p.window_ms = 10000;
  p.interval_ms = 2000;
  return p;
}

// Feeds `rps` for `seconds` in ticks of 1 s, returning the count after.
uint32_t Feed(Autoscaler& a, int64_t* now, uint32_t count, double rps, int seconds,
             std::vector<std::string>* why = nullptr) {
  for (int i = 0; i < seconds; ++i) {
    *now += 1000;
    a.Count(*now, static_cast<uint64_t>(rps));
    if (i % 2 == 1) {
      auto d = a.Tick(*now, count);
      if (!d.why.empty() && why != nullptr) why->push_back(d.why);
      count = d.next;
    }
  }
  return count;
}

TEST(Autoscaler, ScalesUpOnlyAfterTheDelayAndTheClockRestartsAfterEachStep) {
  Autoscaler a(Scaling());
  int64_t now = 0;
  std::vector<std::string> why;
  // 130 rps wants ceil(130/40) = 4; not before 15 s above.
  uint32_t n = Feed(a, &now, 1, 130, 12, &why);
  EXPECT_EQ(n, 1u);
  n = Feed(a, &now, n, 130, 10, &why);
  EXPECT_EQ(n, 4u);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_NE(why[0].find("scale up 1 -> 4"), std::string::npos) << why[0];
  // More load: the next step waits a full scale_up_after again.
  n = Feed(a, &now, n, 400, 12, &why);
  EXPECT_EQ(n, 4u);
  n = Feed(a, &now, n, 400, 10, &why);
  EXPECT_EQ(n, 6u) << "bounded by max";
}

TEST(Autoscaler, ScalesDownAfterStabilisationToTheHighestDesiredSeen) {
  Autoscaler a(Scaling());
  int64_t now = 0;
  uint32_t n = Feed(a, &now, 1, 200, 30);
  ASSERT_EQ(n, 5u);
  // Load falls to 90 rps (desired 3): nothing for the minute of stabilisation.
  n = Feed(a, &now, n, 90, 50);
  EXPECT_EQ(n, 5u);
  std::vector<std::string> why;
  n = Feed(a, &now, n, 90, 30, &why);
  // The window's fall from 200 to 90 rps passed through desired 4 within
  // the stabilisation minute: down to that first, then to 3.
  EXPECT_EQ(n, 4u);
  ASSERT_FALSE(why.empty());
  EXPECT_NE(why[0].find("scale down 5 -> 4"), std::string::npos) << why[0];
  EXPECT_NE(why[0].find("the highest desired in the last 60s was 4"), std::string::npos) << why[0];
  n = Feed(a, &now, n, 90, 70, &why);
  EXPECT_EQ(n, 3u);
  // No load at all: back to min, never below.
  n = Feed(a, &now, n, 0, 200);
  EXPECT_EQ(n, 1u);
}

TEST(Autoscaler, ABriefSpikeOrDipChangesNothing) {
  Autoscaler a(Scaling());
  int64_t now = 0;
  uint32_t n = Feed(a, &now, 2, 60, 20);  // desired 2: steady
  EXPECT_EQ(n, 2u);
  n = Feed(a, &now, n, 300, 2);  // a spike: with the window, above for ~12 s < 15 s
  n = Feed(a, &now, n, 60, 20);
  EXPECT_EQ(n, 2u);
  n = Feed(a, &now, n, 0, 20);  // dip shorter than scale_down_after
  n = Feed(a, &now, n, 60, 20);
  EXPECT_EQ(n, 2u);
}

}  // namespace
}  // namespace fedgate::federation
