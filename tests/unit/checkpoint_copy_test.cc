// The sending side of a checkpoint copy against a real (in-process, loopback)
// gRPC peer whose receiving side is the real one: a new step reaches every
// other site of the world and only the newest `keep` stay; a checkpoint
// removed while it is copied is logged and counted, and nothing of it
// appears at the destination; a copy asked by the coordinator goes to a
// site outside the slice's recorded world (a replacement).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fedgate/v1/federation.grpc.pb.h"
#include "gateway/jobs/checkpoint_files.h"
#include "gateway/jobs/checkpoint_sync.h"
#include "gateway/jobs/participant.h"
#include "gateway/ops/metrics.h"
#include "tests/support/fake_clock.h"
#include "tests/support/fake_rank_runner.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

namespace fs = std::filesystem;
constexpr const char* kJob = "j-00000000000000d1";

// A site: a participant holding a parked slice of the job in `world`.
struct Site {
  Site(const std::string& name, const std::string& root, const std::vector<std::string>& world) {
    config.site = name;
    config.data_dir = root + "/" + name;
    federation::Node n;
    n.name = "n1";
    n.address = "127.0.0.1";
    n.gpu_model = "A100";
    n.gpus = 1;
    config.nodes = {n};
    p = std::make_unique<Participant>(config, &clock, nullptr);
    p->SetRunner(std::make_unique<testing::FakeRankRunner>());
    v1::PrepareRequest r;
    r.mutable_key()->set_job_id(kJob);
    r.mutable_key()->set_attempt(1);
    r.mutable_key()->set_epoch(1);
    r.add_nodes()->set_node("n1");
    r.mutable_nodes(0)->set_gpus(1);
    r.set_hold_ttl_ms(30'000);
    EXPECT_TRUE(p->Prepare("bj", r).ok());
    v1::CommitRequest c;
    *c.mutable_key() = r.key();
    auto* rank = c.add_ranks();
    rank->set_local_world_size(1);
    rank->set_node("n1");
    c.set_world_size(1);
    c.set_master_addr("127.0.0.1");
    c.set_master_port(29500);
    c.add_command("train");
    c.set_lease_ms(600'000);
    c.set_keep_hold(true);
    c.set_park(true);
    c.set_checkpoint_keep(2);
    for (const auto& w : world) c.add_world_sites(w);
    EXPECT_TRUE(p->Commit("bj", c).ok());
    CheckpointSync::DescribeMetrics(&metrics);
  }
  Config config;
  testing::FakeClock clock;
  std::unique_ptr<Participant> p;
  Metrics metrics;
};

// The peer service's two checkpoint calls, straight onto a CheckpointSync
// (the gateway's own handlers add only authorization).
class Receiver final : public v1::PeerService::Service {
 public:
  Receiver(CheckpointSync* sync, std::string from) : sync_(sync), from_(std::move(from)) {}
  grpc::Status PushCheckpoint(grpc::ServerContext*, grpc::ServerReader<v1::CheckpointChunk>* reader,
                              v1::PushCheckpointResponse* resp) override {
    auto in = sync_->Receive(from_);
    v1::CheckpointChunk c;
    while (reader->Read(&c)) {
      if (auto st = in->Add(c); !st.ok()) return {grpc::StatusCode::ABORTED, std::string(st.message())};
    }
    auto done = in->Finish();
    if (!done.ok()) return {grpc::StatusCode::ABORTED, std::string(done.status().message())};
    *resp = *done;
    return grpc::Status::OK;
  }
  grpc::Status CheckpointProgress(grpc::ServerContext*, const v1::CheckpointProgressRequest* req,
                                  v1::CheckpointProgressResponse* resp) override {
    auto out = sync_->Progress(from_, *req);
    if (!out.ok()) return {grpc::StatusCode::PERMISSION_DENIED, std::string(out.status().message())};
    *resp = *out;
    return grpc::Status::OK;
  }

 private:
  CheckpointSync* sync_;
  std::string from_;
};

class CopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::make_unique<Site>("site-a", tmp_.path(), std::vector<std::string>{"site-a", "site-b"});
    b_ = std::make_unique<Site>("site-b", tmp_.path(), std::vector<std::string>{"site-a", "site-b"});
    c_ = std::make_unique<Site>("site-c", tmp_.path(), std::vector<std::string>{"site-a", "site-c"});
    for (Site* s : {b_.get(), c_.get()}) {
      auto sync = std::make_unique<CheckpointSync>(
          s->config.site, s->p.get(), [](const std::string&) { return nullptr; }, &s->metrics);
      auto svc = std::make_unique<Receiver>(sync.get(), "site-a");
      grpc::ServerBuilder builder;
      int port = 0;
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
      builder.RegisterService(svc.get());
      servers_.push_back(builder.BuildAndStart());
      stubs_[s->config.site] = std::shared_ptr<v1::PeerService::Stub>(v1::PeerService::NewStub(
          grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials())));
      receivers_.push_back(std::move(sync));
      services_.push_back(std::move(svc));
    }
    sender_ = std::make_unique<CheckpointSync>(
        "site-a", a_->p.get(),
        [this](const std::string& site) -> std::shared_ptr<v1::PeerService::Stub> {
          if (before_send_) before_send_();
          auto it = stubs_.find(site);
          return it == stubs_.end() ? nullptr : it->second;
        },
        &a_->metrics);
  }
  void TearDown() override {
    for (auto& s : servers_) s->Shutdown();
  }
  std::string Dir(Site* s) { return s->p->CheckpointDir(kJob); }
  void WriteStep(uint64_t step, const std::string& text) {
    fs::create_directories(Dir(a_.get()));
    std::ofstream(Dir(a_.get()) + "/" + StepName(step), std::ios::binary) << text;
  }

  testing::TempDir tmp_;
  std::unique_ptr<Site> a_, b_, c_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<std::unique_ptr<CheckpointSync>> receivers_;
  std::vector<std::unique_ptr<Receiver>> services_;
  std::map<std::string, std::shared_ptr<v1::PeerService::Stub>> stubs_;
  std::unique_ptr<CheckpointSync> sender_;
  std::function<void()> before_send_;
};

