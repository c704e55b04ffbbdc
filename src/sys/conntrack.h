#pragma once
// Conntrack entries over ctnetlink, in the calling thread's network namespace,
// through libnetfilter_conntrack (the netfilter project's library, what the
// `conntrack` tool itself is built on) over a libmnl socket: weftd's
// NetworkPolicy controller marks the established connections of addresses
// whose allowed traffic shrank, so their next packets are judged again
// (ConntrackSetMark), and the Service proxy deletes the UDP entries a change
// left wrong (ConntrackDelete). One table dump per family and one update or
// delete per matching entry, where exec'ing `conntrack -U` three times per
// address walked the whole table each time and cost a process start. The
// library decodes every dumped entry and encodes every request
// (nfct_nlmsg_parse, nfct_nlmsg_build); this file only decides which entries
// to change, and batches the requests.
//
// Library weft_netfilter (src/sys/CMakeLists.txt), apart from weft_sys: the
// static CNI plugin links weft_sys, and Debian ships no static
// libnetfilter_conntrack.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
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

// Which entries ConntrackDelete deletes: those of `family` (AF_INET or
// AF_INET6) and layer-4 protocol `l4proto` (IPPROTO_UDP ...) whose original
// destination is `orig_dst` (an address as text; none: any) and port
// `orig_dport` (host order; 0: any), and, when `reply_src` is given, whose
// reply comes from `reply_src` (an endpoint a DNAT sent them to) and port
// `reply_sport` (0: any). What `conntrack -D -f F -p P [--orig-dst A]
// [--dport N] [--reply-src E [--reply-port-src M]]` deletes, and kube-proxy's
// filters for its cleanup: a Service address and port (ClearEntriesForIP),
// a NodePort on any address (ClearEntriesForPort), and either of those
// DNATed to one endpoint (ClearEntriesForNAT, ClearEntriesForPortNAT).
struct CtDeleteFilter {
  uint8_t family = 0;
  uint8_t l4proto = 0;
  std::optional<std::string> orig_dst;
  uint16_t orig_dport = 0;
  std::optional<std::string> reply_src;
  uint16_t reply_sport = 0;
};

// Deletes every conntrack entry, of any zone, that one of `filters` names,
// in one dump per family named (all filters matched against each entry) and
// one delete per matching entry, batched. An entry that goes away meanwhile
// (ENOENT) is no error and not counted. Returns how many were deleted.
// A malformed filter is kInvalidArgument and nothing is deleted: an
// address that does not parse or is not of the filter's family, a family
// other than AF_INET or AF_INET6, no l4proto, a port with a protocol that
// has none, or a filter that names no destination, port nor reply source
// (it would delete every entry of its protocol).
Result<size_t> ConntrackDelete(const std::vector<CtDeleteFilter>& filters);

// ---- The pieces of ConntrackSetMark and ConntrackDelete, exposed for tests (no root). ----

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

// ConntrackDelete's filters, parsed: addresses as raw bytes, indexed by
// family, protocol and original destination port, so an entry is checked
// against the filters of its own port (and those of any port) only.
class CtDeleteSet {
 public:
  static Result<CtDeleteSet> Parse(const std::vector<CtDeleteFilter>& filters);
  bool wants(uint8_t family) const;
  // Whether one of the filters names `e`.
  bool Matches(const nf_conntrack& e) const;

 private:
  struct Match {
    std::string orig_dst;  // raw (4 or 16 bytes); "" = any
    std::string reply_src;  // raw; "" = any
    uint16_t reply_sport = 0;  // host order; 0 = any
  };
  // (family, l4proto, orig_dport; 0 = any port) -> the filters.
  std::map<std::tuple<uint8_t, uint8_t, uint16_t>, std::vector<Match>> by_key_;
};
// What the kernel answered to a datagram of requests sent without NLM_F_ACK
// (`buf`, `n` bytes: its NLMSG_ERROR messages): how many named an entry that
// had gone (ENOENT), and the first other errno (0: none; the walk stops there).
struct CtErrors {
  size_t gone = 0;
  int err = 0;
};
CtErrors CtErrorsOf(const char* buf, size_t n);
// IPCTNL_MSG_CT_DELETE of the entry `e`'s original tuple and zone name (the
// tuple and zones encoded by the library from `e`'s, nothing else), without
// NLM_F_ACK: only errors come back. Appended to `out`.
void CtDeleteRequest(const nf_conntrack& e, uint32_t seq, std::string* out);

}  // namespace weft::sys
