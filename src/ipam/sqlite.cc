#include "ipam/sqlite.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <utility>

#include "base/unique_fd.h"

namespace weft::ipam {

namespace {
// Marker in details so callers can recognise a UNIQUE/FK violation.
constexpr const char* kConstraint = "constraint";
}  // namespace

bool IsConstraintViolation(const Status& s) {
  return s.code() == Code::kStore && s.details().rfind(kConstraint, 0) == 0;
}

Status Db::Error(int rc, const std::string& what) const {
  std::string detail = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Error(Code::kTryAgainLater, what + ": the IPAM database " + path_ + " is busy", detail);
    case SQLITE_CONSTRAINT:
      return Status::Error(Code::kStore, what, std::string(kConstraint) + ": " + detail);
    case SQLITE_READONLY:
      return Status::Error(Code::kStore, what + ": the IPAM database " + path_ + " is read-only", detail);
    case SQLITE_FULL:
      return Status::Error(Code::kStore, what + ": the disk holding " + path_ + " is full", detail);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Status::Error(Code::kStore,
                           what + ": the IPAM database " + path_ +
                               " is corrupted; move it aside and run `weftctl doctor --fix`",
                           detail);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_PERM:
      return Status::Error(Code::kIo, what + ": cannot use " + path_, detail);
    default:
      return Status::Error(Code::kStore, what, detail);
  }
}

Result<Db> Db::Open(const std::string& path, int busy_timeout_ms) {
  // Create the file 0600 ourselves: SQLite would use the umask.
  if (::access(path.c_str(), F_OK) != 0) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    (void)fd;  // errors surface from sqlite3_open_v2 below with context
  }
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  Db db(raw, path);
  if (rc != SQLITE_OK) return db.Error(rc, "open IPAM database");
  sqlite3_busy_timeout(raw, busy_timeout_ms);
  sqlite3_extended_result_codes(raw, 1);
  // Keep the WAL file between connections (no unlink/recreate per process).
  int one = 1;
  sqlite3_file_control(raw, "main", SQLITE_FCNTL_PERSIST_WAL, &one);
  // A plugin process lives for one operation: checkpointing on close would
  // cost three fdatasyncs per ADD. Commits checkpoint the WAL once it passes
  // wal_autocheckpoint pages instead, which also bounds recovery on open.
  sqlite3_db_config(raw, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  WEFT_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA wal_autocheckpoint=256;"));
  return db;
}

Db::Db(Db&& o) noexcept : db_(std::exchange(o.db_, nullptr)), path_(std::move(o.path_)) {}
Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
    path_ = std::move(o.path_);
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
