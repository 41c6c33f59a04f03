#include "gateway/store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using testing::TempDir;

TEST(Store, PeersAndKvSurviveReopen) {
  TempDir dir;
  {
    auto store = Store::Open(dir / "data");
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->schema_version(), 14);
    ASSERT_TRUE((*store)->UpsertPeer({"cn-shanghai", "h:1", 5}).ok());
    ASSERT_TRUE((*store)->UpsertPeer({"cn-shanghai", "h:2", 6}).ok());
    ASSERT_TRUE((*store)->UpsertPeer({"cn-shenzhen", "h:3", 7}).ok());
    ASSERT_TRUE((*store)->PutKv("ad_seq", "41").ok());
    ASSERT_TRUE((*store)->DeletePeer("cn-shenzhen").ok());
    EXPECT_EQ((*store)->DeletePeer("cn-shenzhen").code(), absl::StatusCode::kNotFound);
  }
  auto store = Store::Open(dir / "data");
  ASSERT_TRUE(store.ok());
  auto peers = (*store)->LoadPeers();
  ASSERT_TRUE(peers.ok());
  ASSERT_EQ(peers->size(), 1u);
  EXPECT_EQ((*peers)[0].endpoint, "h:2");
  EXPECT_EQ((*peers)[0].added_at_unix_ms, 5) << "an update keeps the first approval time";
  EXPECT_EQ(**(*store)->GetKv("ad_seq"), "41");
  EXPECT_FALSE((*store)->GetKv("missing")->has_value());
}

TEST(Store, AJobCopyIsReplacedOnlyByANewerVersionAndSurvivesReopen) {
  TempDir dir;
  {
    auto store = Store::Open(dir / "data");
    ASSERT_TRUE(store.ok()) << store.status();
    const std::string binary("v3\0bytes", 8);
    ASSERT_TRUE((*store)->PutJobCopy("j-1", 3, binary).ok());
    ASSERT_TRUE((*store)->PutJobCopy("j-1", 2, "v2").ok());
    ASSERT_TRUE((*store)->PutJobCopy("j-2", 1, "other").ok());
    auto got = (*store)->GetJobCopy("j-1");
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->version, 3u) << "an older version changes nothing";
    EXPECT_EQ((*got)->job, binary) << "binary bytes kept whole";
  }
  auto store = Store::Open(dir / "data");
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->PutJobCopy("j-1", 4, "v4").ok());
  EXPECT_EQ((*(*store)->GetJobCopy("j-1"))->job, "v4");
  ASSERT_TRUE((*store)->DeleteJobCopy("j-2").ok());
  EXPECT_FALSE((*store)->GetJobCopy("j-2")->has_value());
  auto all = (*store)->ListJobCopies();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, (std::vector<std::pair<std::string, uint64_t>>{{"j-1", 4}}));
}

// A vote is never taken back: a put of an older term changes nothing, a new
// copy of the record keeps the vote, and the vote goes with the record.
TEST(Store, AJobsTermIsKeptBesideItsCopyAndNeverGoesBack) {
  TempDir dir;
  {
    auto store = Store::Open(dir / "data");
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->PutJobTerm("j-1", {2, "", "sh"}).code(), absl::StatusCode::kNotFound)
        << "no record kept";
    ASSERT_TRUE((*store)->PutJobCopy("j-1", 1, "v1").ok());
    ASSERT_TRUE((*store)->PutJobCopy("j-2", 1, "other").ok());
    EXPECT_TRUE((*store)->ListJobTerms()->empty()) << "no term stored yet";
    ASSERT_TRUE((*store)->PutJobTerm("j-1", {2, "", "sh"}).ok());
    ASSERT_TRUE((*store)->PutJobTerm("j-1", {1, "bj", ""}).ok()) << "older: ignored, not an error";
    ASSERT_TRUE((*store)->PutJobCopy("j-1", 2, "v2").ok());
  }
  auto store = Store::Open(dir / "data");
  ASSERT_TRUE(store.ok());
  auto terms = (*store)->ListJobTerms();
  ASSERT_TRUE(terms.ok()) << terms.status();
  ASSERT_EQ(terms->size(), 1u);
  EXPECT_EQ(terms->at("j-1").term, 2u);
  EXPECT_EQ(terms->at("j-1").voted_for, "sh");
  EXPECT_EQ(terms->at("j-1").coordinator, "");
  ASSERT_TRUE((*store)->PutJobTerm("j-1", {2, "sh", "sh"}).ok()) << "the same term decided";
  EXPECT_EQ((*store)->ListJobTerms()->at("j-1").coordinator, "sh");
  ASSERT_TRUE((*store)->DeleteJobCopy("j-1").ok());
  EXPECT_TRUE((*store)->ListJobTerms()->empty());
}

