#pragma once
// nftables set elements over raw nfnetlink: one batch (one kernel
// transaction, all or nothing) of element additions and deletions, a table
// deletion, and a dump of a set's elements. This is what lets a plugin ADD
// or DEL change only its own hostPort entries in tens of microseconds,
// where exec'ing nft costs milliseconds and (with `add rule`) reads the
// whole table back first. Keys and data are raw bytes in the set's layout:
// each field of a concatenation padded to 4 bytes (fw/hostport.h builds
// them).

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "sys/nft_query.h"

namespace weft::sys {

// NFT_SET_ELEM_INTERVAL_END.
inline constexpr uint32_t kNftIntervalEnd = 1;

struct NftElement {
  std::string set;
  std::string key;
  std::string key_end;  // "" unless the set is a concatenation with ranges (inclusive end)
  std::string data;     // "" for a plain set
  // kNftIntervalEnd marks the (exclusive) end of a range in a
  // one-field interval set, which holds each range as two elements.
  uint32_t flags = 0;
  bool operator==(const NftElement&) const = default;
};

struct NftChange {
  // kDestroyElement deletes an element and is no error when the element is
  // absent (NFT_MSG_DESTROYSETELEM, Linux 6.3+); the table and set must exist.
  enum Op { kAddElement, kDeleteElement, kDestroyElement, kDeleteTable } op = kAddElement;
  NftElement elem;  // unused for kDeleteTable
};

// Applies `changes` to `table` in one nfnetlink batch: the kernel commits
// all of them or none. Adding an element that exists with the same data is
// not an error. Errors carry the kernel's errno: ENOENT (table, set or
// element missing), EBUSY/EEXIST (the key exists with other data),
// ENOTEMPTY (a range overlaps another). Any number of changes fits one
// batch: only its last message asks the kernel for an answer (failed ones
// answer anyway), so a batch of thousands of messages cannot overflow the
// socket with acknowledgements. With `keep`, the socket is left
// open there instead of closed: closing an nfnetlink socket right after a
// commit that deleted objects waits for their destruction (an RCU grace
// period, ~10 ms); a caller with other slow kernel work to do closes it
// after that work, and the wait has passed by then.
Status NftApply(NftFamily family, const std::string& table, const std::vector<NftChange>& changes,
                UniqueFd* keep = nullptr);

// Whether `table` exists.
Result<bool> NftTableExists(NftFamily family, const std::string& table);

// Whether `table`/`set` holds an element with exactly `key` (a plain,
// non-interval set): one request, no dump. A missing table, set or element
// is false.
Result<bool> NftElementExists(NftFamily family, const std::string& table, const std::string& set,
                              const std::string& key);

// Every element of `table`/`set`. A missing table or set yields an empty
// list. A dump a concurrent commit interrupts is read again
// (RetryInterruptedNftDump).
Result<std::vector<NftElement>> NftElements(NftFamily family, const std::string& table, const std::string& set);

}  // namespace weft::sys
