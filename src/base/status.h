#pragma once
// Errors are values. A Status carries a CNI error code (the spec's 1-11, 50,
// 51 and our own 100+, see docs/errors.md), a message for operators, optional
// details, and the errno that caused it when a syscall failed.

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace weft {

// CNI error codes. Values 1-99 are the spec's; 100+ are Weft's own and are
// documented in docs/errors.md. Never renumber.
enum class Code : int {
  kOk = 0,
  kIncompatibleVersion = 1,
  kUnsupportedField = 2,
  kUnknownContainer = 3,
  kInvalidEnv = 4,
  kIo = 5,
  kDecode = 6,
  kInvalidConfig = 7,
  kTryAgainLater = 11,
  kNotAvailable = 50,
  kNotAvailableLimited = 51,
  // Weft's own.
  kNoFreeAddress = 100,
  kAlreadyAttached = 101,
  kStore = 102,
  kKernel = 103,
  kFirewall = 104,
  kHostPortConflict = 105,
  kNameTaken = 106,
  kDelegatedIpam = 107,
  kCheckFailed = 108,
  kExec = 109,
  kControlPlane = 110,
  kInternal = 999,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(Code code, std::string msg, std::string details = {},
                      int sys_errno = 0) {
    Status s;
    s.code_ = code;
    s.msg_ = std::move(msg);
    s.details_ = std::move(details);
    s.errno_ = sys_errno;
    return s;
  }
  // An error from a failed syscall: details carry strerror(err).
  static Status FromErrno(Code code, std::string msg, int err);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  int code_int() const { return static_cast<int>(code_); }
  const std::string& msg() const { return msg_; }
  const std::string& details() const { return details_; }
  int sys_errno() const { return errno_; }

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
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
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
