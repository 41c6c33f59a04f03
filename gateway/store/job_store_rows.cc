#include "gateway/store/job_store_rows.h"

#include "base/str_cat.h"
#include "gateway/store/sqlite_stmt.h"

namespace fedgate::gateway::job_rows {

absl::Status SqlError(sqlite3* db, std::string_view what) {
  return absl::InternalError(StrCat("store: ", what, ": ", sqlite3_errmsg(db)));
}

JobRecord Row(sqlite3_stmt* s) {
  JobRecord r;
  r.id = ColText(s, 0);
  r.tenant = ColText(s, 1);
  r.idempotency_key = ColText(s, 2);
  const void* blob = sqlite3_column_blob(s, 3);
  r.spec.ParseFromArray(blob, sqlite3_column_bytes(s, 3));
  // A state this build does not know cannot be driven: shown as FAILED.
  r.state = federation::ParseJobState(ColText(s, 4)).value_or(federation::JobState::kFailed);
  r.attempt = static_cast<uint32_t>(sqlite3_column_int64(s, 5));
  r.reason = ColText(s, 6);
  r.created_at_unix_ms = sqlite3_column_int64(s, 7);
  r.updated_at_unix_ms = sqlite3_column_int64(s, 8);
  r.run.assign(static_cast<const char*>(sqlite3_column_blob(s, 9)) ?: "",
               static_cast<size_t>(sqlite3_column_bytes(s, 9)));
  r.version = static_cast<uint64_t>(sqlite3_column_int64(s, 10));
  r.term = static_cast<uint64_t>(sqlite3_column_int64(s, 11));
  r.moved_to = ColText(s, 12);
  return r;
}

absl::Status InsertEvents(sqlite3* db, const std::string& job_id,
                          const std::vector<JobStoryEvent>& events) {
  for (const auto& e : events) {
    SqlStmt ins(db,
                "INSERT INTO job_events(job_id, time_ms, type, site, message) "
                "VALUES(?1, ?2, ?3, ?4, ?5);");
    if (!ins.ok()) return SqlError(db, "event");
    ins.Text(1, job_id);
    ins.Int(2, e.time_ms);
    ins.Text(3, e.type);
    ins.Text(4, e.site);
    ins.Text(5, e.message);
    if (sqlite3_step(ins.get()) != SQLITE_DONE) return SqlError(db, "event");
  }
  return absl::OkStatus();
}

}  // namespace fedgate::gateway::job_rows
