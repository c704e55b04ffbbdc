#include "fw/source_guard.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/strings.h"
#include "fw/tool.h"
#include "sys/files.h"

namespace weft::fw {

namespace {

std::string TableRef(GuardMode mode) { return std::string("netdev ") + GuardTable(mode); }

// The objects each table holds (added when missing, never flushed).
std::string Objects(GuardMode mode) {
  std::string s;
  s += "  counter spoofed4 {}\n";
  s += "  counter spoofed6 {}\n";
  if (mode == GuardMode::kBridge) {
    s += "  counter spoofed-mac {}\n";
    s += "  set mac { type ifname . ether_addr; }\n";
    s += "  set addr4 { type ifname . ipv4_addr; }\n";
    s += "  set addr6 { type ifname . ipv6_addr; }\n";
    // A neighbour advertisement's target address (ICMPv6 bytes 8-23): the
    // same keys as addr6, typed as the raw payload the rule reads.
    s += "  set nd6 { typeof iifname . @th,64,128; }\n";
  }
  s += "  limit drop-log { rate " + std::to_string(kGuardDropLogRate) + "/second burst 100 packets; }\n";
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
std::vector<std::pair<std::string, std::vector<std::string>>> PolicyChains(GuardMode mode) {
  if (mode == GuardMode::kRouted) {
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
// NFLOG group kGuardDropLogGroup (weftd's drop records), at most
// kGuardDropLogRate a second for the table (the named limit "drop-log"),
// then counted and dropped. Over the rate it is dropped unrecorded: the
// drop never depends on the log.
std::vector<std::pair<std::string, std::vector<std::string>>> Chains(GuardMode mode) {
  auto chains = PolicyChains(mode);
  std::vector<std::pair<std::string, std::string>> drops = {{"drop4", "spoofed4"}, {"drop6", "spoofed6"}};
  if (mode == GuardMode::kBridge) drops.push_back({"drop-mac", "spoofed-mac"});
  for (const auto& [chain, counter] : drops)
    chains.push_back({chain,
                      {"limit name \"drop-log\" log prefix \"weft-guard " + counter + "\" group " +
                           std::to_string(kGuardDropLogGroup),
                       "counter name \"" + counter + "\" drop"}});
  return chains;
}

std::string RulesText(GuardMode mode) {
  std::string s = "port chains: ingress priority " + std::to_string(kGuardPortPriority) + "\n";
  for (const auto& [chain, rules] : Chains(mode)) {
    s += chain + ":\n";
    for (const auto& r : rules) s += r + "\n";
  }
  // The port chains' rules are part of the ruleset: a change to them
  // changes the marker.
  const IpAddress v4 = *IpAddress::Parse("192.0.2.1"), v6 = *IpAddress::Parse("2001:db8::1");
  for (const auto& r : PortRules(mode, v4, v6)) s += sys::DescribeNftRule(r) + "\n";
  return Objects(mode) + s;
}

// Key fields, each padded to 4 bytes as nftables lays out concatenations.
void PutField(std::string* key, std::string bytes) {
  bytes.resize((bytes.size() + 3) / 4 * 4, '\0');
  *key += bytes;
}
std::string IfnameField(const std::string& name) {
  std::string f = name;
  f.resize(16, '\0');  // IFNAMSIZ
  return f;
}
std::string AddrBytes(const IpAddress& a) { return a.ToBytes(); }
std::string LastBytes(const IpPrefix& p) { return p.Last().ToBytes(); }

std::string Key(const std::string& port, const std::string& second) {
  std::string k;
  PutField(&k, IfnameField(port));
  PutField(&k, second);
  return k;
}

Status ApplyIgnoringMissingTable(GuardMode mode, const std::vector<sys::NftChange>& changes, UniqueFd* keep) {
  Status st = sys::NftApply(GuardFamily(mode), GuardTable(mode), changes, keep);
  if (!st.ok() && st.sys_errno() == ENOENT) {
    auto exists = sys::NftTableExists(GuardFamily(mode), GuardTable(mode));
    if (exists.ok() && !*exists) return Status::Ok();
  }
  return st;
}

void AppendBinding(GuardMode mode, const PortBinding& b, std::vector<sys::NftChange>* out) {
  sys::NftChange chain{.op = sys::NftChange::kAddIngressChain};
  chain.chain = b.port;
  chain.device = b.port;
  chain.priority = kGuardPortPriority;
  out->push_back(chain);
  out->push_back({.op = sys::NftChange::kFlushChain, .chain = b.port});
  for (auto& r : PortRules(mode, b.v4, b.v6))
    out->push_back({.op = sys::NftChange::kAddRule, .chain = b.port, .rule = std::move(r)});
  if (mode == GuardMode::kBridge)
    for (auto& e : BridgeElements(b)) out->push_back({sys::NftChange::kAddElement, std::move(e)});
}

}  // namespace

sys::NftFamily GuardFamily(GuardMode) { return sys::NftFamily::kNetdev; }

const char* GuardTable(GuardMode mode) { return mode == GuardMode::kRouted ? kGuardTable : kBridgeGuardTable; }

std::string GuardMarker(GuardMode mode) { return "weft-guard:" + Hex(Fnv1a64(RulesText(mode)), 16); }

std::vector<sys::NftRule> PortRules(GuardMode mode, const std::optional<IpAddress>& v4,
                                    const std::optional<IpAddress>& v6) {
  using sys::NftHeader;
  std::vector<sys::NftRule> rules;
  // Bridge mode: the frame's source MAC is not compared here. The plugin
  // locks the port to the pod's MAC in the bridge itself (learning off, one
  // static FDB entry: the bridge drops a frame from any other MAC with the
  // FDB lookup it makes anyway); what this chain does not accept goes to the
  // shared chain, whose first rule drops a foreign MAC and counts it.
  //
  // The pod's own addresses: a comparison with an immediate each, no
  // lookup. IPv4 saddr at byte 12 of the header, IPv6 at byte 8.
  if (v4)
    rules.push_back(sys::NftMatchProtocol(0x0800) +
                    sys::NftMatchPayload(NftHeader::kNetwork, 12, v4->ToBytes(), true) + sys::NftAccept());
  if (v6) {
    sys::NftRule r =
        sys::NftMatchProtocol(0x86dd) + sys::NftMatchPayload(NftHeader::kNetwork, 8, v6->ToBytes(), true);
    // Bridge mode: ICMPv6 (neighbour advertisements) is checked in full
    // by the shared chain, whatever the source.
    if (mode == GuardMode::kBridge) r = r + sys::NftMatchL4Proto(58, false);
    rules.push_back(r + sys::NftAccept());
  }
  rules.push_back(sys::NftGoto("pod"));
  return rules;
}

std::string RenderGuard(GuardMode mode) {
  const std::string t = TableRef(mode);
  std::string s = "add table " + t + "\n";
  s += "table " + t + " {\n" + Objects(mode) + "}\n";
  const auto chains = Chains(mode);
  // Chains first (a goto needs its target); then every shared chain is
  // emptied and refilled. The ports' chains are not touched.
  for (const auto& [chain, rules] : chains) s += "add chain " + t + " " + chain + "\n";
  for (const auto& [chain, rules] : chains) s += "flush chain " + t + " " + chain + "\n";
  for (const auto& [chain, rules] : chains) {
    for (size_t i = 0; i < rules.size(); ++i) {
      s += "add rule " + t + " " + chain + " " + rules[i];
      if (chain == "pod" && i == 0) s += " comment \"" + GuardMarker(mode) + "\"";
      s += "\n";
    }
  }
  return s;
}

Status EnsureGuard(GuardMode mode, const std::string& lock_dir, bool* applied) {
  if (applied) *applied = false;
  auto in_place = [&]() -> Result<bool> {
    WEFT_ASSIGN_OR_RETURN(auto comments, sys::NftRuleComments(GuardFamily(mode), GuardTable(mode), "pod"));
    return !comments.empty() && comments[0] == GuardMarker(mode);
  };
  WEFT_ASSIGN_OR_RETURN(bool ok, in_place());
  if (ok) return Status::Ok();
  WEFT_ASSIGN_OR_RETURN(auto lock, sys::FileLock::Acquire(lock_dir + "/firewall.lock"));
  WEFT_ASSIGN_OR_RETURN(ok, in_place());  // another process may have won
  if (ok) return Status::Ok();
  WEFT_ASSIGN_OR_RETURN(auto r, RunTool("nft", {"-f", "-"}, RenderGuard(mode)));
  if (r.exit_code != 0) return ToolError("nft: install source guard " + TableRef(mode), r);
  if (applied) *applied = true;
  return Status::Ok();
}

std::vector<sys::NftElement> BridgeElements(const PortBinding& b) {
  std::vector<sys::NftElement> out;
  out.push_back({"mac", Key(b.port, b.mac), "", "", 0});
  if (b.v4) out.push_back({"addr4", Key(b.port, AddrBytes(*b.v4)), "", "", 0});
  if (b.v6) {
    out.push_back({"addr6", Key(b.port, AddrBytes(*b.v6)), "", "", 0});
    out.push_back({"nd6", Key(b.port, AddrBytes(*b.v6)), "", "", 0});
  }
  return out;
}

Status BindPorts(GuardMode mode, const std::vector<PortBinding>& ports) {
  std::vector<sys::NftChange> changes;
  for (const auto& b : ports) AppendBinding(mode, b, &changes);
  return sys::NftApply(GuardFamily(mode), GuardTable(mode), changes).Prefix("bind ports in the source guard");
}

Status BindPort(GuardMode mode, const PortBinding& b) {
  std::vector<sys::NftChange> changes;
  AppendBinding(mode, b, &changes);
  return sys::NftApply(GuardFamily(mode), GuardTable(mode), changes).Prefix("bind " + b.port + " in the source guard");
}

Status UnbindPort(GuardMode mode, const PortBinding& b, UniqueFd* keep) {
  std::vector<sys::NftChange> changes;
  if (mode == GuardMode::kBridge)
    for (auto& e : BridgeElements(b))
      changes.push_back({sys::NftChange::kDestroyElement, std::move(e)});
  // DELCHAIN, not DESTROYCHAIN: routed DEL then works on kernels before 6.3
  // too. A chain that is absent (a DEL repeated; before Linux 6.16 the
  // kernel deletes it with its device) fails the batch with ENOENT: then
  // the rest goes without it.
  changes.push_back({.op = sys::NftChange::kDeleteChain, .chain = b.port});
  Status st = ApplyIgnoringMissingTable(mode, changes, keep);
  if (!st.ok() && st.sys_errno() == ENOENT) {
    changes.pop_back();
    st = changes.empty() ? Status::Ok() : ApplyIgnoringMissingTable(mode, changes, keep);
  }
  return st.Prefix("unbind " + b.port + " in the source guard");
}

Result<std::vector<std::string>> BoundPorts(GuardMode mode) {
  WEFT_ASSIGN_OR_RETURN(auto chains, sys::NftChains(GuardFamily(mode), GuardTable(mode)));
  std::vector<std::string> out;
  for (auto& c : chains)
    if (c.rfind(kPodPortPrefix, 0) == 0) out.push_back(std::move(c));
  return out;
}

Status RetireLegacyGuard(GuardMode mode) {
  const sys::NftFamily old = mode == GuardMode::kRouted ? sys::NftFamily::kInet : sys::NftFamily::kBridge;
  WEFT_ASSIGN_OR_RETURN(bool exists, sys::NftTableExists(old, kGuardTable));
  if (!exists) return Status::Ok();
  // The opt-outs an operator set move to the new table.
  std::vector<sys::NftChange> moved;
  for (const char* set : {"allow4", "allow6", kOptOutSet}) {
    WEFT_ASSIGN_OR_RETURN(auto elems, sys::NftElements(old, kGuardTable, set));
    for (auto& e : elems) moved.push_back({sys::NftChange::kAddElement, std::move(e)});
  }
  WEFT_RETURN_IF_ERROR(sys::NftApply(GuardFamily(mode), GuardTable(mode), moved).Prefix("move the opt-outs"));
  Status st = sys::NftApply(old, kGuardTable, {{sys::NftChange::kDeleteTable, {}}});
  if (!st.ok() && st.sys_errno() == ENOENT) return Status::Ok();  // another process was first
  return st.Prefix("delete the source guard's old table");
}

std::vector<sys::NftElement> AllowElements(const std::string& port, const std::vector<IpPrefix>& prefixes) {
  std::vector<sys::NftElement> out;
  for (const auto& p : prefixes) {
    const IpPrefix m = p.Masked();
    out.push_back({m.is_v4() ? "allow4" : "allow6", Key(port, AddrBytes(m.addr())), Key(port, LastBytes(m)), "", 0});
  }
  return out;
}

Status SetAllowedSources(GuardMode mode, const std::string& port, const std::vector<IpPrefix>& prefixes) {
  const std::string mine = IfnameField(port);
  const auto want = AllowElements(port, prefixes);
  std::vector<sys::NftChange> changes;
  for (const char* set : {"allow4", "allow6"}) {
    WEFT_ASSIGN_OR_RETURN(auto have, sys::NftElements(GuardFamily(mode), GuardTable(mode), set));
    for (auto& h : have) {
      if (h.key.compare(0, mine.size(), mine) != 0) continue;
      if (std::find_if(want.begin(), want.end(), [&](const sys::NftElement& w) {
            return w.set == set && w.key == h.key && w.key_end == h.key_end;
          }) != want.end())
        continue;
      changes.push_back({sys::NftChange::kDeleteElement, {set, h.key, h.key_end, "", 0}});
    }
  }
  for (const auto& w : want) changes.push_back({sys::NftChange::kAddElement, w});
  // The marker DEL looks up, in the same transaction as the opt-out itself.
  changes.push_back({want.empty() ? sys::NftChange::kDestroyElement : sys::NftChange::kAddElement,
                     {kOptOutSet, mine, "", "", 0}});
  return sys::NftApply(GuardFamily(mode), GuardTable(mode), changes).Prefix("allowed sources of " + port);
}

Status ClearAllowedSourcesIfAny(GuardMode mode, const std::string& port) {
  WEFT_ASSIGN_OR_RETURN(bool any, sys::NftElementExists(GuardFamily(mode), GuardTable(mode), kOptOutSet, IfnameField(port)));
  if (!any) return Status::Ok();
  return SetAllowedSources(mode, port, {});
}

namespace {

Result<size_t> PruneGuardOnce(const std::function<Result<std::vector<std::string>>()>& list_links) {
  struct Have {
    GuardMode mode;
    sys::NftElement elem;
  };
  std::vector<Have> have;
  // The ports' chains: on Linux 6.16+ a netdev chain outlives its device.
  std::vector<std::pair<GuardMode, std::string>> chains;
  for (GuardMode mode : {GuardMode::kRouted, GuardMode::kBridge}) {
    WEFT_ASSIGN_OR_RETURN(auto ports, BoundPorts(mode));
    for (auto& p : ports) chains.push_back({mode, std::move(p)});
    std::vector<const char*> sets = {"allow4", "allow6", kOptOutSet};
    if (mode == GuardMode::kBridge) sets.insert(sets.end(), {"mac", "addr4", "addr6", "nd6"});
    for (const char* set : sets) {
      WEFT_ASSIGN_OR_RETURN(auto elems, sys::NftElements(GuardFamily(mode), GuardTable(mode), set));
      for (auto& e : elems) have.push_back({mode, std::move(e)});
    }
  }
  if (have.empty() && chains.empty()) return size_t{0};
  WEFT_ASSIGN_OR_RETURN(auto links, list_links());
  std::vector<std::string> live;
  for (const auto& l : links) live.push_back(IfnameField(l));
  size_t gone = 0;
  for (GuardMode mode : {GuardMode::kRouted, GuardMode::kBridge}) {
    std::vector<sys::NftChange> changes;
    for (const auto& h : have) {
      if (h.mode != mode || h.elem.key.size() < 16) continue;
      if (std::find(live.begin(), live.end(), h.elem.key.substr(0, 16)) != live.end()) continue;
      changes.push_back({sys::NftChange::kDestroyElement, {h.elem.set, h.elem.key, h.elem.key_end, "", 0}});
    }
    for (const auto& [m, port] : chains)
      if (m == mode && std::find(live.begin(), live.end(), IfnameField(port)) == live.end())
        changes.push_back({.op = sys::NftChange::kDeleteChain, .chain = port});
    if (changes.empty()) continue;
    WEFT_RETURN_IF_ERROR(sys::NftApply(GuardFamily(mode), GuardTable(mode), changes).Prefix("prune the source guard"));
    gone += changes.size();
  }
  return gone;
}

}  // namespace

Result<size_t> PruneGuard(const std::function<Result<std::vector<std::string>>()>& list_links) {
  // A chain that a concurrent DEL deleted after the listing fails the
  // batch with ENOENT (DELCHAIN: kernels before 6.3 have no DESTROYCHAIN):
  // list again. Bounded, but not by 3: the sanitizer tree's soak (8
  // concurrent operations) saw a GC lose three races in a row.
  Result<size_t> r = PruneGuardOnce(list_links);
  for (int i = 0; i < 7 && !r.ok() && r.status().sys_errno() == ENOENT; ++i) r = PruneGuardOnce(list_links);
  return r;
}

Status ClearAllowedSources(const std::string& port) {
  for (GuardMode mode : {GuardMode::kRouted, GuardMode::kBridge}) {
    // A missing table dumps as empty: nothing to delete, no transaction.
    WEFT_RETURN_IF_ERROR(SetAllowedSources(mode, port, {}));
  }
  return Status::Ok();
}

Result<std::vector<IpPrefix>> AllowedSources(GuardMode mode, const std::string& port) {
  const std::string mine = IfnameField(port);
  std::vector<IpPrefix> out;
  for (bool v6 : {false, true}) {
    WEFT_ASSIGN_OR_RETURN(auto have, sys::NftElements(GuardFamily(mode), GuardTable(mode), v6 ? "allow6" : "allow4"));
    const size_t n = v6 ? 16 : 4;
    for (const auto& h : have) {
      if (h.key.size() != 16 + n || h.key_end.size() != 16 + n || h.key.compare(0, 16, mine) != 0) continue;
      auto first = IpAddress::FromBytes(v6, reinterpret_cast<const uint8_t*>(h.key.data() + 16));
      // The prefix length: the number of leading bits first and last share.
      int len = 0;
      for (size_t i = 0; i < n * 8; ++i) {
        const auto a = static_cast<uint8_t>(h.key[16 + i / 8]), b = static_cast<uint8_t>(h.key_end[16 + i / 8]);
        if (((a ^ b) >> (7 - i % 8)) & 1) break;
        ++len;
      }
      out.emplace_back(first, len);
    }
  }
  return out;
}


}  // namespace weft::fw
