#include <gtest/gtest.h>

#include "federation/job_spec.h"
#include "gateway/jobs/job_spec_yaml.h"

namespace fedgate {
namespace {

const char* kGood = R"(name: finetune-7b
gpus: 12
gpu_models: [A100-80GB, H100]
min_gpu_memory_gib: 40
max_sites: 2
min_gpus_per_site: 4
min_link_gbps: 0.5
priority: guaranteed
estimated_duration: 2h
max_attempts: 3
command: [python3, train.py, --epochs, "3"]
env: {NCCL_DEBUG: WARN}
)";

std::string Err(const std::string& text, const std::set<std::string>& models = {}) {
  auto s = gateway::ParseJobSpec(text, "job.yaml");
  if (!s.ok()) return std::string(s.status().message());
  auto st = federation::ValidateJobSpec(*s, models);
  return st.ok() ? "" : std::string(st.message());
}

TEST(JobSpec, TheDesignExampleParsesAndValidates) {
  auto s = gateway::ParseJobSpec(kGood, "job.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->gpus(), 12u);
  EXPECT_EQ(s->gpu_models_size(), 2);
  EXPECT_EQ(s->command(3), "3");
  EXPECT_EQ(s->env().at("NCCL_DEBUG"), "WARN");
  EXPECT_TRUE(federation::ValidateJobSpec(*s, {"A100-80GB", "H100"}).ok());
  auto req = federation::ToJobRequest(*s);
  EXPECT_EQ(req.max_sites, 2u);
  EXPECT_DOUBLE_EQ(req.min_link_gbps, 0.5);
}

TEST(JobSpec, JsonIsAcceptedToo) {
  auto s = gateway::ParseJobSpec(R"({"gpus": 2, "command": ["true"]})", "job.json");
  ASSERT_TRUE(s.ok()) << s.status();
  auto d = federation::WithDefaults(*s);
  EXPECT_EQ(d.priority(), "guaranteed");
  EXPECT_EQ(d.estimated_duration(), "1h");
  EXPECT_EQ(d.max_attempts(), 3u);
}

TEST(JobSpec, ErrorsNameTheField) {
  EXPECT_EQ(Err("gpus: 0\ncommand: [x]\n"), "gpus must be > 0");
  EXPECT_NE(Err("gpus: 1\ncommand: [x]\ncolour: red\n").find("job.yaml:3: unknown field \"colour\""),
            std::string::npos);
  EXPECT_NE(Err("gpus: 1\nmax_sites: 0\ncommand: [x]\n").find("max_sites 0"), std::string::npos);
  EXPECT_NE(Err("gpus: many\ncommand: [x]\n").find("gpus must be a whole number"),
            std::string::npos);
  EXPECT_NE(Err("gpus: -3\ncommand: [x]\n").find("gpus must be >= 0"), std::string::npos);
  EXPECT_EQ(Err("gpus: 1\n"), "command is required");
  EXPECT_NE(Err("gpus: 1\ncommand: [x]\ngpu_models: [A10O]\n", {"A100-80GB"})
                .find("unknown gpu model \"A10O\""),
            std::string::npos);
  EXPECT_NE(Err("gpus: 1\ncommand: [x]\npriority: urgent\n").find("priority"), std::string::npos);
  EXPECT_NE(Err("gpus: 1\ncommand: [x]\nestimated_duration: soon\n").find("estimated_duration"),
            std::string::npos);
  EXPECT_NE(Err("gpus: 2\ncommand: [x]\nmin_gpus_per_site: 4\n").find("min_gpus_per_site"),
            std::string::npos);
  EXPECT_NE(Err("gpus: 1\ncommand: [x]\nmin_link_gbps: -1\n").find("min_link_gbps"),
            std::string::npos);
  EXPECT_NE(Err("[1, 2, 3]").find("mapping"), std::string::npos);
  EXPECT_NE(Err("gpus: [1\n").find("malformed"), std::string::npos);
  EXPECT_NE(Err(std::string(2 << 20, 'x')).find("larger than 1 MiB"), std::string::npos);
  EXPECT_NE(Err("gpus: 1\ncommand: [x]\nimage: 'a b'\n").find("image must be an image reference"),
            std::string::npos);
}

TEST(JobSpec, AnImageIsTheJobsOwnOnKubernetesSites) {
  auto s = gateway::ParseJobSpec("gpus: 1\ncommand: [x]\nimage: registry.example/team/trainer:1.2\n", "job.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->image(), "registry.example/team/trainer:1.2");
  EXPECT_TRUE(federation::ValidateJobSpec(*s, {}).ok());
}

}  // namespace
}  // namespace fedgate

namespace fedgate {
namespace {

TEST(JobSpec, TheServiceExampleOfTheContractParses) {
  auto s = gateway::ParseJobSpec(R"(kind: service
name: chat
gpus: 1
replicas: {min: 1, max: 8}
readiness: {path: /healthz, period: 2s, timeout: 1s, failure_threshold: 3}
autoscale: {target_rps_per_replica: 40, scale_up_after: 15s, scale_down_after: 5m,
            window: 10s, interval: 2s}
spot_replicas: 0.5
idempotent: true
request_timeout: 30s
max_body: 64MiB
command: [python3, serve.py]
)", "chat.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind(), "service");
  EXPECT_EQ(s->replicas().max(), 8u);
  EXPECT_EQ(s->readiness().failure_threshold(), 3u);
  EXPECT_DOUBLE_EQ(s->autoscale().target_rps_per_replica(), 40);
  EXPECT_EQ(s->autoscale().scale_down_after(), "5m");
  EXPECT_DOUBLE_EQ(s->spot_replicas(), 0.5);
  EXPECT_TRUE(s->idempotent());
  EXPECT_EQ(s->max_body(), "64MiB");
  EXPECT_TRUE(federation::ValidateJobSpec(*s, {}).ok()) << federation::ValidateJobSpec(*s, {});
  EXPECT_NE(Err("kind: service\nname: x\ngpus: 1\ncommand: [a]\nreplicas: {min: 1, most: 3}\n")
                .find("unknown field \"replicas.most\""),
            std::string::npos);
  EXPECT_NE(Err("kind: service\nname: x\ngpus: 1\ncommand: [a]\nautoscale: 40\n")
                .find("autoscale must be a mapping"),
            std::string::npos);
}

}  // namespace
}  // namespace fedgate
