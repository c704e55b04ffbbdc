#pragma once
// The typed objects of sys/nft_types.h to and from nfnetlink messages,
// through libnftnl (the netfilter project's own encoding, what nft sends):
// no attribute is written or read by hand here. Pure: no socket, so the
// encode -> decode round trip and the dump decoding are unit-tested and
// fuzzed (tests/fuzz/fuzz_nft_dump.cc).

#include <linux/netlink.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sys/nft_types.h"

namespace weft::sys::nft {

// One message of a batch and the op (index into tx.ops()) it carries out;
// one op may take several messages (elements in chunks).
struct Message {
  std::string bytes;
  size_t op = 0;
};

// The messages of `tx`'s ops, numbered from `first_seq` on (each message
// its own seq), without the batch's begin and end. An op that cannot be
// expressed (a Rule flushed, a rule without a chain, a jump without its
// chain, a comparison or immediate of no bytes, an element without a key)
// is an InvalidArgument error naming it.
Result<std::vector<Message>> EncodeOps(const Transaction& tx, uint32_t first_seq);

// nft's words for op `i` of `tx` (sys/nft_render.h), what errors name:
// elements are rendered with the types of the sets `tx` declares before
// it, else of `known` (the table's sets), else as bytes.
std::string DescribeOp(const Transaction& tx, size_t i, const std::vector<Set>& known = {});

// Decodes one message of a dump (or a request: the layout is the same):
// NEWTABLE, NEWCHAIN, NEWRULE, NEWSET, NEWSETELEM or NEWOBJ (counters) of
// any table, into `into` (its family and table set from the first). Other
// message types are skipped. A message libnftnl cannot parse, or an
// expression this layer has no type for, is a Malformed error. With
// !rule_exprs a rule is read without its expressions (its chain, handle and
// comment), so a rule of any table reads.
Status DecodeMessage(const nlmsghdr* nlh, TableState* into, bool rule_exprs = true);

// A request message as the kernel's dump would carry it: libnftnl numbers
// the elements of a request 1, 2, 3 ... (the kernel ignores the nest types)
// but its parser takes only NFTA_LIST_ELEM, which dumps carry. For tests
// and the fuzz target, which decode what the encoder wrote.
std::string AsDumped(std::string request);

// Every message in `buf` (a datagram's worth) decoded in order; stops at
// the first malformed one.
Status DecodeMessages(const char* buf, size_t len, TableState* into);

}  // namespace weft::sys::nft
