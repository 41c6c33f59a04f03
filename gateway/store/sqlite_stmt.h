// A prepared SQLite statement with typed binds, shared by the store and the
// job store. Statements are prepared once per connection and SQL text, then
// reused (reset and unbound when a SqlStmt goes away): parsing SQL on every
// call cost more than the write itself. Call ForgetStatements(db) before
// closing a connection.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fedgate::gateway {

namespace internal {
struct StmtCache {
  std::mutex mu;
  std::map<std::pair<sqlite3*, std::string>, std::vector<sqlite3_stmt*>> free;
  static StmtCache& Get() {
    static StmtCache* c = new StmtCache();  // never destroyed: outlives every connection
    return *c;
  }
};
}  // namespace internal

class SqlStmt {
 public:
  SqlStmt(sqlite3* db, const char* sql) : key_(db, sql) {
    auto& c = internal::StmtCache::Get();
    {
      std::lock_guard lock(c.mu);
      auto it = c.free.find(key_);
      if (it != c.free.end() && !it->second.empty()) {
        stmt_ = it->second.back();
        it->second.pop_back();
        rc_ = SQLITE_OK;
        return;
      }
    }
    rc_ = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
  }
  ~SqlStmt() {
    if (stmt_ == nullptr) return;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    auto& c = internal::StmtCache::Get();
    std::lock_guard lock(c.mu);
    c.free[key_].push_back(stmt_);
  }
  SqlStmt(const SqlStmt&) = delete;
  SqlStmt& operator=(const SqlStmt&) = delete;

  bool ok() const { return rc_ == SQLITE_OK && stmt_ != nullptr; }
  sqlite3_stmt* get() { return stmt_; }
  void Text(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Blob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Int(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Null(int i) { sqlite3_bind_null(stmt_, i); }
  // Steps a statement that returns no rows; true on SQLITE_DONE.
  bool Run() { return ok() && sqlite3_step(stmt_) == SQLITE_DONE; }

 private:
  std::pair<sqlite3*, std::string> key_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

// Every connection's page cache (SQLite's default is 2 MiB each, filled as
// the file grows past it): the OS page cache holds the file anyway, and
// three full default caches would be a fifth of an idle gateway's RSS.
// 128 KiB each kept the 10 000-job soak's SQLite heap at 0.5 MiB (0.9 MiB
// with 512 KiB) with no change in durable submits/s (bench/submit_bench).
inline constexpr const char* kCacheSizePragma = "PRAGMA cache_size=-128;";  // KiB

// Finalizes the cached statements of `db` (none may be in use).
inline void ForgetStatements(sqlite3* db) {
  auto& c = internal::StmtCache::Get();
  std::lock_guard lock(c.mu);
  for (auto it = c.free.begin(); it != c.free.end();) {
    if (it->first.first != db) {
      ++it;
      continue;
    }
    for (sqlite3_stmt* s : it->second) sqlite3_finalize(s);
    it = c.free.erase(it);
  }
}

// Column `i` of the current row as text ("" for NULL).
inline std::string ColText(sqlite3_stmt* s, int i) {
  const auto* t = sqlite3_column_text(s, i);
  return t ? std::string(reinterpret_cast<const char*>(t),
                         static_cast<size_t>(sqlite3_column_bytes(s, i)))
           : "";
}

// Column `i` of the current row as bytes ("" for NULL).
inline std::string ColBlob(sqlite3_stmt* s, int i) {
  const void* b = sqlite3_column_blob(s, i);
  return b ? std::string(static_cast<const char*>(b), static_cast<size_t>(sqlite3_column_bytes(s, i)))
           : "";
}

}  // namespace fedgate::gateway
