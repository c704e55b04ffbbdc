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

#include <string>
#include <vector>

#include "sys/nft_types.h"

namespace weft::sys::nft {

class Kernel : public Backend {
 public:
  Status Apply(const Transaction& tx) override;
  Result<TableState> Dump(Family family, const std::string& table) override;
  // Only the table's named counters (a metrics scrape: no sets, elements
  // or rules read); NotFound when the table does not exist.
  Result<std::vector<NamedCounter>> Counters(Family family, const std::string& table);
};

}  // namespace weft::sys::nft
