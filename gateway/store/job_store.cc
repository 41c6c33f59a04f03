#include "gateway/store/job_store.h"

#include <openssl/rand.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>

#include "base/str_cat.h"
#include "gateway/store/job_store_rows.h"
#include "gateway/store/sqlite_stmt.h"

namespace fedgate::gateway {
namespace {

using job_rows::InsertEvents;
using job_rows::kColumns;
using job_rows::Row;
using job_rows::SqlError;

constexpr size_t kMaxBatch = 512;

constexpr federation::JobState kAllStates[] = {
    federation::JobState::kPending,   federation::JobState::kReserving,
    federation::JobState::kRunning,   federation::JobState::kSucceeded,
    federation::JobState::kFailed,    federation::JobState::kCancelled};

absl::StatusOr<std::optional<JobRecord>> SelectOne(sqlite3* db, const char* where,
                                                   const std::vector<std::string>& args) {
  const std::string sql = StrCat("SELECT ", kColumns, " FROM jobs WHERE ", where, ";");
  SqlStmt st(db, sql.c_str());
  if (!st.ok()) return SqlError(db, "select");
  for (size_t i = 0; i < args.size(); ++i) st.Text(static_cast<int>(i + 1), args[i]);
  const int rc = sqlite3_step(st.get());
  if (rc == SQLITE_ROW) return std::optional<JobRecord>(Row(st.get()));
  if (rc == SQLITE_DONE) return std::optional<JobRecord>();
  return SqlError(db, "select");
}

sqlite3* OpenConn(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    sqlite3_close(db);
    return nullptr;
  }
  sqlite3_busy_timeout(db, 5000);
  sqlite3_exec(db, "PRAGMA synchronous=FULL;", nullptr, nullptr, nullptr);
  sqlite3_exec(db, kCacheSizePragma, nullptr, nullptr, nullptr);
  return db;
}

}  // namespace

std::string NewJobId() {
  unsigned char b[8];
  RAND_bytes(b, sizeof(b));
  static const char* kHex = "0123456789abcdef";
  std::string id = "j-";
  for (unsigned char c : b) {
    id.push_back(kHex[c >> 4]);
    id.push_back(kHex[c & 15]);
  }
  return id;
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  std::unique_ptr<JobStore> s(new JobStore());
  s->writer_ = OpenConn(path);
  s->reader_ = OpenConn(path);
  if (s->writer_ == nullptr || s->reader_ == nullptr) {
    return absl::InternalError(StrCat("cannot open job store ", path));
  }
  s->thread_ = std::thread([p = s.get()] { p->WriterLoop(); });
  return s;
}

JobStore::~JobStore() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  ForgetStatements(writer_);
  ForgetStatements(reader_);
  sqlite3_close(writer_);
  sqlite3_close(reader_);
}

void JobStore::EnqueueAsync(std::function<absl::Status(sqlite3*)> apply,
                            std::function<void(absl::Status)> done) {
  {
    std::lock_guard lock(mu_);
    if (!stop_) {
      queue_.push_back(std::make_unique<Write>(Write{std::move(apply), std::move(done)}));
      done = nullptr;
    }
  }
  if (done) {
    done(absl::UnavailableError("job store is closing"));
    return;
  }
  cv_.notify_one();
}

absl::Status JobStore::Enqueue(std::function<absl::Status(sqlite3*)> apply) {
  std::promise<absl::Status> p;
  auto fut = p.get_future();
  EnqueueAsync(std::move(apply), [&p](absl::Status st) { p.set_value(std::move(st)); });
  return fut.get();
}

void JobStore::WriterLoop() {
  std::vector<std::unique_ptr<Write>> batch;
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      while (!queue_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    // One transaction for the whole batch; each write runs in a savepoint so
    // one failing write does not undo the others.
    std::vector<absl::Status> results(batch.size());
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status txn = SqlStmt(writer_, "BEGIN IMMEDIATE;").Run() ? absl::OkStatus()
                                                                 : SqlError(writer_, "begin");
    for (size_t i = 0; i < batch.size() && txn.ok(); ++i) {
      (void)SqlStmt(writer_, "SAVEPOINT w;").Run();
      results[i] = batch[i]->apply(writer_);
      if (!results[i].ok()) (void)SqlStmt(writer_, "ROLLBACK TO w;").Run();
      (void)SqlStmt(writer_, "RELEASE w;").Run();
    }
    if (txn.ok() && !SqlStmt(writer_, "COMMIT;").Run()) {
      txn = SqlError(writer_, "commit");
      sqlite3_exec(writer_, "ROLLBACK;", nullptr, nullptr, nullptr);
    }
    ++commits_;
    if (on_commit_) {
      on_commit_(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                 batch.size());
    }
    largest_batch_ = std::max<uint64_t>(largest_batch_, batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i]->done(txn.ok() ? results[i] : txn);
    }
    batch.clear();
  }
}

