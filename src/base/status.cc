#include "base/status.h"

#include <cstring>

namespace weft {

std::string_view ReasonName(Reason r) {
  switch (r) {
    case Reason::kOk: return "ok";
    case Reason::kInvalidArgument: return "invalid-argument";
    case Reason::kMalformed: return "malformed";
    case Reason::kUnsupported: return "unsupported";
    case Reason::kNotFound: return "not-found";
    case Reason::kAlreadyExists: return "already-exists";
    case Reason::kConflict: return "conflict";
    case Reason::kExhausted: return "exhausted";
    case Reason::kBusy: return "busy";
    case Reason::kUnavailable: return "unavailable";
    case Reason::kMismatch: return "mismatch";
    case Reason::kFailed: return "failed";
    case Reason::kInternal: return "internal";
  }
  return "unknown";
}

std::string_view DomainName(Domain d) {
  switch (d) {
    case Domain::kNone: return "";
    case Domain::kEnvironment: return "environment";
    case Domain::kConfig: return "config";
    case Domain::kNetns: return "netns";
    case Domain::kFile: return "file";
    case Domain::kKernel: return "kernel";
    case Domain::kFirewall: return "firewall";
    case Domain::kExec: return "exec";
    case Domain::kStore: return "store";
    case Domain::kPlugin: return "plugin";
    case Domain::kControlPlane: return "control-plane";
  }
  return "unknown";
}

Status Status::FromErrno(Reason reason, Domain domain, std::string msg, int err) {
  return Error(reason, domain, std::move(msg), std::strerror(err), err);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s;
  if (domain_ != Domain::kNone) s = std::string(DomainName(domain_)) + "/";
  s += std::string(ReasonName(reason_));
  if (reported_code_ != 0) s += " (code " + std::to_string(reported_code_) + ")";
  s += ": " + msg_;
  if (!details_.empty()) s += " (" + details_ + ")";
  return s;
}

}  // namespace weft
