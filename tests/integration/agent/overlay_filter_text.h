#pragma once
// A test fixture, not product code: the overlay filter as weftd wrote it up
// to 0.4.0, an `nft -f` script built as text (src/overlay/filter.cc at
// commit 7ce52a0), kept so overlay_filter_nft_test can prove the typed
// transaction that replaced it builds the same table, and that a node
// upgraded from the text path takes the new one over.

#include <string>
#include <vector>

namespace weft::testing {

inline std::string OverlayFilterText(int port, const std::string& marker) {
  const std::string t = "inet weft-overlay";
  auto set_name = [](bool peer_v6, bool pods_v6) {
    return std::string(peer_v6 ? "peer6" : "peer4") + (pods_v6 ? "-pod6" : "-pod4");
  };
  auto inner = [](bool v6) { return v6 ? std::string("@th,304,128") : std::string("@th,336,32"); };
  std::string s = "add table " + t + "\n";
  s += "table " + t + " {\n";
  s += "  counter vxlan-unknown-peer {}\n  counter vxlan-foreign-source {}\n  counter hostgw-foreign-source {}\n";
  s += "  set pods4-on { type ipv4_addr . ifname; flags interval; }\n";
  s += "  set pods6-on { type ipv6_addr . ifname; flags interval; }\n";
  s += "  set gw4 { type ipv4_addr . ether_addr; flags interval; }\n";
  s += "  set gw6 { type ipv6_addr . ether_addr; flags interval; }\n";
  s += "  set peers4 { type ipv4_addr; }\n  set peers6 { type ipv6_addr; }\n";
  for (bool peer_v6 : {false, true})
    for (bool pods_v6 : {false, true})
      s += "  set " + set_name(peer_v6, pods_v6) + " { typeof " + (peer_v6 ? "ip6" : "ip") + " saddr . " +
           inner(pods_v6) + "; flags interval; }\n";
  s += "}\n";
  s += "add chain " + t + " vxlan\n";
  s += "add chain " + t + " input { type filter hook input priority filter - 10; policy accept; }\n";
  s += "add chain " + t + " hostgw { type filter hook prerouting priority raw; policy accept; }\n";
  s += "flush chain " + t + " vxlan\nflush chain " + t + " input\nflush chain " + t + " hostgw\n";
  for (const char* f : {"ip", "ip6"}) {
    const std::string n = std::string(f) == "ip" ? "4" : "6";
    s += "add rule " + t + " hostgw " + f + " saddr . iifname @pods" + n + "-on " + f + " saddr . ether saddr != @gw" +
         n + " counter name \"hostgw-foreign-source\" drop\n";
  }
  s += "add rule " + t + " vxlan ip saddr != @peers4 counter name \"vxlan-unknown-peer\" drop\n";
  s += "add rule " + t + " vxlan ip6 saddr != @peers6 counter name \"vxlan-unknown-peer\" drop\n";
  for (bool peer_v6 : {false, true})
    for (bool pods_v6 : {false, true})
      s += "add rule " + t + " vxlan @th,224,16 " + (pods_v6 ? "0x86dd " : "0x0800 ") + (peer_v6 ? "ip6" : "ip") +
           " saddr . " + inner(pods_v6) + " @" + set_name(peer_v6, pods_v6) + " return\n";
  s += "add rule " + t + " vxlan counter name \"vxlan-foreign-source\" drop\n";
  s += "add rule " + t + " input udp dport " + std::to_string(port) + " jump vxlan comment \"" + marker + "\"\n";
  return s;
}

}  // namespace weft::testing
