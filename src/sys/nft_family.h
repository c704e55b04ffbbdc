#pragma once
// What every nftables read and write of the sys layer shares: the address
// families, and the retry of a dump a concurrent commit interrupted.

#include <cerrno>
#include <functional>
#include <string>

#include "base/status.h"

namespace weft::sys {

enum class NftFamily { kIp = 2, kIp6 = 10, kInet = 1, kBridge = 7, kNetdev = 5 };

// The kernel interrupts an nftables dump (NLM_F_DUMP_INTR, seen as EINTR)
// when another process commits a ruleset meanwhile, as concurrent plugins
// and weftd do. A dump only reads, so this layer reads it again, up to
// kNftDumpAttempts times in all; only a dump interrupted every time is an
// error (EINTR, and the attempts named). Every dump below goes through
// RetryInterruptedNftDump: callers never repeat one.
inline constexpr int kNftDumpAttempts = 5;

template <typename T>
Result<T> RetryInterruptedNftDump(const std::function<Result<T>()>& dump) {
  Result<T> r = dump();
  for (int i = 1; i < kNftDumpAttempts && !r.ok() && r.status().sys_errno() == EINTR; ++i) r = dump();
  if (!r.ok() && r.status().sys_errno() == EINTR)
    return r.status().WithPrefix("interrupted by concurrent changes " + std::to_string(kNftDumpAttempts) + " times");
  return r;
}

}  // namespace weft::sys
