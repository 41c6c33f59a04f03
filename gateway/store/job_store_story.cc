// A job's story (events beside its row) and the row of a job taken over
// by this site (coordinator takeover).
#include <sqlite3.h>

#include "base/str_cat.h"
#include "gateway/store/job_store.h"
#include "gateway/store/job_store_rows.h"
#include "gateway/store/sqlite_stmt.h"

namespace fedgate::gateway {

using job_rows::InsertEvents;
using job_rows::kColumns;
using job_rows::SqlError;

absl::Status JobStore::Adopt(JobRecord job) {
  absl::Status st = Enqueue([&](sqlite3* db) -> absl::Status {
    SqlStmt ins(db, StrCat("INSERT INTO jobs(", kColumns,
                           ", name) VALUES(?1, ?2, NULL, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, '', "
                           "?12) ON CONFLICT(id) DO UPDATE SET state = ?4, attempt = ?5, "
                           "reason = ?6, updated_at_unix_ms = ?8, run = ?9, version = ?10, "
                           "term = ?11, coordinator = '' WHERE jobs.term < ?11;")
                        .c_str());
    if (!ins.ok()) return SqlError(db, "adopt");
    ins.Text(1, job.id);
    ins.Text(2, job.tenant);
    ins.Blob(3, job.spec.SerializeAsString());
    ins.Text(4, std::string(federation::JobStateName(job.state)));
    ins.Int(5, job.attempt);
    ins.Text(6, job.reason);
    ins.Int(7, job.created_at_unix_ms);
    ins.Int(8, job.updated_at_unix_ms);
    ins.Blob(9, job.run);
    ins.Int(10, static_cast<int64_t>(job.version));
    ins.Int(11, static_cast<int64_t>(job.term));
    ins.Text(12, job.spec.name());
    if (sqlite3_step(ins.get()) != SQLITE_DONE) return SqlError(db, "adopt");
    if (sqlite3_changes(db) == 0) {
      return absl::FailedPreconditionError(
          StrCat("job ", job.id, " is at term ", job.term, " or later here already"));
    }
    return InsertEvents(db, job.id, job.new_events);
  });
  if (st.ok() && on_write_) on_write_(job.id);
  return st;
}

absl::Status JobStore::AppendEvents(const std::string& job_id,
                                    const std::vector<JobStoryEvent>& events) {
  if (events.empty()) return absl::OkStatus();
  absl::Status st = Enqueue([&](sqlite3* db) -> absl::Status {
    // Progress told after the job ended (a commit that returns after a
    // cancel, say) would put "started" after "finished": the story stops
    // at the end, checked in the same transaction as the insert.
    SqlStmt sel(db, "SELECT state FROM jobs WHERE id = ?1;");
    if (!sel.ok()) return SqlError(db, "event");
    sel.Text(1, job_id);
    const int rc = sqlite3_step(sel.get());
    if (rc == SQLITE_DONE) return absl::NotFoundError(StrCat("job ", job_id, " not found"));
    if (rc != SQLITE_ROW) return SqlError(db, "event");
    const auto state = federation::ParseJobState(ColText(sel.get(), 0));
    if (!state || federation::IsTerminal(*state)) {
      return absl::FailedPreconditionError(StrCat("job ", job_id, " has ended"));
    }
    return InsertEvents(db, job_id, events);
  });
  if (st.ok() && on_write_) on_write_(job_id);
  return st;
}

absl::StatusOr<std::vector<JobStoryEvent>> JobStore::Events(const std::string& job_id,
                                                           uint64_t after_seq, int limit) {
  std::lock_guard lock(read_mu_);
  SqlStmt st(reader_,
             "SELECT seq, time_ms, type, site, message FROM job_events "
             "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3;");
  if (!st.ok()) return SqlError(reader_, "events");
  st.Text(1, job_id);
  st.Int(2, static_cast<int64_t>(after_seq));
  st.Int(3, std::clamp(limit, 1, 100000));
  std::vector<JobStoryEvent> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    JobStoryEvent e;
    e.seq = static_cast<uint64_t>(sqlite3_column_int64(st.get(), 0));
    e.time_ms = sqlite3_column_int64(st.get(), 1);
    e.type = ColText(st.get(), 2);
    e.site = ColText(st.get(), 3);
    e.message = ColText(st.get(), 4);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return SqlError(reader_, "events");
  return out;
}

}  // namespace fedgate::gateway
