// The jobs table's row as the job store reads and writes it, shared by the
// store's files (job_store.cc: jobs and their life; job_store_story.cc: a
// job's story and takeovers). Internal to gateway/store.
#pragma once

#include <sqlite3.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway::job_rows {

// The columns Row reads, in its order.
inline constexpr const char* kColumns =
    "id, tenant, idempotency_key, spec, state, attempt, reason, created_at_unix_ms, "
    "updated_at_unix_ms, run, version, term, coordinator";

JobRecord Row(sqlite3_stmt* s);
absl::Status SqlError(sqlite3* db, std::string_view what);
absl::Status InsertEvents(sqlite3* db, const std::string& job_id,
                          const std::vector<JobStoryEvent>& events);

}  // namespace fedgate::gateway::job_rows
