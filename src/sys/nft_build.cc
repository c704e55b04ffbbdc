#include "sys/nft_build.h"

#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <net/if.h>

#include "sys/nft_udata.h"

namespace weft::sys::nft {

std::string Be16(uint16_t v) {
  const uint16_t be = htons(v);
  return std::string(reinterpret_cast<const char*>(&be), sizeof be);
}

std::string U8(uint8_t v) { return std::string(1, static_cast<char>(v)); }

std::string Host32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }

std::string IfnameBytes(const std::string& name) {
  std::string f = name;
  f.resize(IFNAMSIZ, '\0');
  return f;
}

std::string AddrBytes(const std::string& text) {
  in6_addr a6{};
  if (inet_pton(AF_INET6, text.c_str(), &a6) == 1) return std::string(reinterpret_cast<const char*>(&a6), sizeof a6);
  in_addr a4{};
  if (inet_pton(AF_INET, text.c_str(), &a4) == 1) return std::string(reinterpret_cast<const char*>(&a4), sizeof a4);
  return "";
}

std::vector<Expr> MatchNfproto(uint8_t nfproto) {
  return {Meta{NFT_META_NFPROTO, NFT_REG_1}, Cmp{NFT_CMP_EQ, U8(nfproto), NFT_REG_1}};
}

std::vector<Expr> MatchL4proto(uint8_t proto) {
  return {Meta{NFT_META_L4PROTO, NFT_REG_1}, Cmp{NFT_CMP_EQ, U8(proto), NFT_REG_1}};
}

std::vector<Expr> Then(std::vector<Expr> a, const std::vector<Expr>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Set Icmpv6TypeSet(const std::string& name) {
  return Set{.name = name,
             .flags = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT,
             .key_type = kTypeIcmp6Type,
             .key_len = 1,
             .userdata = TypeofSetUserdata(ByteOrder::kBig, TypeofIcmpv6Type())};
}

Elements Icmpv6TypeElements(const std::string& name, const std::vector<uint8_t>& types) {
  Elements out{name, {}};
  for (uint8_t t : types) out.elems.push_back(Element{.key = U8(t)});
  return out;
}

std::vector<Expr> MatchIifEther() {
  const uint16_t ether = 1;  // ARPHRD_ETHER, host order
  return {Meta{NFT_META_IIFTYPE, NFT_REG_1}, Cmp{NFT_CMP_EQ, std::string(reinterpret_cast<const char*>(&ether), 2), NFT_REG_1}};
}

namespace {
// The address after `a` (big-endian bytes; all ones wraps to "": no end).
std::string Next(std::string a) {
  for (size_t i = a.size(); i-- > 0;) {
    if (static_cast<unsigned char>(a[i]) != 0xff) {
      a[i] = static_cast<char>(static_cast<unsigned char>(a[i]) + 1);
      return a;
    }
    a[i] = 0;
  }
  return "";
}
}  // namespace

std::vector<Element> IntervalRangeElements(const std::vector<std::pair<std::string, std::string>>& ranges) {
  std::vector<Element> out;
  if (!ranges.empty()) {
    const std::string zero(ranges[0].first.size(), '\0');
    if (ranges[0].first != zero) out.push_back({.key = zero, .flags = NFT_SET_ELEM_INTERVAL_END});
  }
  for (const auto& [first, last] : ranges) {
    out.push_back({.key = first});
    std::string end = Next(last);
    if (!end.empty()) out.push_back({.key = std::move(end), .flags = NFT_SET_ELEM_INTERVAL_END});
  }
  return out;
}

std::vector<Element> IntervalElements(const std::vector<IpPrefix>& prefixes) {
  std::vector<std::pair<std::string, std::string>> ranges;
  ranges.reserve(prefixes.size());
  for (const auto& p : prefixes) ranges.emplace_back(p.Masked().addr().ToBytes(), p.Last().ToBytes());
  return IntervalRangeElements(ranges);
}

}  // namespace weft::sys::nft
