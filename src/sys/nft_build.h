#pragma once
// Helpers for building sys/nft_types.h objects: the bytes of data in the
// kernel's layout and the matches nft writes as dependencies. Pure.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/ip.h"
#include "sys/nft_types.h"

namespace weft::sys::nft {

// 16 bits in network order (ports, EtherTypes).
std::string Be16(uint16_t v);
// One byte (an nfproto, a transport protocol).
std::string U8(uint8_t v);
// 32 bits in host order (marks, ct state bits, numgen values).
std::string Host32(uint32_t v);
// An interface name as the kernel compares it: NUL-padded to IFNAMSIZ.
std::string IfnameBytes(const std::string& name);
// The address `text` in network order; "" when it is not one.
std::string AddrBytes(const std::string& text);

// `meta nfproto <p>` (NFPROTO_IPV4/IPV6): what `ip saddr` needs in an inet table.
std::vector<Expr> MatchNfproto(uint8_t nfproto);
// `meta l4proto <p>` (IPPROTO_*): what `udp dport` needs.
std::vector<Expr> MatchL4proto(uint8_t proto);
// `meta iiftype ether` (ARPHRD_ETHER): what an ether field needs in a
// family without a link layer of its own (netdev, inet).
std::vector<Expr> MatchIifEther();
// a then b.
std::vector<Expr> Then(std::vector<Expr> a, const std::vector<Expr>& b);
inline std::vector<Expr> operator+(std::vector<Expr> a, const std::vector<Expr>& b) { return Then(std::move(a), b); }

// `icmpv6 type { ... }` in a rule: the anonymous constant set `name` (a
// transaction's "__set..." name) as nft declares it, and its elements.
Set Icmpv6TypeSet(const std::string& name);
Elements Icmpv6TypeElements(const std::string& name, const std::vector<uint8_t>& types);

// The elements of a one-field interval set holding `prefixes` (one family,
// sorted, none inside another), as nft 1.0.6 sends them for a set it
// creates: the family's first address flagged as an end
// (NFT_SET_ELEM_INTERVAL_END) when no range starts there, then each
// range's first address and the address after its last flagged as the
// range's end (none when the range runs to the family's last address).
std::vector<Element> IntervalElements(const std::vector<IpPrefix>& prefixes);
// The same for ranges, each its first and last address's bytes (one
// family, sorted, none overlapping or adjacent).
std::vector<Element> IntervalRangeElements(const std::vector<std::pair<std::string, std::string>>& ranges);

}  // namespace weft::sys::nft
