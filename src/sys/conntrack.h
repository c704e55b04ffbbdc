#pragma once
// Conntrack entries over ctnetlink, in the calling thread's network namespace,
// through libnetfilter_conntrack (the netfilter project's library, what the
// `conntrack` tool itself is built on) over a libmnl socket: weftd's
// NetworkPolicy controller marks the established connections of addresses
// whose allowed traffic shrank, so their next packets are judged again. One
// table dump per family and one update per matching entry, where exec'ing
// `conntrack -U` three times per address walked the whole table each time and
// cost a process start. The library decodes every dumped entry and encodes
// every update (nfct_nlmsg_parse, nfct_nlmsg_build); this file only decides
// which entries to update, and batches the updates.
//
// Library weft_netfilter (src/sys/CMakeLists.txt), apart from weft_sys: the
// static CNI plugin links weft_sys, and Debian ships no static
// libnetfilter_conntrack.

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

struct nf_conntrack;
struct nlmsghdr;

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
  std::set<std::string, std::less<>> v4, v6;
  bool wants4() const { return all4 || !v4.empty(); }
  bool wants6() const { return all6 || !v6.empty(); }
};
Result<CtAddrFilter> ParseCtAddrs(const std::vector<std::string>& addrs);

// A conntrack entry as libnetfilter_conntrack holds it (nfct_new, nfct_get_attr ...).
struct CtFree {
  void operator()(nf_conntrack* ct) const;
};
using CtEntry = std::unique_ptr<nf_conntrack, CtFree>;

// IPCTNL_MSG_CT_GET dump of one family's entries.
std::string CtDumpRequest(uint8_t family, uint32_t seq);
// One entry of a dump (a whole netlink message), decoded by the library;
// null if it is no conntrack entry or lacks its original tuple.
CtEntry ParseCtEntry(const nlmsghdr* h);
// Whether `e` is one ConntrackSetMark updates for `f`.
bool CtEntryMatches(const nf_conntrack& e, const CtAddrFilter& f);
// IPCTNL_MSG_CT_NEW without NLM_F_CREATE (an update of the entry its
// original tuple and zone name, both encoded by the library from `e`'s):
// CTA_MARK `mark` under CTA_MARK_MASK `mark`, so the kernel sets
// mark = (old & ~mark) ^ mark = old | mark. Appended to `out`.
void CtMarkRequest(const nf_conntrack& e, uint32_t mark, uint32_t seq, std::string* out);

}  // namespace weft::sys
