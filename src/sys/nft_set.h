#pragma once
// nftables over raw nfnetlink: one batch (one kernel transaction, all or
// nothing) of element additions and deletions, netdev ingress chains and
// their rules (added, flushed, deleted: the source guard's per-port chains,
// built from the typed NftRule pieces below), a table deletion; and lookups
// of a table, an element and a set's elements. This is what lets a plugin
// ADD or DEL change only its own hostPort entries in tens of microseconds,
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
#include "sys/nft_types.h"

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

// One expression of a rule, in the kernel's terms (data goes through
// register 1). Build rules from the matches below rather than by hand.
struct NftExpr {
  enum Kind { kMeta, kPayload, kCmp, kVerdict } kind = kVerdict;
  uint32_t key = 0;                        // kMeta: NFT_META_*
  uint32_t base = 0, offset = 0, len = 0;  // kPayload: NFT_PAYLOAD_*_HEADER, offset and length in bytes
  bool equal = true;                       // kCmp: == (else !=)
  std::string data;                        // kCmp: the bytes compared with the register
  int32_t verdict = 0;                     // kVerdict: NF_ACCEPT, NFT_GOTO, ...
  std::string chain;                       // kVerdict: a goto's or jump's target
  bool operator==(const NftExpr&) const = default;
};
using NftRule = std::vector<NftExpr>;

enum class NftHeader { kLink, kNetwork, kTransport };
// `meta protocol` (the frame's EtherType) == `ethertype`.
NftRule NftMatchProtocol(uint16_t ethertype);
// `meta l4proto` (the transport protocol, after IPv6 extension headers)
// == or != `proto`.
NftRule NftMatchL4Proto(uint8_t proto, bool equal);
// The `bytes.size()` bytes at `offset` of `header` == or != `bytes`.
NftRule NftMatchPayload(NftHeader header, uint32_t offset, const std::string& bytes, bool equal);
NftRule NftAccept();
NftRule NftGoto(const std::string& chain);
// `a` then `b`: a rule is its expressions in order.
NftRule operator+(NftRule a, const NftRule& b);
// nft's words for `rule` ("meta protocol == 0x0800 ..."), for messages and tests.
std::string DescribeNftRule(const NftRule& rule);

struct NftChange {
  // kDestroyElement deletes an element and is no error when the element is
  // absent (NFT_MSG_DESTROYSETELEM, Linux 6.3+); the table and set must exist.
  // kAddIngressChain: a netdev base chain `chain` on `device`'s ingress
  // hook at `priority`, policy accept (an existing one is kept, rules and
  // all). kFlushChain deletes `chain`'s rules, kAddRule appends `rule` to
  // it, kDeleteChain deletes it with its rules (ENOENT when it is absent),
  // kDestroyChain the same but is no error when it is absent
  // (NFT_MSG_DESTROYCHAIN, Linux 6.3+).
  enum Op {
    kAddElement,
    kDeleteElement,
    kDestroyElement,
    kDeleteTable,
    kAddIngressChain,
    kFlushChain,
    kAddRule,
    kDeleteChain,
    kDestroyChain,
  } op = kAddElement;
  NftElement elem;     // the element ops'
  std::string chain;   // the chain and rule ops'
  std::string device;  // kAddIngressChain
  int32_t priority = 0;
  NftRule rule;  // kAddRule
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
// The typed transaction (sys/nft_types.h) NftApply sends for `changes`:
// runs of element changes to one set become one op.
nft::Transaction NftTransaction(NftFamily family, const std::string& table, const std::vector<NftChange>& changes);

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
