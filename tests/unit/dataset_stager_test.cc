// Staging against a holder the test controls (FakeHolder: an in-process
// gRPC PeerService that serves GetDatasetManifest and FetchDataset, honest
// or hostile): a whole copy is verified and announced; a manifest of other
// content, a path leaving the folder, bytes that do not match, or more bytes
// than the manifest says are each refused and counted, and nothing is
// announced or written outside the cache; the cache evicts the least
// recently used copy no slice reads, and refuses when only copies in use
// are left.
#include "gateway/datasets/dataset_stager.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "gateway/datasets/dataset_scan.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using testing::TempDir;
using testing::WriteText;
namespace fs = std::filesystem;

class FakeHolder final : public v1::PeerService::Service {
 public:
  // What it serves: a manifest and the bytes of each path.
  v1::DatasetManifest manifest;
  std::map<std::string, std::string> files;

  grpc::Status GetDatasetManifest(grpc::ServerContext*, const v1::DatasetManifestRequest*,
                                  v1::DatasetManifest* resp) override {
    *resp = manifest;
    return grpc::Status::OK;
  }
  grpc::Status FetchDataset(grpc::ServerContext*, const v1::FetchDatasetRequest* req,
                            grpc::ServerWriter<v1::DatasetChunk>* w) override {
    auto it = files.find(req->path());
    if (it == files.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such file");
    v1::DatasetChunk c;
    c.set_data(it->second.substr(std::min<size_t>(req->offset(), it->second.size())));
    w->Write(c);
    return grpc::Status::OK;
  }
};

// A manifest of `files` as an honest holder makes it.
v1::DatasetManifest ManifestOf(const std::string& name, const std::map<std::string, std::string>& files,
                               const std::string& dir) {
  for (const auto& [path, data] : files) {
    fs::create_directories(fs::path(dir + "/" + path).parent_path());
    WriteText(dir + "/" + path, data);
  }
  auto m = ScanDataset(dir, {}, {}, nullptr);
  EXPECT_TRUE(m.ok()) << m.status();
  m->set_name(name);
  return *m;
}

class DatasetStagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&holder_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::PeerService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (stager_) stager_->Stop();
    server_->Shutdown();
  }
  void MakeStager(uint64_t max_bytes) {
    registry_ = std::make_unique<DatasetRegistry>(std::vector<DatasetConfig>{}, dir_ / "manifests",
                                                  &metrics_);
    stager_ = std::make_unique<DatasetStager>(
        "site-b", dir_ / "cache", max_bytes, registry_.get(),
        [this](const std::string& site) {
          return site == "site-a" ? stub_ : std::shared_ptr<v1::PeerService::Stub>();
        },
        &metrics_);
  }
  v1::StageItem Item(const v1::DatasetManifest& m) {
    v1::StageItem item;
    item.set_name(m.name());
    item.set_digest(m.digest());
    uint64_t bytes = 0;
    for (const auto& f : m.files()) bytes += f.size_bytes();
    item.set_bytes(bytes);
    item.add_sources("site-gone");  // not reachable: the next source is tried
    item.add_sources("site-a");
    return item;
  }
  // Asks until the copy ends; its last report.
  v1::StageProgress Stage(const v1::StageItem& item) {
    v1::StageProgress p;
    for (int i = 0; i < 500; ++i) {
      p = stager_->Ensure({item}).items(0);
      if (p.done() || !p.error().empty()) return p;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return p;
  }
  double Refused(const std::string& reason) {
    return metrics_.Get("fedgate_dataset_refused_total", {{"reason", reason}});
  }
  TempDir dir_;
  Metrics metrics_;
  FakeHolder holder_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<v1::PeerService::Stub> stub_;
  std::unique_ptr<DatasetRegistry> registry_;
  std::unique_ptr<DatasetStager> stager_;
};

TEST_F(DatasetStagerTest, AWholeCopyIsCheckedRenamedIntoPlaceAndAnnounced) {
  holder_.files = {{"a.bin", std::string(3 << 20, 'a')}, {"sub/b.txt", "hello"}};
  holder_.manifest = ManifestOf("ds", holder_.files, dir_ / "src");
  MakeStager(0);
  const auto p = Stage(Item(holder_.manifest));
  ASSERT_TRUE(p.done()) << p.error();
  auto held = registry_->Find("ds");
  ASSERT_TRUE(held.has_value());
  EXPECT_TRUE(held->cached);
  EXPECT_EQ(held->path, dir_ / ("cache/ds@" + holder_.manifest.digest().substr(0, 16)));
  EXPECT_EQ(testing::ReadText(held->path + "/sub/b.txt"), "hello");
  EXPECT_TRUE(fs::is_empty(dir_ / "cache/.staging")) << "nothing partial is left";
  EXPECT_EQ(registry_->Ads().size(), 1u);
  EXPECT_TRUE(registry_->Ads()[0].cached());
}

