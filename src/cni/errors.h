#pragma once
// The plugin's edge for errors: the one place a Status becomes a CNI error
// code. Every layer below says why it failed in its own words (a Reason and
// a Domain, src/base/status.h); CodeOf() picks the code a runtime sees from
// the table in errors.cc, which docs/errors.md mirrors row for row.

#include <optional>
#include <span>

#include "base/status.h"

namespace weft::cni {

// CNI error codes. Values 1-99 are the spec's; 100+ are Weft's own and are
// documented in docs/errors.md. Never renumber: runtimes and operators
// match on them.
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

// One row of the table: a reason, in one domain or (domain == nullopt) in
// any, gives `code`. The first matching row wins.
struct ErrorRow {
  Reason reason;
  std::optional<Domain> domain;
  Code code;
};

// The table, in the order CodeOf() reads it.
std::span<const ErrorRow> ErrorTable();

// The CNI code for `st`: kOk for OK, the reporting program's own code for a
// Status::Reported() (a runtime passes a plugin's code on unchanged), else
// the table's first matching row (kInternal when none matches).
Code CodeOf(const Status& st);
inline int CodeNumber(const Status& st) { return static_cast<int>(CodeOf(st)); }

// Predicates for CNI clients (weftctl, the delegated-IPAM caller) that decide
// on a code they read or chose.
bool IsIncompatibleVersion(int code);         // a plugin's reply refusing our version
inline bool IsExecFailure(const Status& st) { return CodeOf(st) == Code::kExec; }

}  // namespace weft::cni
