// fedsim on hand-made traces whose outcome is worked out by hand per policy,
// and malformed traces.
#include <gtest/gtest.h>

#include "bench/fedsim/sim.h"

namespace fedgate::fedsim {
namespace {

// One site of 4 GPUs (one node). A: 2 GPUs 100 s at t=0; B: 4 GPUs 50 s at
// t=1; C: 2 GPUs 10 s at t=2; D: 2 GPUs 200 s at t=3. Estimates are exact.
//   fifo:    A 0-100; B blocks C and D until A ends: B 100-150, C 150-160,
//            D 150-350.  JCT 100 + 149 + 158 + 347 = 754, avg 188.5
//   sjf:     C 2-12 (shortest per GPU); at 12 B does not fit, D does: D 12-212,
//            and B waits for it: B 212-262.  JCT 100 + 10 + 209 + 261 = 580, avg 145
//   fedgate: C 2-12; B reserves t=100 (when A ends), so D, which would still
//            hold 2 GPUs then, is held back: B 100-150, D 150-350.
//            JCT 100 + 10 + 149 + 347 = 606, avg 151.5
const char* kTrace =
    "time,duration,num_gpus,tenant,priority\n"
    "0,100,2,t1,guaranteed\n"
    "1,50,4,t1,guaranteed\n"
    "2,10,2,t2,guaranteed\n"
    "3,200,2,t2,guaranteed\n";

SimResult Replay(federation::SchedPolicy p) {
  TraceInfo info;
  auto jobs = ParseTrace(kTrace, &info);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  SimOptions o;
  o.policy = p;
  auto r = Simulate(*jobs, info, {{"a", "A100", 4}}, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

TEST(Fedsim, HandComputedJctsPerPolicy) {
  const SimResult fifo = Replay(federation::SchedPolicy::kFifo);
  EXPECT_DOUBLE_EQ(fifo.avg_jct_s, 188.5);
  EXPECT_EQ(fifo.start_order, (std::vector<int>{2, 3, 4, 5}));
  const SimResult sjf = Replay(federation::SchedPolicy::kSjf);
  EXPECT_DOUBLE_EQ(sjf.avg_jct_s, 145);
  EXPECT_EQ(sjf.start_order, (std::vector<int>{2, 4, 5, 3})) << "B starved behind D";
  const SimResult fg = Replay(federation::SchedPolicy::kFedgate);
  EXPECT_DOUBLE_EQ(fg.avg_jct_s, 151.5);
  EXPECT_EQ(fg.start_order, (std::vector<int>{2, 4, 3, 5})) << "D held back for B's reservation";
  // Makespan and utilisation: fifo and fedgate end at 350 with 2x100 + 4x50 +
  // 2x10 + 2x200 = 820 busy GPU-seconds on 4 GPUs.
  EXPECT_DOUBLE_EQ(fg.makespan_s, 350);
  EXPECT_NEAR(fg.gpu_utilization, 820.0 / (4 * 350), 1e-9);
  EXPECT_DOUBLE_EQ(fifo.p99_queue_s, 148);  // C waited from 2 to 150
}

TEST(Fedsim, MissingColumnsAreDerivedTheSameWayForEveryPolicyAndSeed) {
  const std::string trace = "duration,num_gpus,time\n5,1,0\n6,1,0\n7,1,0\n8,1,0\n";
  TraceInfo info;
  auto jobs = ParseTrace(trace, &info);
  ASSERT_TRUE(jobs.ok());
  EXPECT_FALSE(info.has_tenant);
  SimOptions o;
  auto a = Simulate(*jobs, info, {{"a", "A100", 8}}, o);
  auto b = Simulate(*jobs, info, {{"a", "A100", 8}}, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->start_order, b->start_order);
  EXPECT_NE(a->derived.find("Zipf"), std::string::npos);
  auto big = Simulate(*ParseTrace("time,duration,num_gpus\n0,5,16\n1,5,1\n", &info), info,
                      {{"a", "A100", 8}}, o);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->left_out, 1u) << "a 16-GPU job on 8 GPUs is left out, and counted";
  EXPECT_EQ(big->jobs, 1u);
}

TEST(Fedsim, MalformedTracesNameTheLine) {
  struct Case {
    const char* trace;
    const char* says;
  } cases[] = {
      {"time,num_gpus\n0,1\n", "line 1: the header has no column \"duration\""},
      {"time,duration,num_gpus\n0,5,1\n1,-5,1\n", "line 3: negative duration"},
      {"time,duration,num_gpus\n0,5,1\n\n1,abc,1\n", "line 4: \"duration\" is not a number: \"abc\""},
      {"time,duration,num_gpus\n0,5,1.5\n", "line 2: \"num_gpus\" must be a whole number"},
      {"time,duration,num_gpus\n0,5\n", "line 2: 2 fields, the header has 3"},
      {"time,duration,num_gpus,priority\n0,5,1,urgent\n", "line 2: \"priority\" must be"},
      {"", "empty"},
  };
  for (const auto& c : cases) {
    TraceInfo info;
    auto r = ParseTrace(c.trace, &info);
    ASSERT_FALSE(r.ok()) << c.trace;
    EXPECT_NE(std::string(r.status().message()).find(c.says), std::string::npos)
        << r.status().message();
  }
  EXPECT_FALSE(ParseSites("a=A100").ok());
  EXPECT_FALSE(ParseSites("a=A100:0").ok());
  EXPECT_FALSE(ParseSites("a=A100:4,a=H100:4").ok());
  auto ok = ParseSites("cn-beijing=A100-80GB:64,cn-shanghai=H100:32");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)[1].gpus, 32u);
}

}  // namespace
}  // namespace fedgate::fedsim
