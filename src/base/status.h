#pragma once
// Errors are values. A Status says why an operation failed in the words of
// the layer that failed — a neutral Reason, the Domain it happened in, and
// the errno when a syscall failed — with a message for operators and
// optional details. It names no protocol's codes: the CNI code a runtime
// sees is chosen from (reason, domain) in one table at the plugin's edge
// (src/cni/errors.h, mirrored by docs/errors.md).

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace weft {

// Why an operation failed. Callers decide with the predicates below
// (Status::IsNotFound() and friends, or a layer's own such as
// sys::IsNetnsGone), never by the message.
enum class Reason : uint8_t {
  kOk = 0,
  kInvalidArgument,  // a value we were given is wrong: a config key, an environment variable, a name
  kMalformed,        // bytes could not be decoded: JSON, a record, a program's output
  kUnsupported,      // a version or feature this code does not speak
  kNotFound,         // the named thing does not exist
  kAlreadyExists,    // the named thing exists already
  kConflict,         // the thing is held by another owner
  kExhausted,        // a pool has nothing left to hand out
  kBusy,             // contended or locked: the same request may succeed later
  kUnavailable,      // a service or resource cannot be reached or used now
  kMismatch,         // the state differs from what it should be
  kFailed,           // the operation itself failed; errno and details say why
  kInternal,         // a bug
};

// Where it failed: the subsystem the reason is about.
enum class Domain : uint8_t {
  kNone = 0,
  kEnvironment,   // the process's environment variables
  kConfig,        // a configuration document or flag
  kNetns,         // a network namespace named by a path
  kFile,          // files and directories
  kKernel,        // syscalls and netlink: links, addresses, routes
  kFirewall,      // nftables / iptables
  kExec,          // starting and running other programs
  kStore,         // the IPAM database and what it records
  kPlugin,        // another plugin weft delegates to
  kControlPlane,  // the Kubernetes API, etcd, weftd's HTTP endpoints
};

std::string_view ReasonName(Reason r);
std::string_view DomainName(Domain d);

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(Reason reason, Domain domain, std::string msg, std::string details = {},
                      int sys_errno = 0) {
    Status s;
    s.reason_ = reason == Reason::kOk ? Reason::kInternal : reason;
    s.domain_ = domain;
    s.msg_ = std::move(msg);
    s.details_ = std::move(details);
    s.errno_ = sys_errno;
    return s;
  }
  // An error from a failed syscall: details carry strerror(err).
  static Status FromErrno(Reason reason, Domain domain, std::string msg, int err);
  // A failure another program reported with its own error code (a plugin's
  // CNI error object): carried verbatim, so a runtime passes it on unchanged.
  static Status Reported(int code, std::string msg, std::string details = {}) {
    Status s = Error(Reason::kFailed, Domain::kPlugin, std::move(msg), std::move(details));
    s.reported_code_ = code;
    return s;
  }

  bool ok() const { return reason_ == Reason::kOk; }
  Reason reason() const { return reason_; }
  Domain domain() const { return domain_; }
  // The code another program reported (Reported()), 0 otherwise.
  int reported_code() const { return reported_code_; }
  const std::string& msg() const { return msg_; }
  const std::string& details() const { return details_; }
  int sys_errno() const { return errno_; }

  // Predicates for callers that decide something (as leveldb's IsNotFound).
  bool IsInvalidArgument() const { return reason_ == Reason::kInvalidArgument; }
  bool IsNotFound() const { return reason_ == Reason::kNotFound; }
  bool IsAlreadyExists() const { return reason_ == Reason::kAlreadyExists; }
  bool IsExhausted() const { return reason_ == Reason::kExhausted; }
  bool IsBusy() const { return reason_ == Reason::kBusy; }
  bool IsUnavailable() const { return reason_ == Reason::kUnavailable; }

  // Prefixes the message with context as the error travels up:
  // "ADD c1/eth0: " + "move veth into netns: ...".
  Status& Prefix(std::string_view context) {
    if (!ok()) msg_ = std::string(context) + ": " + msg_;
    return *this;
  }
  Status WithPrefix(std::string_view context) const {
    Status s = *this;
    s.Prefix(context);
    return s;
  }
  // The same error (reason, domain, errno, details) with another message.
  Status WithMsg(std::string msg) const {
    Status s = *this;
    if (!ok()) s.msg_ = std::move(msg);
    return s;
  }
  // "kernel/failed: add route 10.0.0.2/32 (File exists)" — for logs.
  std::string ToString() const;

 private:
  Reason reason_ = Reason::kOk;
  Domain domain_ = Domain::kNone;
  int reported_code_ = 0;
  std::string msg_;
  std::string details_;
  int errno_ = 0;
};

// Result<T>: a T or an error Status. Small stand-in for std::expected (C++23).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result from an OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace weft

// Propagates an error Status out of the calling function.
#define WEFT_RETURN_IF_ERROR(expr)        \
  do {                                    \
    ::weft::Status _st = (expr);          \
    if (!_st.ok()) return _st;            \
  } while (0)

#define WEFT_CONCAT_INNER(a, b) a##b
#define WEFT_CONCAT(a, b) WEFT_CONCAT_INNER(a, b)
// WEFT_ASSIGN_OR_RETURN(auto x, Foo()); assigns the value or returns the error.
#define WEFT_ASSIGN_OR_RETURN(lhs, expr) \
  WEFT_ASSIGN_OR_RETURN_IMPL(WEFT_CONCAT(_res_, __LINE__), lhs, expr)
#define WEFT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