void JobStore::SubmitAsync(JobRecord job,
                           std::function<void(absl::StatusOr<SubmitOutcome>)> done) {
  auto out = std::make_shared<SubmitOutcome>();
  auto rec = std::make_shared<JobRecord>(std::move(job));
  EnqueueAsync(
      [out, rec](sqlite3* db) -> absl::Status {
        const JobRecord& job = *rec;
        if (!job.idempotency_key.empty()) {
          auto existing = SelectOne(db, "tenant = ?1 AND idempotency_key = ?2",
                                    {job.tenant, job.idempotency_key});
          if (!existing.ok()) return existing.status();
          if (existing->has_value()) {
            *out = {**existing, false};
            return absl::OkStatus();
          }
        }
        SqlStmt ins(db, StrCat("INSERT INTO jobs(", kColumns,
                               ", name) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?11, 1, "
                               "?12, '', ?10);")
                            .c_str());
        if (!ins.ok()) return SqlError(db, "insert");
        ins.Text(1, job.id);
        ins.Text(2, job.tenant);
        if (job.idempotency_key.empty()) {
          ins.Null(3);
        } else {
          ins.Text(3, job.idempotency_key);
        }
        ins.Blob(4, job.spec.SerializeAsString());
        ins.Text(5, std::string(federation::JobStateName(job.state)));
        ins.Int(6, job.attempt);
        ins.Text(7, job.reason);
        ins.Int(8, job.created_at_unix_ms);
        ins.Int(9, job.updated_at_unix_ms);
        ins.Text(10, job.spec.name());
        ins.Blob(11, job.run);
        ins.Int(12, static_cast<int64_t>(job.term));
        if (sqlite3_step(ins.get()) != SQLITE_DONE) return SqlError(db, "insert");
        if (auto st = InsertEvents(db, job.id, job.new_events); !st.ok()) return st;
        *out = {job, true};
        out->job.version = 1;  // a queued record's first copy: newer than none
        out->job.new_events.clear();
        return absl::OkStatus();
      },
      [out, done = std::move(done)](absl::Status st) {
        if (st.ok()) {
          done(std::move(*out));
        } else {
          done(st);
        }
      });
}

absl::StatusOr<SubmitOutcome> JobStore::Submit(JobRecord job) {
  std::promise<absl::StatusOr<SubmitOutcome>> p;
  auto fut = p.get_future();
  SubmitAsync(std::move(job), [&p](absl::StatusOr<SubmitOutcome> r) { p.set_value(std::move(r)); });
  return fut.get();
}

absl::StatusOr<std::optional<JobRecord>> JobStore::Get(const std::string& id) {
  std::lock_guard lock(read_mu_);
  return SelectOne(reader_, "id = ?1", {id});
}

absl::StatusOr<std::vector<JobRecord>> JobStore::List(const std::string& tenant,
                                                      const std::string& state,
                                                      const std::string& after_id, int limit) {
  std::lock_guard lock(read_mu_);
  // One statement per filter, so that SQLite walks an index in id order
  // (the primary key, jobs_by_tenant or jobs_by_state_id) instead of every
  // row: "(?1 = '' OR tenant = ?1)" would hide the index from the planner.
  const std::string sql =
      StrCat("SELECT ", kColumns, " FROM jobs WHERE ", tenant.empty() ? "" : "tenant = ?1 AND ",
             state.empty() ? "" : "state = ?2 AND ", "id > ?3 ORDER BY id LIMIT ?4;");
  SqlStmt st(reader_, sql.c_str());
  if (!st.ok()) return SqlError(reader_, "list");
  st.Text(1, tenant);
  st.Text(2, state);
  st.Text(3, after_id);
  st.Int(4, std::clamp(limit, 1, 10001));  // a page of 10 000 and the one after it
  std::vector<JobRecord> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(Row(st.get()));
  if (rc != SQLITE_DONE) return SqlError(reader_, "list");
  return out;
}

absl::StatusOr<JobStore::Counts> JobStore::Count() {
  std::lock_guard lock(read_mu_);
  Counts out;
  for (auto s : kAllStates) {
    out.by_state[std::string(federation::JobStateName(s))] = 0;
  }
  {
    SqlStmt st(reader_, "SELECT state, COUNT(*) FROM jobs GROUP BY state;");
    if (!st.ok()) return SqlError(reader_, "count");
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      out.by_state[ColText(st.get(), 0)] = sqlite3_column_int64(st.get(), 1);
    }
    if (rc != SQLITE_DONE) return SqlError(reader_, "count");
  }
  {
    SqlStmt st(reader_, "SELECT MIN(created_at_unix_ms) FROM jobs WHERE state = 'PENDING';");
    if (!st.ok()) return SqlError(reader_, "count");
    if (sqlite3_step(st.get()) == SQLITE_ROW && sqlite3_column_type(st.get(), 0) != SQLITE_NULL) {
      out.oldest_pending_created_ms = sqlite3_column_int64(st.get(), 0);
    }
  }
  // GPUs asked by jobs that have not ended, by state, tenant and priority
  // (the spec is a blob: parsed here, at scrape time, for active jobs only).
  SqlStmt st(reader_,
             "SELECT state, tenant, spec FROM jobs WHERE state IN ('PENDING', 'RESERVING', "
             "'RUNNING');");
  if (!st.ok()) return SqlError(reader_, "count");
  int rc;
  v1::JobSpec spec;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    spec.Clear();
    spec.ParseFromArray(sqlite3_column_blob(st.get(), 2), sqlite3_column_bytes(st.get(), 2));
    out.active_gpus[{ColText(st.get(), 0), ColText(st.get(), 1), spec.priority()}] += spec.gpus();
  }
  if (rc != SQLITE_DONE) return SqlError(reader_, "count");
  return out;
}