TEST_F(CopyTest, ANewStepReachesTheWorldAndOnlyTheNewestStay) {
  const std::string big(3 << 20, 'w');  // three chunks and a bit
  WriteStep(4, big + "4");
  sender_->Pass();
  EXPECT_EQ(ListCheckpointSteps(Dir(b_.get())), std::vector<uint64_t>{4});
  EXPECT_EQ(fs::file_size(Dir(b_.get()) + "/step-4"), big.size() + 1);
  EXPECT_TRUE(ListCheckpointSteps(Dir(c_.get())).empty()) << "site-c is not in a's world";
  EXPECT_EQ(a_->metrics.Get("fedgate_checkpoint_bytes_total", {{"direction", "sent"}}),
            big.size() + 1);
  WriteStep(8, "8");
  WriteStep(12, "12");
  sender_->Pass();
  EXPECT_EQ(ListCheckpointSteps(Dir(a_.get())), (std::vector<uint64_t>{8, 12})) << "keep 2";
  EXPECT_EQ(ListCheckpointSteps(Dir(b_.get())), (std::vector<uint64_t>{4, 12}))
      << "only the newest is copied (site-b prunes in its own pass)";
  // Asked by the coordinator: a replacement's site outside the slice's world.
  sender_->Ask(kJob, 12, {"site-c"});
  sender_->Pass();
  EXPECT_EQ(ListCheckpointSteps(Dir(c_.get())), std::vector<uint64_t>{12});
}

TEST_F(CopyTest, ACheckpointRemovedWhileItIsCopiedAppearsNowhere) {
  WriteStep(5, std::string(2 << 20, 'x'));
  before_send_ = [&] { fs::remove(Dir(a_.get()) + "/step-5"); };  // listed, then gone
  sender_->Pass();
  EXPECT_TRUE(ListCheckpointSteps(Dir(b_.get())).empty());
  EXPECT_EQ(a_->metrics.Get("fedgate_checkpoint_errors_total", {{"reason", "source_removed"}}), 1);
  EXPECT_EQ(a_->metrics.Get("fedgate_checkpoint_copies_total",
                            {{"direction", "sent"}, {"result", "failed"}}),
            1);
}

}  // namespace
}  // namespace fedgate::gateway
