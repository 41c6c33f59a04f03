// MIG slices read from the driver at start (`mig: nvidia-smi`), through a
// real gateway. No GPU here: the driver's list comes from a stand-in
// program that prints `nvidia-smi -L` as the driver does.
#include <sys/stat.h>

#include "tests/support/jobs_fixture.h"

namespace fedgate::testing {
namespace {

class MigDiscoveryTest : public JobsTest {
 protected:
  // A stand-in nvidia-smi printing `listed` for -L (exit `code`).
  std::string FakeNvidiaSmi(const std::string& listed, int code = 0) {
    const std::string path = tmp_ / ("nvidia-smi-" + std::to_string(++n_));
    WriteText(path, "#!/bin/sh\n[ \"$1\" = -L ] || exit 2\ncat <<'EOF'\n" + listed + "EOF\n" +
                        (code ? "echo 'NVIDIA-SMI has failed' >&2\n" : "") + "exit " + std::to_string(code) + "\n");
    ::chmod(path.c_str(), 0755);
    return path;
  }
  void AddMigSite() {
    SiteOptions o;
    o.site = "cn-beijing";
    o.node_lines = {"{name: bj-1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2, mig: nvidia-smi}"};
    fed_.AddSite(o);
  }
};

TEST_F(MigDiscoveryTest, AGatewayTakesItsSlicesAndTheirUuidsFromNvidiaSmi) {
  AddMigSite();
  fed_.Start("cn-beijing", {"FEDGATE_NVIDIA_SMI=" + FakeNvidiaSmi(
      "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5c8b0c64-0c2b-4e4b-3a4f-7f1e9b1a2c3d)\n"
      "  MIG 1g.10gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
      "  MIG 1g.10gb     Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)\n"
      "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-0d5f2a71-8f0a-4c1e-9b77-0a1b2c3d4e5f)\n")});
  ASSERT_TRUE(fed_.WaitReady("cn-beijing")) << fed_.log("cn-beijing");
  EXPECT_NE(fed_.log("cn-beijing").find("2 slice(s) of model A100-80GB MIG 1g.10gb"), std::string::npos)
      << fed_.log("cn-beijing");
  const std::string slice = Submit("cn-beijing", "name: s\nmig: 1g.10gb\ncommand: [sh, -c, 'echo dev=$CUDA_VISIBLE_DEVICES; sleep 4']\n");
  const std::string whole = Submit("cn-beijing", "name: w\ngpus: 1\ncommand: [sh, -c, 'echo dev=$CUDA_VISIBLE_DEVICES; sleep 4']\n");
  for (const auto& id : {slice, whole}) {
    ASSERT_TRUE(WaitState("cn-beijing", id, v1::Job::RUNNING, 15000)) << Get("cn-beijing", id).reason();
  }
  // Only one GPU is whole: a second whole-GPU job waits meanwhile.
  const std::string more = Submit("cn-beijing", "name: w2\ngpus: 1\ncommand: [sleep, '1']\n");
  EXPECT_FALSE(WaitState("cn-beijing", more, v1::Job::RUNNING, 1500));
  for (const auto& id : {slice, whole}) {
    ASSERT_TRUE(WaitState("cn-beijing", id, v1::Job::SUCCEEDED, 15000)) << Get("cn-beijing", id).reason();
  }
  auto log = [&](const std::string& id) { return Alice("cn-beijing", {"jobs", "logs", id, "--rank", "0"}).out; };
  const std::string s = log(slice);
  EXPECT_TRUE(s.find("dev=MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f") != std::string::npos ||
              s.find("dev=MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb") != std::string::npos)
      << "the driver's UUID, not a derived one: " << s;
  EXPECT_NE(log(whole).find("dev=1"), std::string::npos) << "the whole GPU keeps its index";
}

TEST_F(MigDiscoveryTest, ADriverThatFailsStopsTheStartSayingWhy) {
  AddMigSite();
  fed_.Start("cn-beijing", {"FEDGATE_NVIDIA_SMI=" + FakeNvidiaSmi("", 9)});
  EXPECT_TRUE(Eventually([&] {
    return fed_.log("cn-beijing").find("node bj-1 (mig: nvidia-smi): ") != std::string::npos;
  }, 10000)) << fed_.log("cn-beijing");
  EXPECT_NE(fed_.log("cn-beijing").find("-L exited 9: NVIDIA-SMI has failed"), std::string::npos)
      << fed_.log("cn-beijing");
  EXPECT_FALSE(fed_.WaitReady("cn-beijing", 1000));
}

}  // namespace
}  // namespace fedgate::testing
