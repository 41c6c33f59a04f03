// Every peer-facing handler behind mTLS, fed what a hostile (but
// authenticated) peer could send: the first byte picks the handler (0
// Handshake, 1 Advertise, 0x7d OpenBench, 0x7e ListUsage, others the
// participant's calls by value % 6) and, by its high bit, the calling site;
// the rest is the serialized request. A fresh Participant per
// input (a commit that matches its hold starts only /bin/true), one
// GatewayCore for the whole run (ads accumulate as they would in a gateway).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "federation/clock.h"
#include "federation/inventory.h"
#include "gateway/config/config.h"
#include "gateway/peering/core.h"
#include "gateway/ops/metrics.h"
#include "gateway/jobs/participant.h"
#include "gateway/peering/bench_host.h"
#include "gateway/store/store.h"
#include "tests/fuzz/quiet.h"
#include "tests/fuzz/step_clock.h"

namespace {

using namespace fedgate;

using testing::StepClock;

struct World {
  StepClock clock;
  gateway::Config config;
  std::unique_ptr<gateway::Store> store;
  gateway::Metrics metrics;
  std::unique_ptr<gateway::GatewayCore> core;
};

World* Make() {
  auto* w = new World();
  const std::string dir = std::filesystem::temp_directory_path() / "fedgate-peer-fuzz";
  std::filesystem::create_directories(dir);
  w->config.site = "site-a";
  w->config.federation = "aidc";
  w->config.data_dir = dir;
  federation::Node node;
  node.name = "a-n1";
  node.address = "127.0.0.1";
  node.gpu_model = "A100-80GB";
  node.gpus = 8;
  w->config.nodes = {node};
  w->config.peers = {{"site-b", "127.0.0.1:1"}};
  // A governed tenant, so quota holds (quota_gpus) are reached too.
  w->config.tenants = {{"vision", 4, {{"A100-80GB", 2}}, 2, 1}};
  auto store = gateway::Store::Open(dir + "/data");
  if (!store.ok()) std::abort();
  w->store = std::move(*store);
  w->core = std::make_unique<gateway::GatewayCore>(
      w->config, &w->clock, w->store.get(),
      std::make_unique<federation::StaticInventory>(w->config.nodes), &w->metrics);
  if (!w->core->Init().ok()) std::abort();
  return w;
}

template <typename Req>
bool Parse(const uint8_t* data, size_t size, Req* req) {
  return req->ParseFromArray(data, static_cast<int>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* w = Make();
  if (size < 1) return 0;
  const uint8_t pick = data[0];
  const std::string from = (pick & 0x80) ? "site-c" : "site-b";
  ++data;
  --size;
  const gateway::Identity peer{"aidc", gateway::Role::kGateway, from, "", ""};
  switch (pick & 0x7f) {
    case 0: {
      v1::HandshakeRequest req;
      if (Parse(data, size, &req)) (void)w->core->Handshake(peer, req);
      break;
    }
    case 1: {
      v1::AdvertiseRequest req;
      if (Parse(data, size, &req)) (void)w->core->Advertise(peer, req);
      break;
    }
    case 0x7d: {
      // At most BenchHost::kMaxOpen real one-time listeners are open at once.
      static auto* bench = new gateway::BenchHost();
      v1::OpenBenchRequest req;
      if (Parse(data, size, &req)) (void)bench->Open(from, req);
      break;
    }
    case 0x7e: {
      // Backed by the store, so the usage query runs against SQLite.
      static auto* usage = new gateway::Participant(w->config, &w->clock, w->store.get());
      v1::ListUsageRequest req;
      if (Parse(data, size, &req)) (void)usage->ListUsage(from, req);
      break;
    }
    default: {
      // A hold prepared by site-b first, so later calls reach past the
      // ownership check into the hold-dependent validation.
      gateway::Participant p(w->config, &w->clock, nullptr);
      v1::PrepareRequest hold;
      hold.mutable_key()->set_job_id("j-00000000000000aa");
      hold.mutable_key()->set_attempt(1);
      hold.mutable_key()->set_epoch(5);
      hold.set_tenant("vision");
      (*hold.mutable_quota_gpus())["A100-80GB"] = 2;
      hold.add_nodes()->set_node("a-n1");
      hold.mutable_nodes(0)->set_gpus(2);
      hold.set_hold_ttl_ms(1000);
      (void)p.Prepare("site-b", hold);
      switch ((pick & 0x7f) % 6) {
        case 2: {
          v1::PrepareRequest req;
          if (Parse(data, size, &req)) (void)p.Prepare(from, req);
          break;
        }
        case 3: {
          v1::CommitRequest req;
          // Never run a command from fuzzed bytes: a commit that gets
          // through starts /bin/true.
          if (Parse(data, size, &req)) {
            req.clear_command();
            req.add_command("/bin/true");
            req.clear_env();
            (void)p.Commit(from, req);
          }
          break;
        }
        case 4: {
          v1::AbortRequest req;
          if (Parse(data, size, &req)) (void)p.Abort(from, req);
          break;
        }
        case 5: {
          v1::SliceStatusRequest req;
          if (Parse(data, size, &req)) (void)p.Status(from, req);
          break;
        }
        default: {
          v1::ReadLogRequest req;
          if (Parse(data, size, &req)) (void)p.ReadLog(from, req);
          break;
        }
      }
      p.Sweep();
    }
  }
  return 0;
}
