// The records of jobs this site runs slices of, kept beside the holds, and
// this site's vote and accepted coordinator for each (coordinator takeover).
#include <sqlite3.h>

#include "gateway/store/sqlite_stmt.h"
#include "gateway/store/store.h"

namespace fedgate::gateway {

absl::Status Store::PutJobCopy(const std::string& job_id, uint64_t version, const std::string& job) {
  std::lock_guard lock(mu_);
  // An older version never replaces a newer one (answers may cross).
  SqlStmt s(db_,
            "INSERT INTO job_copies(job_id, version, job) VALUES(?1, ?2, ?3) "
            "ON CONFLICT(job_id) DO UPDATE SET version=excluded.version, job=excluded.job "
            "WHERE excluded.version > job_copies.version;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  s.Text(1, job_id);
  s.Int(2, static_cast<int64_t>(version));
  s.Blob(3, job);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StoredJobCopy>> Store::GetJobCopy(const std::string& job_id) {
  std::lock_guard lock(mu_);
  SqlStmt s(db_, "SELECT version, job FROM job_copies WHERE job_id = ?1;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  s.Text(1, job_id);
  const int rc = sqlite3_step(s.get());
  if (rc == SQLITE_DONE) return std::optional<StoredJobCopy>();
  if (rc != SQLITE_ROW) return absl::InternalError(sqlite3_errmsg(db_));
  return std::optional<StoredJobCopy>(
      StoredJobCopy{static_cast<uint64_t>(sqlite3_column_int64(s.get(), 0)), ColBlob(s.get(), 1)});
}

absl::Status Store::DeleteJobCopy(const std::string& job_id) {
  std::lock_guard lock(mu_);
  SqlStmt s(db_, "DELETE FROM job_copies WHERE job_id = ?1;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  s.Text(1, job_id);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, uint64_t>>> Store::ListJobCopies() {
  std::lock_guard lock(mu_);
  SqlStmt s(db_, "SELECT job_id, version FROM job_copies;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  std::vector<std::pair<std::string, uint64_t>> out;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    out.emplace_back(ColText(s.get(), 0), static_cast<uint64_t>(sqlite3_column_int64(s.get(), 1)));
  }
  if (rc != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return out;
}

absl::Status Store::PutJobTerm(const std::string& job_id, const StoredJobTerm& t) {
  std::lock_guard lock(mu_);
  // A vote is never taken back: an older term leaves the row as it is.
  SqlStmt s(db_,
            "UPDATE job_copies SET term = ?2, coordinator = ?3, voted_for = ?4 "
            "WHERE job_id = ?1 AND term <= ?2;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  s.Text(1, job_id);
  s.Int(2, static_cast<int64_t>(t.term));
  s.Text(3, t.coordinator);
  s.Text(4, t.voted_for);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  if (sqlite3_changes(db_) > 0) return absl::OkStatus();
  SqlStmt q(db_, "SELECT term FROM job_copies WHERE job_id = ?1;");
  if (!q.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  q.Text(1, job_id);
  const int rc = sqlite3_step(q.get());
  if (rc == SQLITE_ROW) return absl::OkStatus();  // a higher term is stored already
  if (rc != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return absl::NotFoundError("no record of job " + job_id + " is kept here");
}

absl::StatusOr<std::map<std::string, StoredJobTerm>> Store::ListJobTerms() {
  std::lock_guard lock(mu_);
  SqlStmt s(db_, "SELECT job_id, term, coordinator, voted_for FROM job_copies WHERE term > 0;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  std::map<std::string, StoredJobTerm> out;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    out[ColText(s.get(), 0)] = StoredJobTerm{static_cast<uint64_t>(sqlite3_column_int64(s.get(), 1)),
                                             ColText(s.get(), 2), ColText(s.get(), 3)};
  }
  if (rc != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return out;
}

}  // namespace fedgate::gateway
