// A site on a real Slurm 22.05 (munged, slurmctld, two slurmd on this
// host, fake GPU devices) beside a site on the process executor. One
// federation and one cluster serve every step, in order: a job stitched
// across both, Slurm's own users, a drained node, cancel, and kill -9 of the
// Slurm site's gateway mid-job. Needs root (CI is).
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/support/jobs_fixture.h"
#include "tests/support/slurm_cluster.h"

namespace fedgate::testing {
namespace {

class SlurmTest : public JobsTest {
 protected:
  uint32_t Total(const std::string& viewer, const std::string& site) {
    auto cap = fed_.Capacity(viewer);
    if (!cap) return 0;
    for (const auto& s : cap->sites()) {
      if (s.site() == site) return s.total_gpus();
    }
    return 0;
  }
};

TEST_F(SlurmTest, ASlurmSiteRunsStitchedJobsAndFollowsSlurm) {
  ASSERT_EQ(::geteuid(), 0u) << "Slurm's daemons and mknod need root (CI runs as root)";
  SlurmTestCluster slurm({"sl-1", "sl-2"}, 2);
  ASSERT_TRUE(slurm.Ready()) << slurm.error();

  SiteOptions a;
  a.site = "site-a";
  a.peers = {"site-s"};
  a.node_lines = {"{name: site-a-n1, address: 127.0.0.1, gpu_model: A100-80GB, gpus: 2}"};
  a.jobs_lease = "10s";  // Prepare and Commit get 5 s: salloc and srun take a moment
  fed_.AddSite(a);
  SiteOptions s;
  s.site = "site-s";
  s.peers = {"site-a"};
  s.inventory_source = "slurm";
  s.jobs_lease = "10s";
  s.extra_yaml = "executor: {kind: slurm, work_dir: " + fed_.work_root() +
                 "/site-s}\nslurm: {partition: gpu, conf: " + slurm.conf() +
                 ", gpu_models: {a100: A100-80GB}}\n";
  fed_.AddSite(s);
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-s"}); }, 15000))
      << fed_.log("site-s");
  ASSERT_TRUE(Eventually([&] { return Free("site-a", "site-s") == 4; }, 10000))
      << "site-s offers Slurm's 2 x 2 GPUs: " << fed_.log("site-s");

  {
    SCOPED_TRACE("a job stitched across the process site and the Slurm site");
    const std::string id = Submit(
        "site-a", "name: st\ngpus: 6\ncommand: [sh, -c, 'echo rank=$RANK slurm=$SLURM_JOB_ID "
                  "cuda=$CUDA_VISIBLE_DEVICES uid=$(id -u) world=$WORLD_SIZE']\n");
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 40000))
        << Get("site-a", id).reason() << fed_.log("site-s");
    const v1::Job job = Get("site-a", id);
    const passwd* rank_user = ::getpwnam("fedgate-rank");
    ASSERT_NE(rank_user, nullptr);
    int on_slurm = 0;
    for (const auto& site : job.run().sites()) {
      for (const auto& r : site.ranks()) {
        auto log = Alice("site-a", {"jobs", "logs", id, "--rank", std::to_string(r.rank())});
        ASSERT_EQ(log.exit_code, 0) << log.err;
        EXPECT_NE(log.out.find("world=6"), std::string::npos) << log.out;
        if (site.site() != "site-s") {
          EXPECT_NE(log.out.find("slurm= "), std::string::npos) << log.out;
          continue;
        }
        ++on_slurm;
        EXPECT_EQ(log.out.find("slurm= "), std::string::npos) << "a SLURM_JOB_ID: " << log.out;
        EXPECT_TRUE(log.out.find("cuda=0 ") != std::string::npos ||
                    log.out.find("cuda=1 ") != std::string::npos)
            << "Slurm binds one GPU per rank: " << log.out;
        EXPECT_NE(log.out.find("uid=" + std::to_string(rank_user->pw_uid)), std::string::npos)
            << log.out;
      }
    }
    EXPECT_EQ(on_slurm, 4);
    EXPECT_TRUE(Eventually([&] { return slurm.Queue().empty(); }, 10000))
        << "the allocations end with the job";
  }
  {
    SCOPED_TRACE("GPUs taken by Slurm's own users are not advertised");
    auto sb = slurm.Run({"sbatch", "-p", "gpu", "-w", "sl-1", "--gres=gpu:a100:2", "-J", "local",
                         "--output=/dev/null", "--wrap", "sleep 60"});
    ASSERT_EQ(sb.exit_code, 0) << sb.err;
    EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-s") == 2; }, 10000))
        << Free("site-a", "site-s");
    (void)slurm.Run({"scancel", "--name=local"});
    EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-s") == 4; }, 10000));
  }
  {
    SCOPED_TRACE("a drained node leaves the ad, and comes back when resumed");
    ASSERT_EQ(slurm.Run({"scontrol", "update", "nodename=sl-2", "state=drain", "reason=test"}).exit_code, 0);
    EXPECT_TRUE(Eventually([&] { return Total("site-a", "site-s") == 2; }, 10000))
        << Total("site-a", "site-s");
    ASSERT_EQ(slurm.Run({"scontrol", "update", "nodename=sl-2", "state=resume"}).exit_code, 0);
    EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-s") == 4; }, 10000));
  }
  {
    SCOPED_TRACE("a controller that is down: the site offers nothing until it is back");
    slurm.StopController();
    EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-s") == 0; }, 15000))
        << Free("site-a", "site-s");
    slurm.StartController();
    EXPECT_TRUE(Eventually([&] { return Free("site-a", "site-s") == 4; }, 20000))
        << slurm.error() << fed_.log("site-s");
  }
  {
    SCOPED_TRACE("cancel leaves no Slurm job behind");
    const std::string id = Submit(
        "site-a", "name: c\ngpus: 4\nallowed_sites: [site-s]\ncommand: [sleep, '60']\n");
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
    EXPECT_TRUE(Eventually([&] { return !slurm.Queue().empty(); }, 5000))
        << "the job holds a Slurm allocation: " << slurm.Run({"squeue"}).out << slurm.Run({"squeue"}).err
        << Get("site-a", id).reason() << fed_.log("site-s");
    ASSERT_EQ(Alice("site-a", {"jobs", "cancel", id}).exit_code, 0);
    EXPECT_TRUE(Eventually([&] { return slurm.Queue().empty(); }, 15000))
        << slurm.Run({"squeue"}).out;
  }
  {
    SCOPED_TRACE("kill -9 of the Slurm site's gateway mid-job: the job ends as attempt 1");
    ASSERT_TRUE(Eventually([&] { return Free("site-a", "site-s") == 4; }, 10000));
    const std::string id = Submit(
        "site-a", "name: k\ngpus: 2\nallowed_sites: [site-s]\ncommand: [sh, -c, 'for i in $(seq 1 "
                  "12); do echo tick $i; sleep 0.5; done']\n");
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::RUNNING, 20000)) << Get("site-a", id).reason();
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    fed_.Kill("site-s");
    ASSERT_TRUE(fed_.WaitExit("site-s", 5000).has_value());
    fed_.Start("site-s");
    ASSERT_TRUE(fed_.WaitReady("site-s"));
    ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 30000))
        << Get("site-a", id).reason() << fed_.log("site-s");
    EXPECT_EQ(Get("site-a", id).attempt(), 1u) << Get("site-a", id).reason() << fed_.log("site-s");
    auto log = Alice("site-a", {"jobs", "logs", id, "--rank", "1"});
    EXPECT_NE(log.out.find("tick 12"), std::string::npos) << log.out;
    EXPECT_TRUE(Eventually([&] { return slurm.Queue().empty(); }, 10000));
  }
}

}  // namespace
}  // namespace fedgate::testing