TEST_F(DatasetStagerTest, AManifestOfOtherContentIsRefused) {
  holder_.files = {{"a", "1"}};
  holder_.manifest = ManifestOf("ds", holder_.files, dir_ / "src");
  v1::StageItem item = Item(holder_.manifest);
  item.set_digest(std::string(64, '0'));  // the coordinator chose other content
  MakeStager(0);
  const auto p = Stage(item);
  EXPECT_NE(p.error().find("does not match digest"), std::string::npos) << p.error();
  EXPECT_FALSE(registry_->Find("ds"));
  EXPECT_EQ(Refused("manifest_mismatch"), 1);
}

TEST_F(DatasetStagerTest, APathOutOfTheFolderIsRefusedAndNothingIsWrittenThere) {
  holder_.files = {{"ok", "1"}};
  holder_.manifest = ManifestOf("ds", holder_.files, dir_ / "src");
  holder_.manifest.mutable_files(0)->set_path("../../escaped");
  holder_.manifest.set_digest(ManifestDigest(holder_.manifest));  // self-consistent, hostile
  holder_.files = {{"../../escaped", "owned"}};
  MakeStager(0);
  const auto p = Stage(Item(holder_.manifest));
  EXPECT_NE(p.error().find("not a path inside a dataset"), std::string::npos) << p.error();
  EXPECT_EQ(Refused("bad_path"), 1);
  EXPECT_FALSE(fs::exists(dir_ / "escaped"));
  EXPECT_FALSE(fs::exists(dir_ / "cache/escaped"));
}

TEST_F(DatasetStagerTest, BytesThatDoNotMatchTheManifestAreRefused) {
  holder_.files = {{"a", "right"}};
  holder_.manifest = ManifestOf("ds", holder_.files, dir_ / "src");
  holder_.files["a"] = "wrong";  // same size, other bytes
  MakeStager(0);
  auto p = Stage(Item(holder_.manifest));
  EXPECT_NE(p.error().find("does not match its manifest"), std::string::npos) << p.error();
  EXPECT_FALSE(registry_->Find("ds"));
  EXPECT_EQ(Refused("manifest_mismatch"), 1);
  holder_.files["a"] = "right, and more";  // longer than the manifest says
  p = Stage(Item(holder_.manifest));
  EXPECT_NE(p.error().find("sent more than its manifest says"), std::string::npos) << p.error();
  EXPECT_EQ(Refused("manifest_mismatch"), 2);
  holder_.files["a"] = "right";  // an honest holder again: the copy completes
  EXPECT_TRUE(Stage(Item(holder_.manifest)).done());
}

TEST_F(DatasetStagerTest, TheCacheEvictsTheLeastRecentlyUsedCopyNoSliceReads) {
  auto make = [&](const std::string& name) {
    holder_.files = {{"f", std::string(1000, name[0])}};
    holder_.manifest = ManifestOf(name, holder_.files, dir_ / ("src-" + name));
    return Item(holder_.manifest);
  };
  MakeStager(2500);  // room for two copies of 1000 bytes
  std::set<std::string> in_use;
  stager_->SetInUse([&] { return in_use; });
  ASSERT_TRUE(Stage(make("x")).done());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(Stage(make("y")).done());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  (void)registry_->Find("x");  // x read since: y is the least recently used
  ASSERT_TRUE(Stage(make("z")).done());
  EXPECT_TRUE(registry_->Find("x"));
  EXPECT_FALSE(registry_->Find("y")) << "evicted";
  EXPECT_EQ(metrics_.Get("fedgate_dataset_evicted_total"), 1);
  // Both copies left are read by slices: a fourth has no room, and says why.
  in_use = {"x", "z"};
  const auto p = Stage(make("w"));
  EXPECT_NE(p.error().find("has no room"), std::string::npos) << p.error();
  EXPECT_TRUE(registry_->Find("x"));
  EXPECT_TRUE(registry_->Find("z"));
}

TEST_F(DatasetStagerTest, AStagedCopyIsKeptAcrossARestartUnlessTampered) {
  holder_.files = {{"a", "one"}, {"b", "two"}};
  holder_.manifest = ManifestOf("ds", holder_.files, dir_ / "src");
  MakeStager(0);
  ASSERT_TRUE(Stage(Item(holder_.manifest)).done());
  const std::string path = registry_->Find("ds")->path;
  stager_->Stop();
  auto restarted = [&] {
    auto reg = std::make_unique<DatasetRegistry>(std::vector<DatasetConfig>{}, dir_ / "manifests",
                                                 &metrics_);
    reg->SetCacheDir(dir_ / "cache");
    reg->Start();
    reg->WaitVerified();
    return reg;
  };
  auto again = restarted();
  ASSERT_TRUE(again->Find("ds").has_value()) << "announced again after a restart";
  EXPECT_EQ(again->Find("ds")->manifest.digest(), holder_.manifest.digest());
  EXPECT_TRUE(again->Find("ds")->cached);
  // A byte changed while the gateway was down: the copy is dropped.
  fs::permissions(path + "/b", fs::perms::owner_write, fs::perm_options::add);
  WriteText(path + "/b", "tw0");
  auto tampered = restarted();
  EXPECT_FALSE(tampered->Find("ds").has_value());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(Refused("manifest_mismatch"), 1);
}

}  // namespace
}  // namespace fedgate::gateway
