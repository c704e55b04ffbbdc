#include "ipam/sqlite.h"

#include <sqlite3.h>

#include <chrono>
#include <system_error>
#include <thread>
#include <utility>

#include "sys/files.h"

namespace weft::ipam {

namespace {
// Marker in details so callers can recognise a UNIQUE/FK violation.
constexpr const char* kConstraint = "constraint";

// The backstop when nothing checkpoints in the background (SQLite's own
// default): past this many frames a commit checkpoints synchronously.
constexpr int kWalBackstopFrames = 1000;

int OnWalCommit(void* frames, sqlite3* db, const char* name, int n) {
  *static_cast<int*>(frames) = n;
  if (n >= kWalBackstopFrames) (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  return SQLITE_OK;
}

// SQLite's own busy timeout sleeps 1, 2, 5, 10... ms between tries, far
// longer than the ~0.2 ms another plugin holds the write lock: with eight
// ADDs at once most of the wait was oversleeping. Retry every 100 us for
// the first few milliseconds, then every millisecond, until the timeout.
int OnBusy(void* arg, int tries) {
  auto* w = static_cast<BusyWait*>(arg);
  const auto now = std::chrono::steady_clock::now();
  if (tries == 0) w->first = now;
  if (now - w->first >= w->timeout) return 0;
  std::this_thread::sleep_for(tries < 30 ? std::chrono::microseconds(100) : std::chrono::microseconds(1000));
  return 1;
}

// Settings every connection shares. A plugin process lives for one
// operation: checkpointing on close would cost fdatasyncs in every ADD and
// deleting the WAL would make the next process create it again.
// synchronous=NORMAL on every connection, the checkpointing one included:
// with SQLite's default (FULL) RestartWal's commit added a second fdatasync
// (~4 ms on the development VM's disk) while it held the write lock that
// every other plugin process was waiting for.
void ConfigureConnection(sqlite3* raw) {
  sqlite3_extended_result_codes(raw, 1);
  int one = 1;
  sqlite3_file_control(raw, "main", SQLITE_FCNTL_PERSIST_WAL, &one);
  sqlite3_db_config(raw, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  (void)sqlite3_exec(raw, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
}
// Once every frame is in the database, the next write transaction starts
// the WAL over, and with synchronous=NORMAL that write fsyncs the new WAL
// header (and the directory). Make that write here, off the caller's path:
// the schema version, rewritten unchanged inside one transaction. Skipped
// when another writer holds the lock (its commit restarts the WAL instead).
void RestartWal(sqlite3* raw) {
  if (sqlite3_exec(raw, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return;
  sqlite3_stmt* st = nullptr;
  int64_t version = -1;
  if (sqlite3_prepare_v2(raw, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    version = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  const std::string sql = "PRAGMA user_version=" + std::to_string(version);
  if (version < 0 || sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK ||
      sqlite3_exec(raw, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK)
    (void)sqlite3_exec(raw, "ROLLBACK", nullptr, nullptr, nullptr);
}
}  // namespace

bool IsConstraintViolation(const Status& s) {
  return s.reason() == Reason::kFailed && s.domain() == Domain::kStore && s.details().rfind(kConstraint, 0) == 0;
}

Status Db::Error(int rc, const std::string& what) const {
  std::string detail = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Error(Reason::kBusy, Domain::kStore, what + ": the IPAM database " + path_ + " is busy", detail);
    case SQLITE_CONSTRAINT:
      return Status::Error(Reason::kFailed, Domain::kStore, what, std::string(kConstraint) + ": " + detail);
    case SQLITE_READONLY:
      return Status::Error(Reason::kFailed, Domain::kStore,
                           what + ": the IPAM database " + path_ + " is read-only", detail);
    case SQLITE_FULL:
      return Status::Error(Reason::kFailed, Domain::kStore, what + ": the disk holding " + path_ + " is full", detail);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Status::Error(Reason::kFailed, Domain::kStore,
                           what + ": the IPAM database " + path_ +
                               " is corrupted; move it aside and run `weftctl doctor --fix`",
                           detail);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_PERM:
      return Status::Error(Reason::kFailed, Domain::kFile, what + ": cannot use " + path_, detail);
    default:
      return Status::Error(Reason::kFailed, Domain::kStore, what, detail);
  }
}

Result<Db> Db::Open(const std::string& path, int busy_timeout_ms) {
  // Create the file 0600 ourselves: SQLite would use the umask.
  // Errors surface from sqlite3_open_v2 below, with context.
  (void)sys::CreateFileIfAbsent(path, 0600);
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  Db db(raw, path);
  if (rc != SQLITE_OK) return db.Error(rc, "open IPAM database");
  db.busy_ = std::make_unique<BusyWait>(BusyWait{std::chrono::milliseconds(busy_timeout_ms), {}});
  sqlite3_busy_handler(raw, OnBusy, db.busy_.get());
  ConfigureConnection(raw);
  // Replaces SQLite's autocheckpoint (also a WAL hook) with one that counts.
  sqlite3_wal_hook(raw, OnWalCommit, db.wal_frames_.get());
  WEFT_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys=ON;"));
  return db;
}

Db::Db(Db&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)),
      path_(std::move(o.path_)),
      wal_frames_(std::move(o.wal_frames_)),
      busy_(std::move(o.busy_)) {
  o.wal_frames_ = std::make_unique<int>(0);
}
Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
    path_ = std::move(o.path_);
    std::swap(wal_frames_, o.wal_frames_);
    std::swap(busy_, o.busy_);
  }
  return *this;
}
Db::~Db() {
  if (db_) sqlite3_close_v2(db_);
}

Result<std::string> Db::QueryText(const char* sql) {
  WEFT_ASSIGN_OR_RETURN(Stmt st, Stmt::Prepare(*this, sql));
  WEFT_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.Text(0) : std::string();
}

Status Db::Exec(const std::string& sql) {
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "run \"" + sql.substr(0, 40) + (sql.size() > 40 ? "..." : "") + "\"");
  return Status::Ok();
}

int64_t Db::Changes() const { return sqlite3_changes64(db_); }
int64_t Db::LastInsertId() const { return sqlite3_last_insert_rowid(db_); }

Result<Stmt> Stmt::Prepare(const Db& db, const char* sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db.get(), sql, -1, &s, nullptr);
  if (rc != SQLITE_OK) return db.Error(rc, "prepare statement");
  return Stmt(&db, s);
}

Stmt::Stmt(Stmt&& o) noexcept : db_(o.db_), s_(std::exchange(o.s_, nullptr)), rc_(o.rc_) {}
Stmt::~Stmt() {
  if (s_) sqlite3_finalize(s_);
}

Stmt& Stmt::Bind(int i, int64_t v) {
  sqlite3_bind_int64(s_, i, v);
  return *this;
}
Stmt& Stmt::Bind(int i, const std::string& v) {
  sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::BindNull(int i) {
  sqlite3_bind_null(s_, i);
  return *this;
}

Result<bool> Stmt::Step() {
  rc_ = sqlite3_step(s_);
  if (rc_ == SQLITE_ROW) return true;
  if (rc_ == SQLITE_DONE) return false;
  return db_->Error(rc_, "query");
}

Status Stmt::Run() {
  while (true) {
    auto r = Step();
    if (!r.ok()) return r.status();
    if (!*r) return Status::Ok();
  }
}

int64_t Stmt::Int(int col) const { return sqlite3_column_int64(s_, col); }
std::string Stmt::Text(int col) const {
  const unsigned char* t = sqlite3_column_text(s_, col);
  return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s_, col)) : std::string();
}
bool Stmt::IsNull(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
Status Stmt::Reset() {
  sqlite3_reset(s_);
  sqlite3_clear_bindings(s_);
  return Status::Ok();
}

BackgroundCheckpoint::BackgroundCheckpoint(const std::string& path) {
  try {
    thread_ = std::thread([path] {
      sqlite3* raw = nullptr;
      if (sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) == SQLITE_OK) {
        ConfigureConnection(raw);
        // A fresh connection has not looked at the file yet: read its header
        // first, or the checkpoint finds no WAL and returns doing nothing.
        (void)sqlite3_exec(raw, "PRAGMA schema_version", nullptr, nullptr, nullptr);
        int frames = 0, copied = 0;
        if (sqlite3_wal_checkpoint_v2(raw, "main", SQLITE_CHECKPOINT_PASSIVE, &frames, &copied) == SQLITE_OK &&
            frames > 0 && copied == frames)
          RestartWal(raw);
      }
      sqlite3_close_v2(raw);
    });
  } catch (const std::system_error&) {
    // No thread (resource limits): skip it, as a failed checkpoint would.
  }
}

void BackgroundCheckpoint::Wait() {
  if (thread_.joinable()) thread_.join();
}

Result<Txn> Txn::Begin(Db& db, bool immediate) {
  WEFT_RETURN_IF_ERROR(db.Exec(immediate ? "BEGIN IMMEDIATE" : "BEGIN"));
  return Txn(&db);
}
Txn::Txn(Txn&& o) noexcept : db_(o.db_), done_(std::exchange(o.done_, true)) {}
Txn::~Txn() {
  if (!done_) (void)db_->Exec("ROLLBACK");
}
Status Txn::Commit() {
  WEFT_RETURN_IF_ERROR(db_->Exec("COMMIT"));
  done_ = true;
  return Status::Ok();
}

}  // namespace weft::ipam