TEST(Store, KvRowsAreListedByPrefixAndDeleted) {
  TempDir dir;
  auto store = Store::Open(dir / "data");
  ASSERT_TRUE(store.ok()) << store.status();
  for (const char* k : {"quota_hold/j-1/5", "quota_hold/j-2/6", "quota_holdx", "quota_hol", "a%_"}) {
    ASSERT_TRUE((*store)->PutKv(k, std::string("v:") + k).ok());
  }
  auto rows = (*store)->ListKv("quota_hold/");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].first, "quota_hold/j-1/5");
  EXPECT_EQ((*rows)[1].second, "v:quota_hold/j-2/6");
  auto literal = (*store)->ListKv("a%");
  ASSERT_TRUE(literal.ok());
  EXPECT_EQ(literal->size(), 1u) << "'%' in a prefix is not a wildcard";
  EXPECT_EQ((*store)->ListKv("%")->size(), 0u);
  ASSERT_TRUE((*store)->DeleteKv("quota_hold/j-1/5").ok());
  ASSERT_TRUE((*store)->DeleteKv("never-there").ok());
  EXPECT_EQ((*store)->ListKv("quota_hold/")->size(), 1u);
  EXPECT_FALSE((*store)->GetKv("quota_hold/j-1/5")->has_value());
  // Several at once, in one transaction; a missing key is no error.
  ASSERT_TRUE((*store)->DeleteKvs({"quota_hold/j-2/6", "quota_holdx", "never-there"}).ok());
  EXPECT_EQ((*store)->ListKv("quota_hol")->size(), 1u) << "only quota_hol is left";
  EXPECT_TRUE((*store)->GetKv("a%_")->has_value()) << "keys not named stay";
  ASSERT_TRUE((*store)->DeleteKvs({}).ok());
}

// A job may have two slices at one site (an old epoch still stopping while
// the next runs): ending one must not forget the other's processes.
TEST(Store, SlicesOfOneJobAreKeptPerEpoch) {
  TempDir dir;
  auto store = Store::Open(dir / "data");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->PutSlice({"j-00000000000000aa", 1, 10, "0:100:5", ""}).ok());
  ASSERT_TRUE((*store)->PutSlice({"j-00000000000000aa", 2, 20, "0:200:6", ""}).ok());
  ASSERT_TRUE((*store)->PutSlice({"j-00000000000000aa", 2, 20, "0:201:7", std::string("\0binary", 7)}).ok());  // update
  ASSERT_TRUE((*store)->DeleteSlice("j-00000000000000aa", 10).ok());
  auto left = (*store)->LoadSlices();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].epoch, 20u);
  EXPECT_EQ((*left)[0].attempt, 2u);
  EXPECT_EQ((*left)[0].procs, "0:201:7");
  EXPECT_EQ((*left)[0].detail, std::string("\0binary", 7)) << "the re-attach record, byte for byte";
}

TEST(Store, UsesWalAndRefusesANewerSchema) {
  TempDir dir;
  { ASSERT_TRUE(Store::Open(dir.path()).ok()); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "fedgate.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode;", -1, &s, nullptr);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)), "wal");
  sqlite3_finalize(s);
  sqlite3_exec(db, "PRAGMA user_version=99;", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  auto again = Store::Open(dir.path());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(std::string(again.status().message()).find("newer"), std::string::npos);
}

TEST(Store, UnwritableDataDirIsAClearError) {
  TempDir dir;
  testing::WriteText(dir / "file", "x");
  auto store = Store::Open(dir / "file/sub");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(std::string(store.status().message()).find("data_dir"), std::string::npos);
}

// The usage ledger: records survive a crash (reopen); a finished record is
// never changed again; after a restart the open ones are closed at the
// restart's time (the open interval is all a crash can cost).
TEST(Store, UsageRecordsOpenCloseAndSurviveACrash) {
  TempDir dir;
  federation::UsageRecord r;
  r.job_id = "j-0000000000000001";
  r.attempt = 1;
  r.epoch = 7;
  r.site = "bj";
  r.node = "n1";
  r.gpu_model = "A100";
  r.gpus = 4;
  r.tenant = "vision";
  r.priority = "guaranteed";
  r.start_ms = 1000;
  {
    auto store = Store::Open(dir / "data");
    ASSERT_TRUE(store.ok());
    federation::UsageRecord other = r;
    other.job_id = "j-0000000000000002";
    other.tenant = "nlp";
    ASSERT_TRUE((*store)->OpenUsage({r, other}).ok());
    auto closed = (*store)->CloseUsage(r.job_id, 7, 7000, "succeeded");
    ASSERT_TRUE(closed.ok());
    ASSERT_EQ(closed->size(), 1u);
    EXPECT_EQ((*closed)[0].end_ms, 7000);
    EXPECT_TRUE((*store)->CloseUsage(r.job_id, 7, 9000, "again")->empty()) << "closed once";
    ASSERT_TRUE((*store)->OpenUsage({r}).ok()) << "a duplicate open is ignored";
  }  // "crash": j-...2 is still open
  auto store = Store::Open(dir / "data");
  ASSERT_TRUE(store.ok());
  auto all = (*store)->ListUsage(0, INT64_MAX, "");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  auto mine = (*store)->ListUsage(0, INT64_MAX, "vision");
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].end_ms, 7000);
  EXPECT_EQ((*mine)[0].reason, "succeeded");
  auto restart = (*store)->CloseUsage("", 0, 20000, "gateway restarted: ranks stopped");
  ASSERT_TRUE(restart.ok());
  ASSERT_EQ(restart->size(), 1u);
  EXPECT_EQ((*restart)[0].tenant, "nlp");
  EXPECT_DOUBLE_EQ(federation::GpuSeconds((*restart)[0], 0, INT64_MAX, 0), 4 * 19.0);
  EXPECT_TRUE((*store)->ListUsage(8000, 9000, "vision")->empty()) << "outside the window";
}

}  // namespace
}  // namespace fedgate::gateway
