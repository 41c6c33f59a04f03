#include "gateway/store/store.h"

#include <sqlite3.h>

#include <filesystem>

#include "base/str_cat.h"
#include "gateway/store/sqlite_stmt.h"

namespace fedgate::gateway {
namespace {

// Each entry moves the schema from version i to i+1. Never edit a shipped one.
const char* const kMigrations[] = {
    // 1: approved peers added by admins, and small key/value facts (ad seq).
    "CREATE TABLE peers (site TEXT PRIMARY KEY, endpoint TEXT NOT NULL,"
    "                    added_at_unix_ms INTEGER NOT NULL);"
    "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    // 2: jobs; (tenant, idempotency_key) is unique so a retried submit finds
    // the first one instead of making a second job.
    "CREATE TABLE jobs (id TEXT PRIMARY KEY, tenant TEXT NOT NULL,"
    "                   idempotency_key TEXT, name TEXT NOT NULL, spec BLOB NOT NULL,"
    "                   state TEXT NOT NULL, attempt INTEGER NOT NULL, reason TEXT NOT NULL,"
    "                   created_at_unix_ms INTEGER NOT NULL, updated_at_unix_ms INTEGER NOT NULL);"
    "CREATE UNIQUE INDEX jobs_idempotency ON jobs(tenant, idempotency_key)"
    "  WHERE idempotency_key IS NOT NULL;"
    "CREATE INDEX jobs_by_tenant ON jobs(tenant, id);",
    // 3: the run plan (virtual cluster, epoch) of a job's latest attempt.
    "ALTER TABLE jobs ADD COLUMN run BLOB NOT NULL DEFAULT x'';",
    // 4: rank processes a participant started, so a restart can clean up.
    "CREATE TABLE slices (job_id TEXT PRIMARY KEY, attempt INTEGER NOT NULL,"
    "                     epoch INTEGER NOT NULL, procs TEXT NOT NULL);",
    // 5: the coordinator scans the jobs that have not ended several times a second.
    "CREATE INDEX jobs_by_state ON jobs(state, created_at_unix_ms);",
    // 6: every write of a job is a compare-and-set on its version.
    "ALTER TABLE jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 0;",
    // 7: a job can have two slices at a site (an old epoch still stopping
    // while a new one runs): slices are keyed by job and epoch.
    "CREATE TABLE slices_v7 (job_id TEXT NOT NULL, attempt INTEGER NOT NULL,"
    "                        epoch INTEGER NOT NULL, procs TEXT NOT NULL,"
    "                        PRIMARY KEY (job_id, epoch));"
    "INSERT INTO slices_v7 SELECT job_id, attempt, epoch, procs FROM slices;"
    "DROP TABLE slices;"
    "ALTER TABLE slices_v7 RENAME TO slices;",
    // 8: the usage ledger: one record per slice and node, end 0 while open.
    "CREATE TABLE usage (job_id TEXT NOT NULL, attempt INTEGER NOT NULL, epoch INTEGER NOT NULL,"
    "                    site TEXT NOT NULL, node TEXT NOT NULL, gpu_model TEXT NOT NULL,"
    "                    gpus INTEGER NOT NULL, tenant TEXT NOT NULL, priority TEXT NOT NULL,"
    "                    start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL, reason TEXT NOT NULL,"
    "                    PRIMARY KEY (job_id, epoch, node));"
    "CREATE INDEX usage_by_end ON usage(end_ms);",
    // 9: what a restarted gateway needs to re-attach to a slice's ranks
    // (a serialized SliceRecord; empty for rows written before).
    "ALTER TABLE slices ADD COLUMN detail BLOB NOT NULL DEFAULT x'';",
    // 10: a list filtered by state walks that state's jobs in id order; it
    // read every job ever stored before.
    "CREATE INDEX jobs_by_state_id ON jobs(state, id);",
    // 11: each job's story (fedctl jobs events), in order of seq.
    "CREATE TABLE job_events (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL,"
    "                         time_ms INTEGER NOT NULL, type TEXT NOT NULL,"
    "                         site TEXT NOT NULL, message TEXT NOT NULL);"
    "CREATE INDEX job_events_by_job ON job_events(job_id, seq);",
    // 12: the records of jobs this site runs slices of, kept beside the holds
    // (a serialized v1::JobCopy's job, and the coordinator's version of it).
    "CREATE TABLE job_copies (job_id TEXT PRIMARY KEY, version INTEGER NOT NULL,"
    "                         job BLOB NOT NULL);",
    // 13: beside a kept record, this site's vote and accepted coordinator
    // (coordinator takeover; term 0 = none yet).
    "ALTER TABLE job_copies ADD COLUMN term INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE job_copies ADD COLUMN coordinator TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE job_copies ADD COLUMN voted_for TEXT NOT NULL DEFAULT '';",
    // 14: a job's coordination term here, and who coordinates it when this
    // site no longer does ('' = this site: it was submitted or taken over here).
    "ALTER TABLE jobs ADD COLUMN term INTEGER NOT NULL DEFAULT 1;"
    "ALTER TABLE jobs ADD COLUMN coordinator TEXT NOT NULL DEFAULT '';",
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& data_dir) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    return absl::InternalError(fedgate::StrCat("cannot create data_dir ", data_dir, ": ", ec.message()));
  }
  // The store, logs and state files are the gateway's alone: ranks (another
  // user) must not read them.
  std::filesystem::permissions(data_dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec) {
    return absl::InternalError(fedgate::StrCat("cannot make data_dir ", data_dir, " private: ", ec.message()));
  }
  const std::string path = data_dir + "/fedgate.db";
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::InternalError(fedgate::StrCat("cannot open store ", path, ": ", msg));
  }
  std::unique_ptr<Store> store(new Store(db));
  sqlite3_busy_timeout(db, 5000);
  for (const char* pragma :
       {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", "PRAGMA foreign_keys=ON;",
        kCacheSizePragma}) {
    if (auto st = store->Exec(pragma); !st.ok()) {
      return absl::InternalError(fedgate::StrCat("store ", path, ": ", st.message()));
    }
  }
  if (auto st = store->Migrate(); !st.ok()) {
    return absl::InternalError(fedgate::StrCat("store ", path, ": ", st.message()));
  }
  return store;
}

