#include "base/status.h"

#include <cstring>

namespace weft {

Status Status::FromErrno(Code code, std::string msg, int err) {
  return Error(code, std::move(msg), std::strerror(err), err);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = "code " + std::to_string(code_int()) + ": " + msg_;
  if (!details_.empty()) s += " (" + details_ + ")";
  return s;
}

}  // namespace weft
