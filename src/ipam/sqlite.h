#pragma once
// Thin RAII over the SQLite C API: Db (connection), Stmt (prepared
// statement), Txn (rolls back unless committed). SQLite result codes become
// Status values here, at the adapter.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace weft::ipam {

// State of a connection's busy handler (see OnBusy in sqlite.cc).
struct BusyWait {
  std::chrono::milliseconds timeout;
  std::chrono::steady_clock::time_point first;
};

class Db {
 public:
  // Opens (creating, 0600) the database file and sets the per-connection
  // settings: synchronous=NORMAL, foreign keys, busy timeout. WAL mode is
  // persistent and set once by the owner of the schema (ipam::Store).
  static Result<Db> Open(const std::string& path, int busy_timeout_ms);
  Db(Db&& o) noexcept;
  Db& operator=(Db&& o) noexcept;
  ~Db();

  Status Exec(const std::string& sql);
  // First column of the first row ("" when there is none).
  Result<std::string> QueryText(const char* sql);
  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }
  // Maps the last SQLite error on this connection to a Status.
  Status Error(int rc, const std::string& what) const;
  int64_t Changes() const;
  int64_t LastInsertId() const;
  // Frames in the WAL after this connection's last commit (0 before one).
  // Every process that opens the database reads them all back (SQLite
  // rebuilds its WAL index on the first open), so this is the cost the next
  // plugin pays; BackgroundCheckpoint brings it back to zero.
  int wal_frames() const { return *wal_frames_; }

 private:
  Db(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_ = nullptr;
  std::string path_;
  std::unique_ptr<int> wal_frames_ = std::make_unique<int>(0);  // written by the WAL hook
  std::unique_ptr<BusyWait> busy_;  // the busy handler's state
};

// Copies the WAL of the database at `path` into the database file (a
// PASSIVE checkpoint, with its fsyncs) on a connection of its own in a
// background thread, so the cost overlaps the caller's kernel work. The
// first write transaction that begins after Wait() restarts the WAL at its
// start. Failures are ignored: a checkpoint left undone only leaves a longer
// WAL for the next open to read (and a later checkpoint to copy).
class BackgroundCheckpoint {
 public:
  explicit BackgroundCheckpoint(const std::string& path);
  BackgroundCheckpoint(const BackgroundCheckpoint&) = delete;
  BackgroundCheckpoint& operator=(const BackgroundCheckpoint&) = delete;
  ~BackgroundCheckpoint() { Wait(); }
  void Wait();

 private:
  std::thread thread_;
};

class Stmt {
 public:
  static Result<Stmt> Prepare(const Db& db, const char* sql);
  Stmt(Stmt&& o) noexcept;
  ~Stmt();

  Stmt& Bind(int i, int64_t v);
  Stmt& Bind(int i, const std::string& v);
  Stmt& BindNull(int i);
  Stmt& BindOpt(int i, const std::optional<std::string>& v) {
    return v ? Bind(i, *v) : BindNull(i);
  }
  // Returns true when a row is available, false when done.
  Result<bool> Step();
  // Runs to completion (for statements without rows).
  Status Run();
  int64_t Int(int col) const;
  std::string Text(int col) const;
  bool IsNull(int col) const;
  Status Reset();

  int last_rc() const { return rc_; }

 private:
  Stmt(const Db* db, sqlite3_stmt* s) : db_(db), s_(s) {}
  const Db* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_ = 0;
};

// BEGIN IMMEDIATE (takes the write lock up front, so a transaction never
// fails half-way on lock upgrade); rolls back on destruction unless committed.
class Txn {
 public:
  static Result<Txn> Begin(Db& db, bool immediate = true);
  Txn(Txn&& o) noexcept;
  ~Txn();
  Status Commit();

 private:
  explicit Txn(Db* db) : db_(db) {}
  Db* db_;
  bool done_ = false;
};

bool IsConstraintViolation(const Status& s);

}  // namespace weft::ipam
