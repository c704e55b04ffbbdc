#pragma once
// A test fixture, not product code: the firewall tables as the plugin wrote
// them as `nft -f` scripts built as text, kept so fw_nft_equivalence_test
// can prove the typed transactions that replaced them build the same
// tables, and that a node upgraded from the text path takes the new ones
// over: masquerade up to commit 8542670 (src/fw/masquerade.cc's
// RenderNftMasquerade there), the source guard's shared chains up to
// commit 77567e9 (src/fw/source_guard.cc's RenderGuard there; the marker
// comment is a parameter, since the marker hashes the rules' rendering).

#include <string>
#include <vector>

#include "fw/hostport.h"
#include "fw/masquerade.h"
#include "fw/source_guard.h"

namespace weft::testing {

inline std::string MasqueradeText(const fw::MasqueradeSpec& spec) {
  auto family = [](const std::vector<IpPrefix>& in, bool v6) {
    std::vector<IpPrefix> out;
    for (const auto& p : in)
      if (p.is_v4() != v6) out.push_back(p);
    return out;
  };
  auto join = [](const std::vector<IpPrefix>& ps) {
    std::string s;
    for (const auto& p : ps) s += (s.empty() ? "" : ", ") + p.ToString();
    return s;
  };
  std::vector<IpPrefix> no_masq = spec.no_masq;
  no_masq.insert(no_masq.end(), spec.pod_ranges.begin(), spec.pod_ranges.end());
  no_masq = fw::Normalize(no_masq);
  std::string t = fw::NftTableName(spec.network);
  std::string marker = fw::MasqMarker(spec);
  std::string s;
  s += "table inet " + t + "\n";
  s += "delete table inet " + t + "\n";
  s += "table inet " + t + " {\n";
  std::string rules;
  for (bool v6 : {false, true}) {
    auto src = family(fw::Normalize(spec.pod_ranges), v6);
    if (src.empty()) continue;
    auto dst = family(no_masq, v6);
    std::string f = v6 ? "6" : "4";
    std::string type = v6 ? "ipv6_addr" : "ipv4_addr";
    s += "  set pods" + f + " { type " + type + "; flags interval; elements = { " + join(src) + " } }\n";
    s += "  set nomasq" + f + " { type " + type + "; flags interval; elements = { " + join(dst) + " } }\n";
    std::string ip = v6 ? "ip6" : "ip";
    rules += "    " + ip + " saddr @pods" + f + " " + ip + " daddr != @nomasq" + f + " masquerade comment \"" + marker +
             "\"\n";
  }
  s += "  chain postrouting {\n";
  s += "    type nat hook postrouting priority srcnat; policy accept;\n";
  s += rules;
  s += "  }\n}\n";
  return s;
}

// The objects each table holds (added when missing, never flushed).
inline std::string GuardObjects(fw::GuardMode mode) {
  std::string s;
  s += "  counter spoofed4 {}\n";
  s += "  counter spoofed6 {}\n";
  if (mode == fw::GuardMode::kBridge) {
    s += "  counter spoofed-mac {}\n";
    s += "  set mac { type ifname . ether_addr; }\n";
    s += "  set addr4 { type ifname . ipv4_addr; }\n";
    s += "  set addr6 { type ifname . ipv6_addr; }\n";
    // A neighbour advertisement's target address (ICMPv6 bytes 8-23): the
    // same keys as addr6, typed as the raw payload the rule reads.
    s += "  set nd6 { typeof iifname . @th,64,128; }\n";
  }
  s += "  limit drop-log { rate " + std::to_string(fw::kGuardDropLogRate) + "/second burst 100 packets; }\n";
  s += "  set allow4 { type ifname . ipv4_addr; flags interval; }\n";
  s += "  set allow6 { type ifname . ipv6_addr; flags interval; }\n";
  // The ports that have elements in allow4/allow6: a DEL asks this set
  // (one lookup) instead of dumping both allow sets.
  s += "  set optouts { type ifname; }\n";
  return s;
}

// The shared chains, name -> rules in order; `pod` comes first and its
// first rule carries the marker. A port's own chain (PortRules) accepts
// the pod's own addresses and sends everything else here.
inline std::vector<std::pair<std::string, std::vector<std::string>>> GuardPolicyChains(fw::GuardMode mode) {
  if (mode == fw::GuardMode::kRouted) {
    return {
        {"pod",
         {
             // A routed port is point-to-point: what a pod claims in ARP
             // reaches no other pod (each pod address is routed to its own
             // port), and the node answers for the gateway by proxy ARP.
             "meta protocol arp accept",
             // A pod is no router for its node: on a node that accepts
             // router advertisements on new interfaces (accept_ra=2), one
             // from a pod would give the node a default route via the pod.
             // (From the pod's own global address the port's chain accepts
             // it, and the kernel ignores it: RAs and redirects come from
             // link-local sources.)
             "icmpv6 type { nd-router-advert, nd-redirect } goto drop6",
             // Link-local sources stay on the link (NDP), but the node's
             // own gateway address (fe80::1 on every routed port) is not
             // the pod's; duplicate address detection and MLD come before
             // an address exists.
             "ip6 saddr fe80::1 goto drop6",
             "ip6 saddr fe80::/10 accept",
             "ip6 saddr :: ip6 daddr ff02::/16 accept",
             "iifname . ip saddr @allow4 accept",
             "iifname . ip6 saddr @allow6 accept",
             "meta protocol ip goto drop4",
             "meta protocol ip6 goto drop6",
         }},
    };
  }
  return {
      {"pod",
       {
           "iifname . ether saddr != @mac goto drop-mac",
           "ether type arp goto pod-arp",
           "ether type ip goto pod-ip4",
           "ether type ip6 goto pod-ip6",
           // VLAN tags, other protocols: a pod speaks IPv4, IPv6 and ARP.
           "goto drop-mac",
       }},
      {"pod-arp",
       {
           // The sender's hardware and protocol addresses are what a
           // neighbour cache learns: both must be the pod's (an ARP probe
           // claims no address).
           "iifname . arp saddr ether != @mac goto drop4",
           "arp saddr ip 0.0.0.0 accept",
           "iifname . arp saddr ip @addr4 accept",
           "goto drop4",
       }},
      {"pod-ip4",
       {
           "iifname . ip saddr @addr4 accept",
           "iifname . ip saddr @allow4 accept",
           "goto drop4",
       }},
      {"pod-ip6",
       {
           // A pod is no router for its neighbours.
           "icmpv6 type { nd-router-advert, nd-redirect } goto drop6",
           // It advertises only its own addresses (link-local ones are
           // not bound: see docs/security.md).
           "icmpv6 type nd-neighbor-advert @th,64,16 & 0xffc0 != 0xfe80 iifname . @th,64,128 != @nd6 goto drop6",
           "ip6 saddr fe80::/10 accept",
           "ip6 saddr :: ip6 daddr ff02::/16 accept",
           "iifname . ip6 saddr @addr6 accept",
           "iifname . ip6 saddr @allow6 accept",
           "goto drop6",
       }},
  };
}

// The drop chains every drop of the table goes to: the packet is sent to
// NFLOG group fw::kGuardDropLogGroup (weftd's drop records), at most
// fw::kGuardDropLogRate a second for the table (the named limit "drop-log"),
// then counted and dropped. Over the rate it is dropped unrecorded: the
// drop never depends on the log.
inline std::vector<std::pair<std::string, std::vector<std::string>>> GuardChains(fw::GuardMode mode) {
  auto chains = GuardPolicyChains(mode);
  std::vector<std::pair<std::string, std::string>> drops = {{"drop4", "spoofed4"}, {"drop6", "spoofed6"}};
  if (mode == fw::GuardMode::kBridge) drops.push_back({"drop-mac", "spoofed-mac"});
  for (const auto& [chain, counter] : drops)
    chains.push_back({chain,
                      {"limit name \"drop-log\" log prefix \"weft-guard " + counter + "\" group " +
                           std::to_string(fw::kGuardDropLogGroup),
                       "counter name \"" + counter + "\" drop"}});
  return chains;
}


// RenderGuard as it was, with `marker` as the first rule's comment.
inline std::string GuardText(fw::GuardMode mode, const std::string& marker) {
  const std::string t = std::string("netdev ") + fw::GuardTable(mode);
  std::string s = "add table " + t + "\n";
  s += "table " + t + " {\n" + GuardObjects(mode) + "}\n";
  const auto chains = GuardChains(mode);
  for (const auto& [chain, rules] : chains) s += "add chain " + t + " " + chain + "\n";
  for (const auto& [chain, rules] : chains) s += "flush chain " + t + " " + chain + "\n";
  for (const auto& [chain, rules] : chains) {
    for (size_t i = 0; i < rules.size(); ++i) {
      s += "add rule " + t + " " + chain + " " + rules[i];
      if (chain == "pod" && i == 0) s += " comment \"" + marker + "\"";
      s += "\n";
    }
  }
  return s;
}

inline std::string HostPortText(const std::string& table, const std::vector<fw::HostPortRule>& rules) {
  using fw::HostPortRule;
  const char* kMarkHex = "0x2000";
  const char* kLoopback4 = "127.0.0.0/8";
  auto MapOf = [](const HostPortRule& r) {
    return std::string(r.is_v4() ? "hp4" : "hp6") + (r.host_ip.empty() ? "" : "a");
  };
  auto ElementScript = [](const HostPortRule& r) {
    std::string k = r.host_ip.empty() ? "" : r.host_ip + " . ";
    k += r.protocol + " . " + std::to_string(r.host_port);
    return k + " : " + r.container.addr().ToString() + " . " + std::to_string(r.container_port);
  };
  // Publishable: a hostIP of the rule's own family, or none.
  auto Publishable = [](const std::vector<HostPortRule>& in) {
    std::vector<HostPortRule> out;
    for (const auto& r : fw::Canonical(in)) {
      if (!r.host_ip.empty()) {
        auto hip = IpAddress::Parse(r.host_ip);
        if (!hip || hip->is_v4() != r.is_v4()) continue;
      }
      out.push_back(r);
    }
    return out;
  };
  std::string s = "table inet " + table + "\ndelete table inet " + table + "\n";
  if (fw::Canonical(rules).empty()) return s;
  const std::string base = std::string(" comment \"") + fw::kNftHostPortBase + "\"";
  const std::string mark = " meta mark set meta mark | " + std::string(kMarkHex) + base;
  s += "table inet " + table + " {\n";
  for (const char* f : {"4", "6"}) {
    const std::string addr = f == std::string("4") ? "ipv4_addr" : "ipv6_addr";
    const std::string to = " : " + addr + " . inet_service; }\n";
    s += std::string("  map hp") + f + " { type inet_proto . inet_service" + to;
    s += std::string("  map hp") + f + "a { type " + addr + " . inet_proto . inet_service" + to;
    s += std::string("  set hp") + f + "-src { type " + addr + "; flags interval; }\n";
  }
  s += "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n";
  s += "    fib daddr type local jump hostports" + base + "\n  }\n";
  s += "  chain output {\n    type nat hook output priority -100; policy accept;\n";
  s += "    fib daddr type local jump hostports" + base + "\n  }\n";
  // The marks first: a DNAT ends the chain for the packet. A map is also a
  // set of its keys.
  s += "  chain hostports {\n";
  s += "    ip saddr @hp4-src meta l4proto . th dport @hp4" + mark + "\n";
  s += "    ip saddr @hp4-src ip daddr . meta l4proto . th dport @hp4a" + mark + "\n";
  s += "    ip6 saddr @hp6-src meta l4proto . th dport @hp6" + mark + "\n";
  s += "    ip6 saddr @hp6-src ip6 daddr . meta l4proto . th dport @hp6a" + mark + "\n";
  s += "    dnat ip to ip daddr . meta l4proto . th dport map @hp4a" + base + "\n";
  s += "    meta nfproto ipv4 dnat ip to meta l4proto . th dport map @hp4" + base + "\n";
  s += "    dnat ip6 to ip6 daddr . meta l4proto . th dport map @hp6a" + base + "\n";
  s += "    meta nfproto ipv6 dnat ip6 to meta l4proto . th dport map @hp6" + base + "\n";
  s += "  }\n";
  s += "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n";
  s += "    meta mark & " + std::string(kMarkHex) + " == " + kMarkHex + " masquerade" + base + "\n  }\n";
  s += "  chain localhost-guard {\n    type filter hook input priority filter; policy accept;\n";
  s += "    iifname != \"lo\" ip daddr " + std::string(kLoopback4) + " ct state != { established, related } drop" +
       base + "\n  }\n";
  s += "}\n";
  for (const auto& p : fw::NftHostPortSources(rules))
    s += "add element inet " + table + " " + (p.is_v4() ? "hp4-src" : "hp6-src") + " { " + p.ToString() + " }\n";
  for (const auto& r : Publishable(rules))
    s += "add element inet " + table + " " + MapOf(r) + " { " + ElementScript(r) + " }\n";
  return s;
}

}  // namespace weft::testing