namespace {
// The states that have (or have not) ended, by the state machine's names,
// quoted for an SQL IN list.
std::string StatesIn(bool ended) {
  std::string out;
  for (auto st : kAllStates) {
    if (federation::IsTerminal(st) != ended) continue;
    out += StrCat(out.empty() ? "'" : ", '", federation::JobStateName(st), "'");
  }
  return out;
}
}  // namespace

absl::StatusOr<std::vector<JobRecord>> JobStore::ListAllActive() {
  // One statement is one read snapshot, so a job that changes state
  // meanwhile is seen once. No ORDER BY: the coordinator orders the jobs
  // itself, and sorting every active row took a temporary B-tree per pass.
  // A job that moved to another coordinator is driven there.
  static const std::string sql =
      StrCat("SELECT ", kColumns, " FROM jobs WHERE state IN (", StatesIn(false),
             ") AND coordinator = '';");
  return ListRows(sql, "list active", std::nullopt);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListEndedSince(int64_t since_unix_ms) {
  static const std::string sql =
      StrCat("SELECT ", kColumns, " FROM jobs WHERE state IN (", StatesIn(true),
             ") AND coordinator = '' AND updated_at_unix_ms >= ?1;");
  return ListRows(sql, "list ended", since_unix_ms);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListRows(const std::string& sql, const char* what,
                                                          std::optional<int64_t> arg) {
  std::lock_guard lock(read_mu_);
  SqlStmt st(reader_, sql.c_str());
  if (!st.ok()) return SqlError(reader_, what);
  if (arg.has_value()) st.Int(1, *arg);
  std::vector<JobRecord> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(Row(st.get()));
  if (rc != SQLITE_DONE) return SqlError(reader_, what);
  return out;
}

absl::Status JobStore::Save(JobRecord* job, federation::JobActor who) {
  uint64_t stored_version = 0;
  absl::Status st = Enqueue([&](sqlite3* db) -> absl::Status {
    SqlStmt sel(db, "SELECT state, version FROM jobs WHERE id = ?1;");
    if (!sel.ok()) return SqlError(db, "save");
    sel.Text(1, job->id);
    const int rc = sqlite3_step(sel.get());
    if (rc == SQLITE_DONE) return absl::NotFoundError(StrCat("no job ", job->id));
    if (rc != SQLITE_ROW) return SqlError(db, "save");
    const auto stored = federation::ParseJobState(ColText(sel.get(), 0));
    stored_version = static_cast<uint64_t>(sqlite3_column_int64(sel.get(), 1));
    if (stored_version != job->version) {
      return absl::AbortedError(StrCat("job ", job->id, " changed since it was read (version ",
                                       job->version, ", now ", stored_version, ", ",
                                       stored ? federation::JobStateName(*stored) : "?", ")"));
    }
    if (!stored) return absl::DataLossError(StrCat("job ", job->id, " has an unknown state"));
    if (auto t = federation::CheckTransition(*stored, job->state, who); !t.ok()) {
      return absl::FailedPreconditionError(StrCat("job ", job->id, ": ", t.message()));
    }
    SqlStmt up(db,
               "UPDATE jobs SET state = ?2, reason = ?3, attempt = ?4, run = ?5, "
               "updated_at_unix_ms = ?6, version = version + 1, term = ?8, coordinator = ?9, "
               "spec = ?10 WHERE id = ?1 AND version = ?7;");
    if (!up.ok()) return SqlError(db, "save");
    up.Text(1, job->id);
    up.Text(2, std::string(federation::JobStateName(job->state)));
    up.Text(3, job->reason);
    up.Int(4, job->attempt);
    up.Blob(5, job->run);
    up.Int(6, job->updated_at_unix_ms);
    up.Int(7, static_cast<int64_t>(job->version));
    up.Int(8, static_cast<int64_t>(job->term));
    up.Text(9, job->moved_to);
    // The spec too: a service's replica range moves (scale, autoscaler).
    up.Blob(10, job->spec.SerializeAsString());
    if (sqlite3_step(up.get()) != SQLITE_DONE) return SqlError(db, "save");
    return InsertEvents(db, job->id, job->new_events);
  });
  if (st.ok()) {
    job->version = stored_version + 1;
    job->new_events.clear();
    if (on_write_) on_write_(job->id);
  }
  return st;
}

}  // namespace fedgate::gateway
