#include "overlay/filter.h"

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include <cstdio>
#include <cstring>

#include "base/strings.h"
#include "sys/nft_build.h"
#include "sys/nft_render.h"
#include "sys/nft_udata.h"

namespace weft::overlay {
namespace {

// Offsets from the outer UDP header: UDP 8 + VXLAN 8 bytes, then the inner
// Ethernet header (its type at 12), then the inner IP header.
constexpr int kInnerEthertypeBit = (8 + 8 + 12) * 8;      // 224
constexpr int kInnerIpv4SaddrBit = (8 + 8 + 14 + 12) * 8;  // 336
constexpr int kInnerIpv6SaddrBit = (8 + 8 + 14 + 8) * 8;   // 304

std::string SetName(bool peer_v6, bool pods_v6) {
  return std::string(peer_v6 ? "peer6" : "peer4") + (pods_v6 ? "-pod6" : "-pod4");
}

std::string Bytes(const IpAddress& a) { return a.ToBytes(); }
std::string LastBytes(const IpPrefix& p) { return p.Last().ToBytes(); }

}  // namespace

std::vector<std::string> FilterSets() {
  std::vector<std::string> v = {"peers4", "peers6"};
  for (bool peer_v6 : {false, true})
    for (bool pods_v6 : {false, true}) v.push_back(SetName(peer_v6, pods_v6));
  return v;
}

sys::NftElement FilterElement(const FilterEntry& e) {
  if (!e.pods) return {e.peer.is_v6() ? "peers6" : "peers4", Bytes(e.peer), "", "", 0};
  const IpPrefix p = e.pods->Masked();
  return {SetName(e.peer.is_v6(), !p.is_v4()), Bytes(e.peer) + Bytes(p.addr()), Bytes(e.peer) + LastBytes(p), "", 0};
}

namespace {

std::string Pad4(std::string b) {
  b.resize((b.size() + 3) / 4 * 4, '\0');
  return b;
}
std::string Ifname(const std::string& n) {
  std::string f = n;
  f.resize(16, '\0');
  return f;
}
std::string MacBytes(const std::string& mac) {
  unsigned v[6];
  if (std::sscanf(mac.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return "";
  std::string b;
  for (unsigned x : v) b.push_back(static_cast<char>(x));
  return b;
}
// The prefix [first, last] spans, or nullopt.
std::optional<IpPrefix> PrefixOf(const std::string& first, const std::string& last, bool v6) {
  const size_t n = v6 ? 16 : 4;
  if (first.size() != n || last.size() != n) return std::nullopt;
  int len = 0;
  for (size_t i = 0; i < n * 8; ++i) {
    if (((static_cast<uint8_t>(first[i / 8]) ^ static_cast<uint8_t>(last[i / 8])) >> (7 - i % 8)) & 1) break;
    ++len;
  }
  IpPrefix p(IpAddress::FromBytes(v6, reinterpret_cast<const uint8_t*>(first.data())), len);
  if (Bytes(p.Masked().addr()) != first || LastBytes(p) != last) return std::nullopt;
  return p;
}

}  // namespace

std::vector<std::string> HostGwSets() { return {"pods4-on", "pods6-on", "gw4", "gw6"}; }

sys::NftElement HostGwElement(const HostGwEntry& e) {
  const IpPrefix p = e.pods.Masked();
  const bool v6 = !p.is_v4();
  if (e.mac.empty())
    return {v6 ? "pods6-on" : "pods4-on", Bytes(p.addr()) + Ifname(e.iface), LastBytes(p) + Ifname(e.iface), "", 0};
  return {v6 ? "gw6" : "gw4", Bytes(p.addr()) + Pad4(MacBytes(e.mac)), LastBytes(p) + Pad4(MacBytes(e.mac)), "", 0};
}

std::optional<HostGwEntry> ParseHostGwElement(const sys::NftElement& el) {
  const bool v6 = el.set == "pods6-on" || el.set == "gw6";
  const size_t n = v6 ? 16 : 4;
  if (el.set == "pods4-on" || el.set == "pods6-on") {
    if (el.key.size() != n + 16 || el.key_end.size() != n + 16 || el.key.compare(n, 16, el.key_end, n, 16) != 0)
      return std::nullopt;
    auto p = PrefixOf(el.key.substr(0, n), el.key_end.substr(0, n), v6);
    if (!p) return std::nullopt;
    std::string iface = el.key.substr(n, 16);
    iface.resize(std::strlen(iface.c_str()));
    return HostGwEntry{*p, iface, ""};
  }
  if (el.set == "gw4" || el.set == "gw6") {
    if (el.key.size() != n + 8 || el.key_end.size() != n + 8 || el.key.compare(n, 8, el.key_end, n, 8) != 0)
      return std::nullopt;
    auto p = PrefixOf(el.key.substr(0, n), el.key_end.substr(0, n), v6);
    if (!p) return std::nullopt;
    const auto* m = reinterpret_cast<const uint8_t*>(el.key.data() + n);
    return HostGwEntry{*p, "", FormatMac(m)};
  }
  return std::nullopt;
}

std::optional<FilterEntry> ParseFilterElement(const sys::NftElement& el) {
  auto addr = [](const std::string& b, size_t at, bool v6) {
    return IpAddress::FromBytes(v6, reinterpret_cast<const uint8_t*>(b.data() + at));
  };
  if (el.set == "peers4" || el.set == "peers6") {
    const bool v6 = el.set == "peers6";
    if (el.key.size() != (v6 ? 16u : 4u)) return std::nullopt;
    return FilterEntry{addr(el.key, 0, v6), std::nullopt};
  }
  for (bool peer_v6 : {false, true})
    for (bool pods_v6 : {false, true}) {
      if (el.set != SetName(peer_v6, pods_v6)) continue;
      const size_t pn = peer_v6 ? 16 : 4, n = pods_v6 ? 16 : 4;
      if (el.key.size() != pn + n || el.key_end.size() != pn + n || el.key.compare(0, pn, el.key_end, 0, pn) != 0)
        return std::nullopt;
      // The prefix length: the leading bits first and last share, provided
      // the rest of first is 0s and of last 1s (else it is no prefix).
      int len = 0;
      for (size_t i = 0; i < n * 8; ++i) {
        const auto a = static_cast<uint8_t>(el.key[pn + i / 8]), b = static_cast<uint8_t>(el.key_end[pn + i / 8]);
        if (((a ^ b) >> (7 - i % 8)) & 1) break;
        ++len;
      }
      IpPrefix p(addr(el.key, pn, pods_v6), len);
      if (Bytes(p.Masked().addr()) != el.key.substr(pn) || LastBytes(p) != el.key_end.substr(pn)) return std::nullopt;
      return FilterEntry{addr(el.key, 0, peer_v6), p};
    }
  return std::nullopt;
}

std::string RenderOverlayFilterMetrics(const OverlayFilterCounters& c) {
  std::string out;
  out += "# HELP weft_overlay_filter_installed 1 when the overlay's admission filter (table inet weft-overlay) is "
         "in the kernel.\n# TYPE weft_overlay_filter_installed gauge\n";
  out += "weft_overlay_filter_installed " + std::string(c.installed ? "1" : "0") + "\n";
  out += "# HELP weft_overlay_filter_dropped_packets_total VXLAN packets the overlay filter dropped: from an "
         "address that is no peer's (unknown_peer), or carrying a source outside the sending peer's pod CIDRs "
         "(foreign_source); host-gw packets from the uplink whose pod source is not bound to the sender's MAC "
         "(hostgw_foreign_source).\n# TYPE weft_overlay_filter_dropped_packets_total counter\n";
  out += "weft_overlay_filter_dropped_packets_total{reason=\"unknown_peer\"} " + std::to_string(c.unknown_peer) + "\n";
  out += "weft_overlay_filter_dropped_packets_total{reason=\"foreign_source\"} " + std::to_string(c.foreign_source) +
         "\n";
  out += "weft_overlay_filter_dropped_packets_total{reason=\"hostgw_foreign_source\"} " +
         std::to_string(c.hostgw_foreign_source) + "\n";
  return out;
}

// The filter as typed objects (sys/nft_types.h), what weftd applies.
namespace {

namespace nft = sys::nft;

// Offsets in bytes from the outer UDP header (the bit offsets above / 8).
constexpr uint32_t kInnerEthertype = kInnerEthertypeBit / 8;  // 28
constexpr uint32_t kInnerIpv4Saddr = kInnerIpv4SaddrBit / 8;  // 42
constexpr uint32_t kInnerIpv6Saddr = kInnerIpv6SaddrBit / 8;  // 38
constexpr uint8_t kNfprotoIpv4 = 2, kNfprotoIpv6 = 10, kIpprotoUdp = 17;

// The load of `ip saddr` / `ip6 saddr` into `reg`.
nft::Payload SaddrLoad(bool v6, uint32_t reg) {
  return nft::Payload{NFT_PAYLOAD_NETWORK_HEADER, v6 ? 8u : 12u, v6 ? 16u : 4u, reg};
}
// `ip saddr` / `ip6 saddr` into `reg`, its nfproto match first.
std::vector<nft::Expr> Saddr(bool v6, uint32_t reg) {
  return nft::Then(nft::MatchNfproto(v6 ? kNfprotoIpv6 : kNfprotoIpv4), {SaddrLoad(v6, reg)});
}
// The register after a first field of `v6`'s size in a concatenation.
uint32_t Second(bool v6) { return v6 ? NFT_REG_2 : NFT_REG32_01; }

nft::Set ConcatSet(const std::string& name, std::vector<nft::DataType> types, std::vector<uint32_t> fields,
                   const std::vector<nft::TypeofField>& typeof_fields) {
  uint32_t len = 0;
  for (uint32_t f : fields) len += (f + 3) / 4 * 4;
  nft::Set s{name, NFT_SET_INTERVAL | NFT_SET_CONCAT, nft::ConcatType(types), len, 0, 0, std::move(fields)};
  s.userdata = nft::ConcatSetUserdata(typeof_fields);
  return s;
}

nft::Transaction Build(int port, const std::string& marker) {
  nft::Transaction tx(nft::Family::kInet, kOverlayTable);
  tx.Add(nft::Table{kOverlayTable});
  for (const char* c : {kUnknownPeerCounter, kForeignSourceCounter, kHostGwForeignCounter}) tx.Add(nft::NamedCounter{c});
  tx.Add(ConcatSet("pods4-on", {nft::kTypeIpv4, nft::kTypeIfname}, {4, 16}, {}));
  tx.Add(ConcatSet("pods6-on", {nft::kTypeIpv6, nft::kTypeIfname}, {16, 16}, {}));
  tx.Add(ConcatSet("gw4", {nft::kTypeIpv4, nft::kTypeEther}, {4, 6}, {}));
  tx.Add(ConcatSet("gw6", {nft::kTypeIpv6, nft::kTypeEther}, {16, 6}, {}));
  for (bool v6 : {false, true}) {
    nft::Set s{v6 ? "peers6" : "peers4", 0, v6 ? nft::kTypeIpv6 : nft::kTypeIpv4, v6 ? 16u : 4u};
    s.userdata = nft::SetUserdata(nft::ByteOrder::kBig);
    tx.Add(s);
  }
  for (bool peer_v6 : {false, true})
    for (bool pods_v6 : {false, true})
      tx.Add(ConcatSet(SetName(peer_v6, pods_v6), {peer_v6 ? nft::kTypeIpv6 : nft::kTypeIpv4, nft::kTypeInteger},
                       {peer_v6 ? 16u : 4u, pods_v6 ? 16u : 4u},
                       {peer_v6 ? nft::TypeofIp6Saddr() : nft::TypeofIpSaddr(),
                        nft::TypeofRaw(3, pods_v6 ? kInnerIpv6SaddrBit : kInnerIpv4SaddrBit, pods_v6 ? 128 : 32)}));
  tx.Add(nft::Chain{"vxlan", std::nullopt});
  tx.Add(nft::Chain{"input", nft::Hook{NF_INET_LOCAL_IN, -10, "filter", "", NF_ACCEPT}});
  tx.Add(nft::Chain{"hostgw", nft::Hook{NF_INET_PRE_ROUTING, -300, "filter", "", NF_ACCEPT}});
  for (const char* c : {"vxlan", "input", "hostgw"}) tx.Flush(nft::Chain{c, std::nullopt});

  // hostgw: a pod source on the uplink must come from its owner's MAC.
  for (bool v6 : {false, true}) {
    const std::string n = v6 ? "6" : "4";
    std::vector<nft::Expr> e = Saddr(v6, NFT_REG_1);
    e.push_back(nft::Meta{NFT_META_IIFNAME, Second(v6)});
    e.push_back(nft::Lookup{"pods" + n + "-on", NFT_REG_1});
    e = nft::Then(e, nft::MatchIifEther());
    e = nft::Then(e, {SaddrLoad(v6, NFT_REG_1), nft::Payload{NFT_PAYLOAD_LL_HEADER, 6, 6, Second(v6)},
                      nft::Lookup{"gw" + n, NFT_REG_1, std::nullopt, true}, nft::CounterRef{kHostGwForeignCounter},
                      nft::Verdict{NF_DROP, ""}});
    tx.Add(nft::Rule{"hostgw", e});
  }
  // vxlan: only peers, and only their pods' sources.
  for (bool v6 : {false, true})
    tx.Add(nft::Rule{"vxlan", nft::Then(Saddr(v6, NFT_REG_1), {nft::Lookup{v6 ? "peers6" : "peers4", NFT_REG_1,
                                                                            std::nullopt, true},
                                                               nft::CounterRef{kUnknownPeerCounter},
                                                               nft::Verdict{NF_DROP, ""}})});
  for (bool peer_v6 : {false, true})
    for (bool pods_v6 : {false, true}) {
      std::vector<nft::Expr> e = {nft::Payload{NFT_PAYLOAD_TRANSPORT_HEADER, kInnerEthertype, 2, NFT_REG_1},
                                  nft::Cmp{NFT_CMP_EQ, nft::Be16(pods_v6 ? 0x86dd : 0x0800), NFT_REG_1}};
      e = nft::Then(e, Saddr(peer_v6, NFT_REG_1));
      e.push_back(nft::Payload{NFT_PAYLOAD_TRANSPORT_HEADER, pods_v6 ? kInnerIpv6Saddr : kInnerIpv4Saddr,
                               pods_v6 ? 16u : 4u, Second(peer_v6)});
      e.push_back(nft::Lookup{SetName(peer_v6, pods_v6), NFT_REG_1});
      e.push_back(nft::Verdict{NFT_RETURN, ""});
      tx.Add(nft::Rule{"vxlan", e});
    }
  tx.Add(nft::Rule{"vxlan", {nft::CounterRef{kForeignSourceCounter}, nft::Verdict{NF_DROP, ""}}});
  tx.Add(nft::Rule{"input",
                   nft::Then(nft::MatchL4proto(kIpprotoUdp),
                             {nft::Payload{NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1},
                              nft::Cmp{NFT_CMP_EQ, nft::Be16(static_cast<uint16_t>(port)), NFT_REG_1},
                              nft::Verdict{NFT_JUMP, "vxlan"}}),
                   marker});
  return tx;
}

}  // namespace

std::string OverlayFilterMarker(int port) {
  return "weft-overlay:" + Hex(Fnv1a64(nft::RenderTransaction(Build(port, ""))), 16);
}

sys::nft::Transaction OverlayFilterTransaction(int port) { return Build(port, OverlayFilterMarker(port)); }

OverlayFilterCounters OverlayFilterCountersFrom(const std::vector<sys::nft::NamedCounter>& counters) {
  OverlayFilterCounters out;
  out.installed = true;
  for (const auto& c : counters) {
    if (c.name == kUnknownPeerCounter) out.unknown_peer = c.packets;
    if (c.name == kForeignSourceCounter) out.foreign_source = c.packets;
    if (c.name == kHostGwForeignCounter) out.hostgw_foreign_source = c.packets;
  }
  return out;
}

}  // namespace weft::overlay
