#pragma once
// Read-only nftables queries over raw nfnetlink (the shared stack of
// sys/nfnetlink.h, as nft_set.h and conntrack.h use it). The plugin
// uses this to check, in tens of microseconds, whether a ruleset it owns is
// already in place, so it only pays for `nft -f` when something is missing.

#include <cerrno>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace weft::sys {

enum class NftFamily { kIp = 2, kIp6 = 10, kInet = 1, kBridge = 7, kNetdev = 5 };

struct NftRuleInfo {
  std::string chain;
  uint64_t handle = 0;
  std::string comment;
};

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

// The rules of `table` (only `chain`'s when it is not empty), in chain order,
// with their handles and comments. A missing table or chain yields an empty
// list, not an error.
Result<std::vector<NftRuleInfo>> NftRules(NftFamily family, const std::string& table, const std::string& chain = "");

// The names of the chains of `table` (a missing table: none).
Result<std::vector<std::string>> NftChains(NftFamily family, const std::string& table);

// The comments of the rules in `table`/`chain`, in order.
Result<std::vector<std::string>> NftRuleComments(NftFamily family, const std::string& table,
                                                 const std::string& chain);

}  // namespace weft::sys
