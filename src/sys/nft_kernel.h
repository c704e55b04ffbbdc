#pragma once
// The kernel as an nft::Backend (sys/nft_types.h): a Transaction sent as one
// nfnetlink batch over a libmnl socket (one kernel transaction, all or
// nothing), and a table read back with one dump per object kind, decoded
// by sys/nft_codec.h. Each call opens its own NETLINK_NETFILTER socket in
// the calling thread's network namespace (run it under sys::RunInNetns for
// another); thread-compatible, no state between calls.
//
// A failed batch names its failing op: every message has its own seq, the
// kernel answers each failing one with its seq (whatever the batch size:
// only the last message asks for an acknowledgement, so thousands of
// messages cannot overflow the socket with answers), and the first error
// is reported as OpError("<the op's nft command>", errno, the kernel's
// extended-ack message). Later errors of the same batch are often echoes
// of the first (a chain a failed op should have created) and are counted
// in the details.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "sys/nft_types.h"

namespace weft::sys::nft {

class Kernel : public Backend {
 public:
  Status Apply(const Transaction& tx) override;
  // With `keep`, a duplicate of the socket is left there instead of the
  // socket closed: closing an nfnetlink socket right after a commit that
  // deleted objects waits for their destruction (an RCU grace period,
  // ~10 ms); a caller with other slow kernel work closes it after that.
  // `sending` (optional) is told the socket's netlink port id before the
  // batch is sent: the nftables notifications of the commit carry it
  // (sys/kernel_events.h, KernelEvent::portid), and may be read by another
  // thread before Apply returns.
  Status Apply(const Transaction& tx, UniqueFd* keep, const std::function<void(uint32_t portid)>& sending = {});
  Result<TableState> Dump(Family family, const std::string& table) override;
  // Only the table's named counters (a metrics scrape: no sets, elements
  // or rules read); NotFound when the table does not exist.
  Result<std::vector<NamedCounter>> Counters(Family family, const std::string& table);

  // Narrow reads, one request each (the plugin's checks). Absent is the
  // kernel's ENOENT (NotFound) unless said otherwise.
  // Whether the table exists (absent: false).
  Result<bool> TableExists(Family family, const std::string& table);
  // The table's chains, hooks and all.
  Result<std::vector<Chain>> Chains(Family family, const std::string& table);
  // The rules of the table (only `chain`'s when it is not empty) without
  // their expressions: chain, handle and comment, so a rule of any table
  // reads.
  Result<std::vector<Rule>> RuleHeads(Family family, const std::string& table, const std::string& chain = "");
  // Every element of one set.
  Result<std::vector<Element>> SetElements(Family family, const std::string& table, const std::string& set);
  // Whether a plain (non-interval) set holds exactly `key`: one request, no
  // dump (absent table, set or element: false).
  Result<bool> HasElement(Family family, const std::string& table, const std::string& set, const std::string& key);
};

}  // namespace weft::sys::nft
