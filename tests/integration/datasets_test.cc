// Datasets across a federation of three real gateways: a job that must span
// two sites stages the dataset from its holder to the other site before any
// rank starts, both sites' ranks read identical files, the job's story says
// so, and names that are not plain or held by nobody are refused or wait
// with the reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "fedgate/v1/admin.pb.h"
#include "fedgate/v1/federation.grpc.pb.h"
#include "tests/support/jobs_fixture.h"

namespace fedgate::testing {
namespace {

namespace fs = std::filesystem;

class DatasetsTest : public JobsTest {
 protected:
  // 3 files of 4 MiB and a small one in a sub-folder, random content.
  void MakeDataset(const std::string& dir) {
    fs::create_directories(dir + "/shards");
    std::mt19937_64 rng(42);
    for (int i = 0; i < 3; ++i) {
      std::string data(4 << 20, '\0');
      for (auto& c : data) c = static_cast<char>(rng());
      std::ofstream(dir + "/shards/part-" + std::to_string(i), std::ios::binary) << data;
    }
    std::ofstream(dir + "/labels.txt") << "cat\ndog\n";
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      fs::permissions(e.path(), e.is_directory() ? fs::perms(0755) : fs::perms(0644));
    }
    fs::permissions(dir, fs::perms(0755));
  }
};

TEST_F(DatasetsTest, ASpanningJobStagesItsDatasetAndBothSitesReadTheSameFiles) {
  // A folder of this run's own under the shared one (ranks, another user,
  // read the dataset and write their marks there).
  const std::string shared = fed_.shared_dir() + "/datasets-" + std::to_string(::getpid());
  fs::remove_all(shared);
  fs::create_directories(shared);
  fs::permissions(shared, fs::perms(0755));
  MakeDataset(shared + "/train-src");
  auto cache = [&](const std::string& site) {
    return "datasets_cache: {path: " + shared + "/cache-" + site + "}\n";
  };
  AddSite("site-a", {"site-b", "site-c"}, 2, "A100-80GB",
          "datasets:\n  - {name: train-set, path: " + shared + "/train-src, version: v1}\n" +
              cache("site-a"));
  AddSite("site-b", {"site-a", "site-c"}, 2, "A100-80GB", cache("site-b"));
  AddSite("site-c", {"site-a", "site-b"}, 2, "A100-80GB", cache("site-c"));
  fed_.StartAll();
  ASSERT_TRUE(Eventually([&] { return fed_.Converged({"site-a", "site-b", "site-c"}); }, 20000))
      << fed_.log("site-a");
  // The holder announces it once verified; every site lists it.
  std::string listed;
  ASSERT_TRUE(Eventually([&] {
    listed = Alice("site-c", {"datasets", "list"}).out;
    return listed.find("\"sites\":[\"site-a\"]") != std::string::npos;
  }, 20000)) << listed << fed_.log("site-a");
  EXPECT_NE(listed.find("\"bytes\":\"12582920\""), std::string::npos) << listed;  // uint64 as JSON string

  // 4 GPUs: the holder's 2 and another site's 2, which stages first.
  const std::string marks = shared + "/reads";
  fs::create_directories(marks);
  fs::permissions(marks, fs::perms::all);
  const std::string id = Submit(
      "site-a",
      "name: trainer\ngpus: 4\ndatasets: [train-set]\ncommand: [sh, -c, 'cd "
      "$FEDGATE_DATASET_DIR_TRAIN_SET && find . -type f | sort | xargs sha256sum > " +
          marks + "/$FEDGATE_SITE-$RANK; ls -a > " + marks + "/ls-$FEDGATE_SITE-$RANK']\n");
  ASSERT_TRUE(WaitState("site-a", id, v1::Job::SUCCEEDED, 60000))
      << Get("site-a", id).reason() << fed_.log("site-a") << fed_.log("site-b");
  const v1::Job job = Get("site-a", id);
  ASSERT_EQ(job.run().sites_size(), 2);
  const std::string other = job.run().sites(0).site() == "site-a" ? job.run().sites(1).site()
                                                                   : job.run().sites(0).site();
  // Every rank read the same files with the same digests, at both sites.
  std::string first;
  int reads = 0;
  for (const auto& e : fs::directory_iterator(marks)) {
    if (e.path().filename().string().rfind("site-", 0) != 0) continue;
    const std::string text = ReadText(e.path().string());
    if (first.empty()) first = text;
    EXPECT_EQ(text, first) << e.path();
    ++reads;
  }
  EXPECT_EQ(reads, 4);
  EXPECT_NE(first.find("./shards/part-2"), std::string::npos) << first;
  EXPECT_NE(first.find("./labels.txt"), std::string::npos) << first;
  // The staged folder holds exactly the dataset: no manifest, marker or
  // partial file beside it.
  int listings = 0;
  for (const auto& e : fs::directory_iterator(marks)) {
    if (e.path().filename().string().rfind("ls-", 0) != 0) continue;
    EXPECT_EQ(ReadText(e.path().string()), ".\n..\nlabels.txt\nshards\n") << e.path();
    ++listings;
  }
  EXPECT_EQ(listings, 4);

  // The story: placed with the staging time, staging from the holder, then started.
  auto story = Alice("site-a", {"jobs", "events", id});
  EXPECT_NE(story.out.find("to stage from site-a"), std::string::npos) << story.out;
  EXPECT_NE(story.out.find("\"type\":\"staging\",\"site\":\"" + other), std::string::npos) << story.out;
  EXPECT_NE(story.out.find("every dataset staged"), std::string::npos) << story.out;
  // The staged copy is announced: two holders now.
  ASSERT_TRUE(Eventually([&] {
    listed = Alice("site-c", {"datasets", "list"}).out;
    return listed.find("\"site-a\",\"" + other + "\"") != std::string::npos;
  }, 10000)) << listed;
  EXPECT_GE(Metric(fed_.ops_port(other), "fedgate_dataset_staged_bytes_total"), 12 << 20);

  // A job that fits at a holder stages nothing.
  const std::string small = Submit("site-a", "name: small\ngpus: 2\ndatasets: [train-set]\ncommand: [true]\n");
  ASSERT_TRUE(WaitState("site-a", small, v1::Job::SUCCEEDED, 30000)) << Get("site-a", small).reason();
  EXPECT_NE(Alice("site-a", {"jobs", "events", small}).out.find("datasets already there"),
            std::string::npos);

  // Nobody holds it: the job waits and says why. A name that is no plain
  // name is refused at submit.
  const std::string nope = Submit("site-a", "name: nope\ngpus: 1\ndatasets: [nope]\ncommand: [true]\n");
  ASSERT_TRUE(Eventually([&] {
    return Get("site-a", nope).reason().find("no site up holds dataset nope") != std::string::npos;
  }, 10000)) << Get("site-a", nope).reason();
  EXPECT_EQ(Get("site-a", nope).state(), v1::Job::PENDING);
  WriteText(tmp_ / "bad.yaml", "gpus: 1\ndatasets: ['../../etc']\ncommand: [true]\n");
  auto bad = Alice("site-a", {"jobs", "submit", "-f", tmp_ / "bad.yaml"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("not a dataset name"), std::string::npos) << bad.err;
  (void)Alice("site-a", {"jobs", "cancel", nope});

  // A peer asking the holder for what is not a file of the dataset gets
  // nothing: a path out of the folder, a path not in the manifest, another
  // digest, a dataset the holder does not have. A tenant is no peer.
  auto fetch = [&](const TlsFiles& who, const std::string& name, const std::string& digest,
                   const std::string& path) {
    auto stub = v1::PeerService::NewStub(TlsChannel(fed_.endpoint("site-a"), who));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::FetchDatasetRequest req;
    req.set_site("site-b");
    req.set_name(name);
    req.set_digest(digest);
    req.set_path(path);
    auto reader = stub->FetchDataset(&ctx, req);
    v1::DatasetChunk chunk;
    std::string got;
    while (reader->Read(&chunk)) got += chunk.data();
    auto st = reader->Finish();
    return std::pair{st, got};
  };
  std::string digest;
  {
    v1::ListDatasetsResponse all;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(Alice("site-a", {"datasets", "list"}).out,
                                                            &all).ok());
    ASSERT_EQ(all.datasets_size(), 1);
    digest = all.datasets(0).digest();
  }
  const TlsFiles peer = ca_.Gateway("site-b");
  auto good = fetch(peer, "train-set", digest, "labels.txt");
  EXPECT_TRUE(good.first.ok()) << good.first.error_message();
  EXPECT_EQ(good.second, "cat\ndog\n");
  const double refused_before =
      Metric(fed_.ops_port("site-a"), "fedgate_dataset_refused_total{reason=\"bad_path\"}");
  for (const std::string path : {"../train-src/labels.txt", "/etc/passwd", "shards", "missing"}) {
    auto r = fetch(peer, "train-set", digest, path);
    EXPECT_EQ(r.first.error_code(), grpc::StatusCode::NOT_FOUND) << path;
    EXPECT_TRUE(r.second.empty()) << path;
  }
  EXPECT_EQ(Metric(fed_.ops_port("site-a"), "fedgate_dataset_refused_total{reason=\"bad_path\"}"),
            refused_before + 4);
  EXPECT_EQ(fetch(peer, "train-set", std::string(64, '0'), "labels.txt").first.error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(fetch(peer, "other", digest, "labels.txt").first.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(fetch(ca_.User("vision", "mallory"), "train-set", digest, "labels.txt").first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  for (const auto& site : {"site-a", "site-b", "site-c"}) fed_.Stop(site);
  fs::remove_all(shared);
}

}  // namespace
}  // namespace fedgate::testing
