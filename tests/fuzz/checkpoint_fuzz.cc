// The receiving side of a checkpoint copy (PushCheckpoint), fed what a
// hostile peer of the job's world could stream: the input is a sequence of
// CheckpointChunk messages, each a 4-byte big-endian length and its bytes;
// the first byte picks the sending site (site-b is of the world, site-c is
// not). Whatever arrives, nothing may be written outside the job's
// checkpoint folder, and a step that appears must match its manifest.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "gateway/config/config.h"
#include "gateway/jobs/checkpoint_files.h"
#include "gateway/jobs/checkpoint_sync.h"
#include "gateway/jobs/participant.h"
#include "gateway/ops/metrics.h"
#include "tests/fuzz/quiet.h"
#include "tests/fuzz/step_clock.h"

namespace {

using namespace fedgate;
namespace fs = std::filesystem;

constexpr const char* kJob = "j-00000000000000cc";

struct World {
  testing::StepClock clock;
  gateway::Config config;
  gateway::Metrics metrics;
  std::unique_ptr<gateway::Participant> p;
  std::unique_ptr<gateway::CheckpointSync> sync;
  std::string work, dir;
};

World* Make() {
  auto* w = new World();
  const std::string root = fs::temp_directory_path() / "fedgate-checkpoint-fuzz";
  fs::remove_all(root);
  fs::create_directories(root);
  w->config.site = "site-a";
  w->config.data_dir = root + "/data";
  w->config.executor.work_dir = root + "/work";
  federation::Node node;
  node.name = "a-n1";
  node.address = "127.0.0.1";
  node.gpu_model = "A100-80GB";
  node.gpus = 1;
  w->config.nodes = {node};
  w->p = std::make_unique<gateway::Participant>(w->config, &w->clock, nullptr);
  v1::PrepareRequest hold;
  hold.mutable_key()->set_job_id(kJob);
  hold.mutable_key()->set_attempt(1);
  hold.mutable_key()->set_epoch(1);
  hold.add_nodes()->set_node("a-n1");
  hold.mutable_nodes(0)->set_gpus(1);
  hold.set_hold_ttl_ms(1000);
  if (!w->p->Prepare("site-b", hold).ok()) std::abort();
  v1::CommitRequest park;  // parked: no rank process is ever started
  *park.mutable_key() = hold.key();
  auto* r = park.add_ranks();
  r->set_local_world_size(1);
  r->set_node("a-n1");
  park.set_world_size(1);
  park.set_master_addr("127.0.0.1");
  park.set_master_port(29500);
  park.add_command("/bin/true");
  park.set_lease_ms(3'600'000);
  park.set_keep_hold(true);
  park.set_park(true);
  park.set_checkpoint_keep(2);
  park.add_world_sites("site-a");
  park.add_world_sites("site-b");
  if (!w->p->Commit("site-b", park).ok()) std::abort();
  gateway::CheckpointSync::DescribeMetrics(&w->metrics);
  w->sync = std::make_unique<gateway::CheckpointSync>(
      "site-a", w->p.get(), [](const std::string&) { return nullptr; }, &w->metrics);
  w->work = root + "/work";
  w->dir = w->p->CheckpointDir(kJob);
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* w = Make();
  if (size < 1) return 0;
  const std::string from = (data[0] & 1) ? "site-c" : "site-b";
  ++data;
  --size;
  {
    auto in = w->sync->Receive(from);
    bool ok = true;
    std::vector<v1::CheckpointFile> manifest;
    uint64_t step = 0;
    while (ok && size >= 4) {
      const size_t n = (size_t{data[0]} << 24) | (size_t{data[1]} << 16) | (size_t{data[2]} << 8) | data[3];
      data += 4;
      size -= 4;
      if (n > size) break;
      v1::CheckpointChunk c;
      if (!c.ParseFromArray(data, static_cast<int>(n))) break;
      data += n;
      size -= n;
      if (step == 0) step = c.step();
      if (c.last()) manifest.assign(c.manifest().begin(), c.manifest().end());
      ok = in->Add(c).ok();
    }
    auto done = in->Finish();
    if (ok && done.ok() && !done->already_present()) {
      const std::string visible = w->dir + "/" + gateway::StepName(step);
      if (!fs::exists(visible)) std::abort();  // published, yet not there
      for (const auto& f : manifest) {
        const std::string path = f.path().empty() ? visible : visible + "/" + f.path();
        auto sha = gateway::Sha256File(path);
        if (!sha.ok() || *sha != f.sha256()) std::abort();  // a step that lies
      }
    }
  }
  // Nothing but the job's folder, its checkpoints and the gateway's staging
  // under the work root.
  const std::string staging = w->work + "/.fedgate-staging";
  for (const auto& e : fs::recursive_directory_iterator(w->work)) {
    const std::string p = e.path().string();
    if (p != w->work + "/" + kJob && p.rfind(w->dir, 0) != 0 && p.rfind(staging, 0) != 0) {
      std::abort();
    }
  }
  fs::remove_all(w->dir);
  fs::remove_all(staging);
  fs::create_directories(w->dir);
  return 0;
}
