// The gateway's durable state in one SQLite file under data_dir (WAL mode,
// synchronous=FULL). Schema changes are versioned migrations.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "federation/usage.h"

struct sqlite3;

namespace fedgate::gateway {

struct StoredPeer {
  std::string site;
  std::string endpoint;
  int64_t added_at_unix_ms = 0;
};

struct StoredSlice {
  std::string job_id;
  uint32_t attempt = 0;
  uint64_t epoch = 0;
  std::string procs;  // "rank:pid:starttime" entries, comma separated
  std::string detail;  // serialized v1::SliceRecord ("" in rows from before)
};

struct StoredJobCopy {
  uint64_t version = 0;
  std::string job;  // a serialized v1::Job
};

// A member's coordination state of a kept job (federation::TermState less
// the time it last heard the coordinator).
struct StoredJobTerm {
  uint64_t term = 0;
  std::string coordinator;
  std::string voted_for;
};

class Store {
 public:
  // Creates data_dir if needed, opens (or creates) fedgate.db and migrates it.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& data_dir);
  ~Store();

  int schema_version() const { return schema_version_; }

  absl::StatusOr<std::vector<StoredPeer>> LoadPeers();
  absl::Status UpsertPeer(const StoredPeer& peer);
  // Returns NOT_FOUND when no such peer was stored.
  absl::Status DeletePeer(const std::string& site);

  // Rank processes a participant runs (for cleanup after a crash).
  absl::Status PutSlice(const StoredSlice& s);
  absl::Status DeleteSlice(const std::string& job_id, uint64_t epoch);
  absl::StatusOr<std::vector<StoredSlice>> LoadSlices();

  // The usage ledger (per-second metering): records open when a slice's
  // ranks start and close when they have all exited. CloseUsage with an
  // empty job id closes every open record (after a restart) and returns
  // what it closed.
  absl::Status OpenUsage(const std::vector<federation::UsageRecord>& records);
  absl::StatusOr<std::vector<federation::UsageRecord>> CloseUsage(const std::string& job_id,
                                                                  uint64_t epoch, int64_t end_ms,
                                                                  const std::string& reason);
  // Records overlapping [since, until), of one tenant or of all ("").
  absl::StatusOr<std::vector<federation::UsageRecord>> ListUsage(int64_t since_ms, int64_t until_ms,
                                                                 const std::string& tenant);

  // Copies of the records of jobs this site runs slices of (v1::JobCopy).
  // A put of an older version than the stored one changes nothing.
  absl::Status PutJobCopy(const std::string& job_id, uint64_t version, const std::string& job);
  absl::StatusOr<std::optional<StoredJobCopy>> GetJobCopy(const std::string& job_id);
  absl::Status DeleteJobCopy(const std::string& job_id);
  // (job id, version) of every kept copy.
  absl::StatusOr<std::vector<std::pair<std::string, uint64_t>>> ListJobCopies();
  // The vote and accepted coordinator beside a kept copy, written before any
  // answer that depends on them: NOT_FOUND without the copy; a put of an
  // older term than the stored one changes nothing.
  absl::Status PutJobTerm(const std::string& job_id, const StoredJobTerm& t);
  // Those of every kept copy that has one (a term above 0).
  absl::StatusOr<std::map<std::string, StoredJobTerm>> ListJobTerms();

  absl::StatusOr<std::optional<std::string>> GetKv(const std::string& key);
  absl::Status PutKv(const std::string& key, const std::string& value);
  absl::Status DeleteKv(const std::string& key);
  // Several keys in one transaction: one fsync, not one per key.
  absl::Status DeleteKvs(const std::vector<std::string>& keys);
  // Every (key, value) whose key starts with `prefix`.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ListKv(const std::string& prefix);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  absl::Status Exec(const std::string& sql);
  absl::Status Migrate();

  std::mutex mu_;
  sqlite3* db_;
  int schema_version_ = 0;
};

}  // namespace fedgate::gateway
