#pragma once
// The one raw nfnetlink piece left in src/sys: an attribute walker for
// kernel_events.cc's reading of nf_tables notifications. Everything else
// netfilter goes through the netfilter project's libraries: nftables through
// libnftnl (sys/nft_kernel.h), conntrack through libnetfilter_conntrack
// (sys/conntrack.h), NFLOG through libnetfilter_log (sys/nflog.h).

#include <linux/netlink.h>

#include <cstdint>
#include <cstring>

namespace weft::sys {

// The attributes of a message (after its nfgenmsg) or of a nest: f(type
// without flag bits, payload, payload length). Stops at a malformed one.
template <typename F>
void ForEachNfAttr(const char* p, size_t len, F f) {
  while (len >= NLA_HDRLEN) {
    nlattr a;
    std::memcpy(&a, p, sizeof a);
    if (a.nla_len < NLA_HDRLEN || a.nla_len > len) return;
    f(static_cast<uint16_t>(a.nla_type & NLA_TYPE_MASK), p + NLA_HDRLEN, static_cast<size_t>(a.nla_len - NLA_HDRLEN));
    size_t step = NLA_ALIGN(a.nla_len);
    if (step >= len) return;
    p += step;
    len -= step;
  }
}

}  // namespace weft::sys
