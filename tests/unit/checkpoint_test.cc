// Checkpoints on disk (names, listing, pruning, manifests) and the receiving
// side of a copy: only a site of the job's world may send, paths stay inside
// the checkpoint, a digest mismatch or a copy cut short leaves nothing
// visible, and a broken-off copy resumes where it stopped.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gateway/jobs/checkpoint_files.h"
#include "gateway/jobs/checkpoint_sync.h"
#include "gateway/jobs/participant.h"
#include "gateway/ops/metrics.h"
#include "gateway/store/store.h"
#include "tests/support/fake_clock.h"
#include "tests/support/fake_rank_runner.h"
#include "tests/support/site_config.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

namespace fs = std::filesystem;
constexpr const char* kJob = "j-00000000000000c1";

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(CheckpointFiles, OnlyStepAndDigitsIsAStep) {
  EXPECT_EQ(ParseStepName("step-12"), 12u);
  EXPECT_EQ(ParseStepName("step-0"), 0u);
  for (const char* bad : {"step-", "step-abc", "step-1a", "step--1", "step-+1", "step- 1",
                          "Step-1", "step-12345678901234567890", ".fedgate-in-12", "x-step-1"}) {
    EXPECT_FALSE(ParseStepName(bad).has_value()) << bad;
  }
  EXPECT_EQ(StepName(7), "step-7");
}

TEST(CheckpointFiles, ListingSeesStepsReportsMalformedNamesAndPruningKeepsTheNewest) {
  testing::TempDir tmp;
  const std::string dir = tmp / "ck";
  for (const char* n : {"step-4", "step-12", "step-8", "step-x", "trainer.tmp", ".fedgate-in-16"}) {
    Write(dir + "/" + n, n);
  }
  fs::create_directories(dir + "/step-10/sub");
  Write(dir + "/step-10/sub/w.bin", "w");
  std::vector<std::string> malformed;
  EXPECT_EQ(ListCheckpointSteps(dir, &malformed), (std::vector<uint64_t>{4, 8, 10, 12}));
  EXPECT_EQ(malformed, std::vector<std::string>{"step-x"});
  EXPECT_EQ(PruneCheckpoints(dir, 2, tmp / "trash"), (std::vector<uint64_t>{4, 8}));
  EXPECT_TRUE(fs::is_empty(tmp / "trash")) << "moved out, then removed";
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<uint64_t>{10, 12}));
  EXPECT_TRUE(fs::exists(dir + "/step-x")) << "other names are left alone";
  EXPECT_TRUE(fs::exists(dir + "/trainer.tmp"));
  EXPECT_TRUE(ListCheckpointSteps(tmp / "absent").empty());
}

TEST(CheckpointFiles, AManifestListsEveryFileOfAFolderWithItsDigest) {
  testing::TempDir tmp;
  Write(tmp / "step-3/b/y", "yy");
  Write(tmp / "step-3/a", "abc");
  auto m = CheckpointManifest(tmp / "step-3");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].path(), "a");
  EXPECT_EQ((*m)[0].size_bytes(), 3u);
  EXPECT_EQ((*m)[0].sha256(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ((*m)[1].path(), "b/y");
  Write(tmp / "step-4", "abc");
  auto one = CheckpointManifest(tmp / "step-4");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].path(), "") << "a file checkpoint is one entry with no path";
  EXPECT_EQ(CheckpointManifest(tmp / "step-5").status().code(), absl::StatusCode::kNotFound)
      << "a checkpoint removed before its copy";
}

