#pragma once
// Conntrack entries over ctnetlink (NETLINK_NETFILTER, NFNL_SUBSYS_CTNETLINK),
// in the calling thread's network namespace: weftd's NetworkPolicy
// controller marks the established connections of addresses whose allowed
// traffic shrank, so their next packets are judged again. One table dump per
// family and one update per matching entry, where exec'ing `conntrack -U`
// three times per address walked the whole table each time and cost a
// process start.

#include <linux/netlink.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace weft::sys {

// Sets the bits of `mark` (mark |= `mark`, the other bits kept) on every
// conntrack entry, of any zone, whose original source, original destination
// or reply source (a pod behind a Service's DNAT) is one of `addrs`:
// "0.0.0.0/0" or "::/0" stands for every entry of that family. What
// `conntrack -U -f ipv4|ipv6 {-s|-d|--reply-src} ADDR -m MARK/MARK` did for
// each address. Entries that already carry the bits are left alone; an entry
// that goes away meanwhile is no error. Returns how many updates it sent.
// A malformed address is kInvalidArgument (and nothing is changed).
Result<size_t> ConntrackSetMark(const std::vector<std::string>& addrs, uint32_t mark);

// ---- The pieces of ConntrackSetMark, exposed for tests (no root). ----

// The addresses to match, as raw bytes (4 or 16), per family.
struct CtAddrFilter {
  bool all4 = false, all6 = false;
  std::set<std::string> v4, v6;
  bool wants4() const { return all4 || !v4.empty(); }
  bool wants6() const { return all6 || !v6.empty(); }
};
Result<CtAddrFilter> ParseCtAddrs(const std::vector<std::string>& addrs);

// What an update needs of a dumped entry.
struct CtEntry {
  uint8_t family = 0;         // AF_INET or AF_INET6
  std::string orig_tuple;     // the CTA_TUPLE_ORIG attribute, header included, as dumped
  std::string zone;           // the CTA_ZONE attribute, header included ("" for the default zone)
  std::string orig_src, orig_dst, reply_src;  // raw address bytes
  uint32_t mark = 0;
};

// IPCTNL_MSG_CT_GET dump of one family's entries.
std::string CtDumpRequest(uint8_t family, uint32_t seq);
// One entry of a dump (a whole netlink message); nullopt if it is no
// conntrack entry or lacks its original tuple.
std::optional<CtEntry> ParseCtEntry(const nlmsghdr* h);
// Whether `e` is one ConntrackSetMark updates for `f`.
bool CtEntryMatches(const CtEntry& e, const CtAddrFilter& f);
// IPCTNL_MSG_CT_NEW without NLM_F_CREATE (an update of the entry the
// original tuple and zone name): CTA_MARK `mark` under CTA_MARK_MASK `mark`,
// so the kernel sets mark = (old & ~mark) ^ mark = old | mark.
std::string CtMarkRequest(const CtEntry& e, uint32_t mark, uint32_t seq);

}  // namespace weft::sys
