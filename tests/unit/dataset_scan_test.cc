// A dataset's folder verified into a manifest: every file's size and
// SHA-256, unchanged files not read again, and what could read outside the
// folder refused with the path named.
#include "gateway/datasets/dataset_scan.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "gateway/datasets/dataset_registry.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using testing::TempDir;
using testing::WriteText;
namespace fs = std::filesystem;

TEST(DatasetScan, ManifestListsEveryFileWithItsDigest) {
  TempDir d;
  fs::create_directories(d / "ds/sub");
  WriteText(d / "ds/a.txt", "abc");
  WriteText(d / "ds/sub/b.bin", "");
  fs::create_symlink("a.txt", d / "ds/link-inside");  // inside the folder: a file like any
  auto m = ScanDataset(d / "ds", {}, {}, nullptr);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->files_size(), 3);
  EXPECT_EQ(m->files(0).path(), "a.txt");
  EXPECT_EQ(m->files(0).size_bytes(), 3u);
  // sha256("abc"), the FIPS 180-2 example.
  EXPECT_EQ(m->files(0).sha256(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(m->files(1).path(), "link-inside");
  EXPECT_EQ(m->files(1).sha256(), m->files(0).sha256());
  EXPECT_EQ(m->files(2).path(), "sub/b.bin");
  EXPECT_EQ(m->digest(), ManifestDigest(*m));
  EXPECT_EQ(m->digest().size(), 64u);
  // A changed byte changes the digest.
  WriteText(d / "ds/a.txt", "abd");
  auto changed = ScanDataset(d / "ds", {}, {}, nullptr);
  EXPECT_NE(changed->digest(), m->digest());
}

TEST(DatasetScan, UnchangedFilesAreNotReadAgain) {
  TempDir d;
  fs::create_directories(d / "ds");
  WriteText(d / "ds/a", std::string(1 << 20, 'x'));
  auto first = ScanDataset(d / "ds", {}, {}, nullptr);
  ASSERT_TRUE(first.ok());
  // A cached manifest whose digest is wrong for the content but whose size
  // and time match: trusted, so not read (a start does not rehash terabytes).
  v1::DatasetManifest cached = *first;
  cached.mutable_files(0)->set_sha256("cafe");
  ScanProgress last;
  auto again = ScanDataset(d / "ds", cached, [&](const ScanProgress& p) { last = p; }, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->files(0).sha256(), "cafe");
  EXPECT_EQ(last.bytes_hashed, 0u);
  EXPECT_EQ(last.bytes_reused, 1u << 20);
  // A new modification time is read again.
  cached.mutable_files(0)->set_mtime_ns(cached.files(0).mtime_ns() - 1);
  auto reread = ScanDataset(d / "ds", cached, [&](const ScanProgress& p) { last = p; }, nullptr);
  EXPECT_EQ(reread->files(0).sha256(), first->files(0).sha256());
  EXPECT_EQ(last.bytes_hashed, 1u << 20);
}

TEST(DatasetScan, WhatReachesOutsideIsRefusedWithItsPath) {
  TempDir d;
  fs::create_directories(d / "ds");
  WriteText(d / "secret", "key");
  WriteText(d / "ds/ok", "1");
  fs::create_symlink(d / "secret", d / "ds/escape");
  auto m = ScanDataset(d / "ds", {}, {}, nullptr);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("escape is a symlink out of the dataset folder"),
            std::string::npos)
      << m.status();
  fs::remove(d / "ds/escape");
  fs::create_symlink("../", d / "ds/up");
  EXPECT_EQ(ScanDataset(d / "ds", {}, {}, nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
  fs::remove(d / "ds/up");
  ASSERT_EQ(::mkfifo((d / "ds/pipe").c_str(), 0600), 0);
  m = ScanDataset(d / "ds", {}, {}, nullptr);
  EXPECT_NE(m.status().message().find("pipe is not a regular file"), std::string::npos)
      << m.status();
  EXPECT_EQ(ScanDataset(d / "nowhere", {}, {}, nullptr).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(DatasetScan, PathsFromPeersMustStayInside) {
  for (const char* ok : {"a", "a/b.txt", "x/y/z"}) EXPECT_TRUE(IsSafeRelativePath(ok)) << ok;
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/", "a\\b"}) {
    EXPECT_FALSE(IsSafeRelativePath(bad)) << bad;
  }
  EXPECT_FALSE(IsSafeRelativePath(std::string("a\0b", 3)));
}

TEST(DatasetRegistry, AnnouncesVerifiedDatasetsAndRefusesBadOnes) {
  TempDir d;
  fs::create_directories(d / "good");
  fs::create_directories(d / "bad");
  WriteText(d / "good/f", "hello");
  WriteText(d / "outside", "no");
  fs::create_symlink(d / "outside", d / "bad/l");
  Metrics metrics;
  DatasetRegistry reg({{"good", d / "good", "v2"}, {"bad", d / "bad", ""},
                       {"gone", d / "missing", ""}},
                      d / "manifests", &metrics);
  reg.Start();
  reg.WaitVerified();
  const auto ads = reg.Ads();
  ASSERT_EQ(ads.size(), 1u);
  EXPECT_EQ(ads[0].name(), "good");
  EXPECT_EQ(ads[0].version(), "v2");
  EXPECT_EQ(ads[0].bytes(), 5u);
  EXPECT_EQ(ads[0].files(), 1u);
  EXPECT_TRUE(reg.Find("good").has_value());
  EXPECT_FALSE(reg.Find("bad").has_value());
  EXPECT_NE(reg.Refusal("bad").find("symlink out"), std::string::npos) << reg.Refusal("bad");
  EXPECT_EQ(metrics.Get("fedgate_dataset_refused_total", {{"reason", "symlink_out"}}), 1);
  EXPECT_EQ(metrics.Get("fedgate_dataset_refused_total", {{"reason", "missing"}}), 1);
  // The manifest is cached outside the dataset, nothing written inside it.
  EXPECT_TRUE(fs::exists(d / "manifests/good.manifest"));
  EXPECT_EQ(std::distance(fs::directory_iterator(d / "good"), fs::directory_iterator()), 1);
}

}  // namespace
}  // namespace fedgate::gateway