Store::~Store() {
  ForgetStatements(db_);
  sqlite3_close(db_);
}

absl::Status Store::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(msg);
  }
  return absl::OkStatus();
}

absl::Status Store::Migrate() {
  std::lock_guard lock(mu_);
  {
    SqlStmt s(db_, "PRAGMA user_version;");
    if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW) {
      return absl::InternalError(sqlite3_errmsg(db_));
    }
    schema_version_ = sqlite3_column_int(s.get(), 0);
  }
  const int latest = static_cast<int>(std::size(kMigrations));
  if (schema_version_ > latest) {
    return absl::FailedPreconditionError(fedgate::StrCat(
        "schema version ", schema_version_, " is newer than this fedgate knows (", latest, ")"));
  }
  while (schema_version_ < latest) {
    const int next = schema_version_ + 1;
    std::string sql = fedgate::StrCat("BEGIN IMMEDIATE;", kMigrations[schema_version_],
                                   "PRAGMA user_version=", next, ";COMMIT;");
    if (auto st = Exec(sql); !st.ok()) {
      (void)Exec("ROLLBACK;");
      return absl::InternalError(fedgate::StrCat("migration to v", next, " failed: ", st.message()));
    }
    schema_version_ = next;
  }
  return absl::OkStatus();
}

namespace {

// The usage table's columns in the order UsageRow reads them.
#define FEDGATE_USAGE_COLUMNS \
  "job_id, attempt, epoch, site, node, gpu_model, gpus, tenant, priority, start_ms, end_ms, reason"

federation::UsageRecord UsageRow(sqlite3_stmt* s) {
  federation::UsageRecord r;
  r.job_id = ColText(s, 0);
  r.attempt = static_cast<uint32_t>(sqlite3_column_int64(s, 1));
  r.epoch = static_cast<uint64_t>(sqlite3_column_int64(s, 2));
  r.site = ColText(s, 3);
  r.node = ColText(s, 4);
  r.gpu_model = ColText(s, 5);
  r.gpus = static_cast<uint32_t>(sqlite3_column_int64(s, 6));
  r.tenant = ColText(s, 7);
  r.priority = ColText(s, 8);
  r.start_ms = sqlite3_column_int64(s, 9);
  r.end_ms = sqlite3_column_int64(s, 10);
  r.reason = ColText(s, 11);
  return r;
}

}  // namespace

