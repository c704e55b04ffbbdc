#include "overlay/filter.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>

#include "base/strings.h"

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

std::string InnerField(bool v6) {
  return v6 ? "@th," + std::to_string(kInnerIpv6SaddrBit) + ",128"
            : "@th," + std::to_string(kInnerIpv4SaddrBit) + ",32";
}

std::string Objects() {
  std::string s;
  s += std::string("  counter ") + kUnknownPeerCounter + " {}\n";
  s += std::string("  counter ") + kForeignSourceCounter + " {}\n";
  s += std::string("  counter ") + kHostGwForeignCounter + " {}\n";
  s += "  set pods4-on { type ipv4_addr . ifname; flags interval; }\n";
  s += "  set pods6-on { type ipv6_addr . ifname; flags interval; }\n";
  s += "  set gw4 { type ipv4_addr . ether_addr; flags interval; }\n";
  s += "  set gw6 { type ipv6_addr . ether_addr; flags interval; }\n";
  s += "  set peers4 { type ipv4_addr; }\n";
  s += "  set peers6 { type ipv6_addr; }\n";
  for (bool peer_v6 : {false, true})
    for (bool pods_v6 : {false, true})
      s += "  set " + SetName(peer_v6, pods_v6) + " { typeof " + (peer_v6 ? "ip6" : "ip") + " saddr . " +
           InnerField(pods_v6) + "; flags interval; }\n";
  return s;
}

std::string Hook() { return "type filter hook input priority filter - 10; policy accept;"; }
// Before conntrack, as the source guard: a forged packet creates no entry.
std::string HostGwHook() { return "type filter hook prerouting priority raw; policy accept;"; }

std::vector<std::string> HostGwRules() {
  std::vector<std::string> r;
  for (const char* f : {"ip", "ip6"}) {
    const std::string n = std::string(f) == "ip" ? "4" : "6";
    r.push_back(std::string(f) + " saddr . iifname @pods" + n + "-on " + f + " saddr . ether saddr != @gw" + n +
                " counter name \"" + kHostGwForeignCounter + "\" drop");
  }
  return r;
}

std::vector<std::string> VxlanRules() {
  std::vector<std::string> r;
  r.push_back(std::string("ip saddr != @peers4 counter name \"") + kUnknownPeerCounter + "\" drop");
  r.push_back(std::string("ip6 saddr != @peers6 counter name \"") + kUnknownPeerCounter + "\" drop");
  for (bool peer_v6 : {false, true})
    for (bool pods_v6 : {false, true})
      r.push_back("@th," + std::to_string(kInnerEthertypeBit) + ",16 " + (pods_v6 ? "0x86dd " : "0x0800 ") +
                  (peer_v6 ? "ip6" : "ip") + " saddr . " + InnerField(pods_v6) + " @" + SetName(peer_v6, pods_v6) +
                  " return");
  // The one place the overlay drops a packet that is not its peers'.
  r.push_back(std::string("counter name \"") + kForeignSourceCounter + "\" drop");
  return r;
}

std::string InputRule(int port) { return "udp dport " + std::to_string(port) + " jump vxlan"; }

std::string RulesText(int port) {
  std::string s = Objects() + Hook() + "\ninput:\n" + InputRule(port) + "\nvxlan:\n";
  for (const auto& r : VxlanRules()) s += r + "\n";
  s += HostGwHook() + "\nhostgw:\n";
  for (const auto& r : HostGwRules()) s += r + "\n";
  return s;
}

std::string Bytes(const IpAddress& a) { return a.ToBytes(); }
std::string LastBytes(const IpPrefix& p) { return p.Last().ToBytes(); }

}  // namespace

std::string OverlayFilterMarker(int port) { return "weft-overlay:" + Hex(Fnv1a64(RulesText(port)), 16); }

std::string RenderOverlayFilter(int port) {
  const std::string t = std::string("inet ") + kOverlayTable;
  std::string s = "add table " + t + "\n";
  s += "table " + t + " {\n" + Objects() + "}\n";
  s += "add chain " + t + " vxlan\n";
  s += "add chain " + t + " input { " + Hook() + " }\n";
  s += "add chain " + t + " hostgw { " + HostGwHook() + " }\n";
  s += "flush chain " + t + " vxlan\n";
  s += "flush chain " + t + " input\n";
  s += "flush chain " + t + " hostgw\n";
  for (const auto& r : HostGwRules()) s += "add rule " + t + " hostgw " + r + "\n";
  for (const auto& r : VxlanRules()) s += "add rule " + t + " vxlan " + r + "\n";
  s += "add rule " + t + " input " + InputRule(port) + " comment \"" + OverlayFilterMarker(port) + "\"\n";
  return s;
}

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

Status ParseOverlayFilterCounters(const std::string& text, OverlayFilterCounters* out) {
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& e : j.value("nftables", nlohmann::json::array())) {
      if (!e.contains("counter")) continue;
      const auto& c = e["counter"];
      const std::string name = c.value("name", "");
      const uint64_t packets = c.value("packets", uint64_t{0});
      if (name == kUnknownPeerCounter) out->unknown_peer = packets;
      if (name == kForeignSourceCounter) out->foreign_source = packets;
      if (name == kHostGwForeignCounter) out->hostgw_foreign_source = packets;
    }
  } catch (const std::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kFirewall, "nft: list counters: bad JSON", e.what());
  }
  out->installed = true;
  return Status::Ok();
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

}  // namespace weft::overlay