TEST(CheckpointFiles, TheGatewayReadsNoLinkAndNoFileOfAnotherUser) {
  testing::TempDir tmp;
  Write(tmp / "step-1", "w");
  fs::create_symlink("/etc/hostname", tmp / "step-2");
  const uid_t me = ::geteuid(), other = me + 12345;
  auto fd = OpenCheckpointFile(tmp / "step-1", &me);
  ASSERT_TRUE(fd.ok()) << fd.status();
  ::close(*fd);
  EXPECT_EQ(OpenCheckpointFile(tmp / "step-1", &other).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(OpenCheckpointFile(tmp / "step-2", nullptr).ok()) << "a link is not followed";
  // A rank that swaps its checkpoint folder for a link: nothing lands there.
  fs::create_directories(tmp / "elsewhere");
  fs::create_symlink(tmp / "elsewhere", tmp / "ck");
  Write(tmp / "staged", "x");
  EXPECT_FALSE(PublishInto(tmp / "staged", tmp / "ck", "step-3").ok());
  EXPECT_TRUE(fs::is_empty(tmp / "elsewhere"));
  EXPECT_TRUE(PruneCheckpoints(tmp / "ck", 0, tmp / "trash").empty());
}

TEST(CheckpointFiles, PathsInsideACheckpointNeverLeaveIt) {
  for (const char* ok : {"", "a", "a/b.bin", "x.y/z"}) EXPECT_TRUE(SafeRelativePath(ok)) << ok;
  for (const char* bad : {"/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", ".", "..", "a/"}) {
    EXPECT_FALSE(SafeRelativePath(bad)) << bad;
  }
}

class ReceiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::OneNodeSite("site-a", tmp_.path(), 2);
    store_ = std::move(*Store::Open(tmp_ / "db"));
    p_ = std::make_unique<Participant>(config_, &clock_, store_.get());
    p_->SetRunner(std::make_unique<testing::FakeRankRunner>());
    v1::PrepareRequest r;
    r.mutable_key()->set_job_id(kJob);
    r.mutable_key()->set_attempt(1);
    r.mutable_key()->set_epoch(1);
    r.add_nodes()->set_node("n1");
    r.mutable_nodes(0)->set_gpus(1);
    r.set_hold_ttl_ms(30'000);
    ASSERT_TRUE(p_->Prepare("bj", r).ok());
    v1::CommitRequest c;
    *c.mutable_key() = r.key();
    auto* rank = c.add_ranks();
    rank->set_local_world_size(1);
    rank->set_node("n1");
    c.set_world_size(1);
    c.set_master_addr("10.0.0.1");
    c.set_master_port(29500);
    c.add_command("train");
    c.set_lease_ms(600'000);
    c.set_keep_hold(true);
    c.set_checkpoint_keep(2);
    c.add_world_sites("site-a");
    c.add_world_sites("site-b");
    ASSERT_TRUE(p_->Commit("bj", c).ok());
    CheckpointSync::DescribeMetrics(&metrics_);
    sync_ = std::make_unique<CheckpointSync>("site-a", p_.get(), [](const std::string&) {
      return std::shared_ptr<v1::PeerService::Stub>();
    }, &metrics_);
    dir_ = p_->CheckpointDir(kJob);
  }
  v1::CheckpointChunk Head(uint64_t step, const std::string& site = "site-b") {
    v1::CheckpointChunk c;
    c.set_site(site);
    c.set_job_id(kJob);
    c.set_step(step);
    return c;
  }
  v1::CheckpointChunk Data(const std::string& path, uint64_t offset, const std::string& data) {
    v1::CheckpointChunk c;
    c.set_path(path);
    c.set_offset(offset);
    c.set_data(data);
    return c;
  }
  v1::CheckpointChunk Last(const std::string& path, const std::string& content) {
    v1::CheckpointChunk c;
    c.set_last(true);
    auto* f = c.add_manifest();
    f->set_path(path);
    f->set_size_bytes(content.size());
    Write(tmp_ / "ref", content);
    f->set_sha256(*Sha256File(tmp_ / "ref"));
    return c;
  }
  std::string Staging(uint64_t step) {
    return tmp_ / ("work/.fedgate-staging/" + std::string(kJob) + "-in-" + std::to_string(step));
  }
  double Errors(const std::string& reason) {
    return metrics_.Get("fedgate_checkpoint_errors_total", {{"reason", reason}});
  }

  testing::TempDir tmp_;
  Config config_;
  testing::FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Participant> p_;
  Metrics metrics_;
  std::unique_ptr<CheckpointSync> sync_;
  std::string dir_;
};

TEST_F(ReceiveTest, ACompleteCopyAppearsAsTheStepByRename) {
  auto in = sync_->Receive("site-b");
  ASSERT_TRUE(in->Add(Head(8)).ok());
  ASSERT_TRUE(in->Add(Data("", 0, "weights")).ok());
  EXPECT_TRUE(ListCheckpointSteps(dir_).empty()) << "nothing visible before the end";
  ASSERT_TRUE(in->Add(Last("", "weights")).ok());
  auto done = in->Finish();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(Read(dir_ + "/step-8"), "weights");
  EXPECT_FALSE(fs::exists(Staging(8))) << "no staging left behind";
  auto twin = sync_->Receive("site-b");
  EXPECT_EQ(twin->Add(Head(8)).code(), absl::StatusCode::kAborted)
      << "one copy of a step at a time";
  twin.reset();
  in.reset();
  auto again = sync_->Receive("site-b");
  ASSERT_TRUE(again->Add(Head(8)).ok());
  ASSERT_TRUE(again->Add(Last("", "weights")).ok());
  auto present = again->Finish();
  ASSERT_TRUE(present.ok());
  EXPECT_TRUE(present->already_present());
}

TEST_F(ReceiveTest, ADigestMismatchDiscardsTheCopy) {
  auto in = sync_->Receive("site-b");
  ASSERT_TRUE(in->Add(Head(8)).ok());
  ASSERT_TRUE(in->Add(Data("w/a.bin", 0, "tampered")).ok());
  ASSERT_TRUE(in->Add(Last("w/a.bin", "original")).ok());
  auto done = in->Finish();
  EXPECT_EQ(done.status().code(), absl::StatusCode::kDataLoss) << done.status();
  EXPECT_TRUE(ListCheckpointSteps(dir_).empty());
  EXPECT_FALSE(fs::exists(Staging(8)));
  EXPECT_EQ(Errors("digest_mismatch"), 1);
}

TEST_F(ReceiveTest, ASiteOutsideTheWorldAndUnsafePathsAreRefused) {
  auto outsider = sync_->Receive("site-c");
  EXPECT_EQ(outsider->Add(Head(8, "site-c")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Errors("not_a_member"), 1);
  auto liar = sync_->Receive("site-c");
  EXPECT_EQ(liar->Add(Head(8, "site-b")).code(), absl::StatusCode::kInvalidArgument)
      << "the chunk's site must be the certificate's";
  auto in = sync_->Receive("site-b");
  ASSERT_TRUE(in->Add(Head(9)).ok());
  EXPECT_EQ(in->Add(Data("../../escape", 0, "x")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(fs::path(dir_).parent_path() / "escape"));
  EXPECT_EQ(Errors("bad_path"), 1);
  v1::CheckpointProgressRequest q;
  q.set_job_id(kJob);
  q.set_step(9);
  EXPECT_EQ(sync_->Progress("site-c", q).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(ReceiveTest, ABrokenOffCopyResumesWhereItStoppedAndNeverShowsHalfDone) {
  {
    auto in = sync_->Receive("site-b");
    ASSERT_TRUE(in->Add(Head(12)).ok());
    ASSERT_TRUE(in->Add(Data("model.bin", 0, "0123")).ok());
    // The connection breaks: no last chunk.
    EXPECT_FALSE(in->Finish().ok());
  }
  EXPECT_TRUE(ListCheckpointSteps(dir_).empty());
  v1::CheckpointProgressRequest q;
  q.set_job_id(kJob);
  q.set_step(12);
  auto have = sync_->Progress("site-b", q);
  ASSERT_TRUE(have.ok()) << have.status();
  EXPECT_FALSE(have->present());
  EXPECT_EQ(have->received_bytes().at("model.bin"), 4u);
  auto in = sync_->Receive("site-b");
  ASSERT_TRUE(in->Add(Head(12)).ok());
  EXPECT_EQ(in->Add(Data("model.bin", 0, "0123")).code(), absl::StatusCode::kFailedPrecondition)
      << "an offset that is not where the copy stopped";
  auto resumed = sync_->Receive("site-b");
  in.reset();  // the refused stream ends
  ASSERT_TRUE(resumed->Add(Head(12)).ok());
  ASSERT_TRUE(resumed->Add(Data("model.bin", 4, "4567")).ok());
  ASSERT_TRUE(resumed->Add(Last("model.bin", "01234567")).ok());
  ASSERT_TRUE(resumed->Finish().ok());
  EXPECT_EQ(Read(dir_ + "/step-12/model.bin"), "01234567");
  EXPECT_TRUE(sync_->Progress("site-b", q)->present());
}

TEST_F(ReceiveTest, MalformedStepNamesAreReportedOnceAndOldStepsPruned) {
  for (const char* n : {"step-2", "step-4", "step-6", "step-six"}) Write(dir_ + "/" + n, n);
  sync_->Pass();
  sync_->Pass();
  EXPECT_EQ(Errors("malformed_name"), 1) << "logged and counted once";
  EXPECT_EQ(ListCheckpointSteps(dir_), (std::vector<uint64_t>{4, 6})) << "keep 2";
}

}  // namespace
}  // namespace fedgate::gateway