absl::StatusOr<std::vector<StoredPeer>> Store::LoadPeers() {
  std::lock_guard lock(mu_);
  SqlStmt s(db_, "SELECT site, endpoint, added_at_unix_ms FROM peers ORDER BY site;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  std::vector<StoredPeer> out;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    out.push_back({ColText(s.get(), 0), ColText(s.get(), 1), sqlite3_column_int64(s.get(), 2)});
  }
  if (rc != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return out;
}

absl::Status Store::UpsertPeer(const StoredPeer& peer) {
  std::lock_guard lock(mu_);
  SqlStmt s(db_,
         "INSERT INTO peers(site, endpoint, added_at_unix_ms) VALUES(?1, ?2, ?3) "
         "ON CONFLICT(site) DO UPDATE SET endpoint=excluded.endpoint;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  s.Text(1, peer.site);
  s.Text(2, peer.endpoint);
  s.Int(3, peer.added_at_unix_ms);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::Status Store::DeletePeer(const std::string& site) {
  std::lock_guard lock(mu_);
  SqlStmt s(db_, "DELETE FROM peers WHERE site = ?1;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  s.Text(1, site);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  if (sqlite3_changes(db_) == 0) {
    return absl::NotFoundError(fedgate::StrCat("no stored peer \"", site, "\""));
  }
  return absl::OkStatus();
}

absl::Status Store::PutSlice(const StoredSlice& s) {
  std::lock_guard lock(mu_);
  SqlStmt st(db_,
          "INSERT INTO slices(job_id, attempt, epoch, procs, detail) VALUES(?1, ?2, ?3, ?4, ?5) "
          "ON CONFLICT(job_id, epoch) DO UPDATE SET attempt=excluded.attempt, "
          "procs=excluded.procs, detail=excluded.detail;");
  if (!st.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  st.Text(1, s.job_id);
  st.Int(2, static_cast<int64_t>(s.attempt));
  st.Int(3, static_cast<int64_t>(s.epoch));
  st.Text(4, s.procs);
  st.Blob(5, s.detail);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::Status Store::DeleteSlice(const std::string& job_id, uint64_t epoch) {
  std::lock_guard lock(mu_);
  SqlStmt st(db_, "DELETE FROM slices WHERE job_id = ?1 AND epoch = ?2;");
  if (!st.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  st.Text(1, job_id);
  st.Int(2, static_cast<int64_t>(epoch));
  if (sqlite3_step(st.get()) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StoredSlice>> Store::LoadSlices() {
  std::lock_guard lock(mu_);
  SqlStmt st(db_, "SELECT job_id, attempt, epoch, procs, detail FROM slices;");
  if (!st.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  std::vector<StoredSlice> out;
  while (sqlite3_step(st.get()) == SQLITE_ROW) {
    out.push_back({ColText(st.get(), 0), static_cast<uint32_t>(sqlite3_column_int64(st.get(), 1)),
                   static_cast<uint64_t>(sqlite3_column_int64(st.get(), 2)), ColText(st.get(), 3),
                   ColBlob(st.get(), 4)});
  }
  return out;
}

absl::Status Store::OpenUsage(const std::vector<federation::UsageRecord>& records) {
  std::lock_guard lock(mu_);
  if (auto st = Exec("BEGIN IMMEDIATE;"); !st.ok()) return st;
  for (const auto& r : records) {
    SqlStmt st(db_,
               "INSERT OR IGNORE INTO usage(" FEDGATE_USAGE_COLUMNS ") "
               "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 0, '');");
    if (!st.ok()) break;
    st.Text(1, r.job_id);
    st.Int(2, r.attempt);
    st.Int(3, static_cast<int64_t>(r.epoch));
    st.Text(4, r.site);
    st.Text(5, r.node);
    st.Text(6, r.gpu_model);
    st.Int(7, r.gpus);
    st.Text(8, r.tenant);
    st.Text(9, r.priority);
    st.Int(10, r.start_ms);
    if (sqlite3_step(st.get()) != SQLITE_DONE) {
      const std::string err = sqlite3_errmsg(db_);
      (void)Exec("ROLLBACK;");
      return absl::InternalError(err);
    }
  }
  return Exec("COMMIT;");
}

absl::StatusOr<std::vector<federation::UsageRecord>> Store::CloseUsage(const std::string& job_id,
                                                                       uint64_t epoch, int64_t end_ms,
                                                                       const std::string& reason) {
  std::lock_guard lock(mu_);
  std::vector<federation::UsageRecord> closed;
  {
    SqlStmt st(db_,
               "UPDATE usage SET end_ms = MAX(start_ms, ?3), reason = ?4 WHERE end_ms = 0 AND "
               "(?1 = '' OR (job_id = ?1 AND epoch = ?2)) RETURNING " FEDGATE_USAGE_COLUMNS ";");
    if (!st.ok()) return absl::InternalError(sqlite3_errmsg(db_));
    st.Text(1, job_id);
    st.Int(2, static_cast<int64_t>(epoch));
    st.Int(3, end_ms);
    st.Text(4, reason.substr(0, 512));
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) closed.push_back(UsageRow(st.get()));
    if (rc != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  }
  return closed;
}

absl::StatusOr<std::vector<federation::UsageRecord>> Store::ListUsage(int64_t since_ms,
                                                                      int64_t until_ms,
                                                                      const std::string& tenant) {
  std::lock_guard lock(mu_);
  SqlStmt st(db_,
             "SELECT " FEDGATE_USAGE_COLUMNS " FROM usage WHERE start_ms < ?2 AND "
             "(end_ms = 0 OR end_ms > ?1) "
             "AND (?3 = '' OR tenant = ?3) ORDER BY start_ms LIMIT 100000;");
  if (!st.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  st.Int(1, since_ms);
  st.Int(2, until_ms);
  st.Text(3, tenant);
  std::vector<federation::UsageRecord> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(UsageRow(st.get()));
  if (rc != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return out;
}

absl::StatusOr<std::optional<std::string>> Store::GetKv(const std::string& key) {
  std::lock_guard lock(mu_);
  SqlStmt s(db_, "SELECT value FROM kv WHERE key = ?1;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  s.Text(1, key);
  int rc = sqlite3_step(s.get());
  if (rc == SQLITE_ROW) return std::optional<std::string>(ColText(s.get(), 0));
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  return absl::InternalError(sqlite3_errmsg(db_));
}

absl::Status Store::PutKv(const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  SqlStmt s(db_,
         "INSERT INTO kv(key, value) VALUES(?1, ?2) "
         "ON CONFLICT(key) DO UPDATE SET value=excluded.value;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  s.Text(1, key);
  s.Text(2, value);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::Status Store::DeleteKv(const std::string& key) { return DeleteKvs({key}); }

absl::Status Store::DeleteKvs(const std::vector<std::string>& keys) {
  if (keys.empty()) return absl::OkStatus();
  std::lock_guard lock(mu_);
  if (auto st = Exec("BEGIN IMMEDIATE;"); !st.ok()) return st;
  SqlStmt s(db_, "DELETE FROM kv WHERE key = ?1;");
  for (const auto& key : keys) {
    if (s.ok()) {
      sqlite3_reset(s.get());
      s.Text(1, key);
      if (sqlite3_step(s.get()) == SQLITE_DONE) continue;
    }
    const std::string err = sqlite3_errmsg(db_);
    (void)Exec("ROLLBACK;");
    return absl::InternalError(err);
  }
  return Exec("COMMIT;");
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Store::ListKv(
    const std::string& prefix) {
  std::lock_guard lock(mu_);
  // A range on the primary key, not LIKE: '%' and '_' in a prefix stay literal.
  SqlStmt s(db_, "SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key;");
  if (!s.ok()) return absl::InternalError(sqlite3_errmsg(db_));
  s.Text(1, prefix);
  s.Text(2, prefix + "\xff");
  std::vector<std::pair<std::string, std::string>> out;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    out.emplace_back(ColText(s.get(), 0), ColText(s.get(), 1));
  }
  if (rc != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return out;
}

}  // namespace fedgate::gateway
