#include "fw/source_guard.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <netinet/in.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include "base/strings.h"
#include "sys/files.h"
#include "sys/nft_build.h"
#include "sys/nft_kernel.h"
#include "sys/nft_render.h"
#include "sys/nft_udata.h"

namespace weft::fw {

namespace {

namespace nft = sys::nft;

std::string TableRef(GuardMode mode) { return std::string("netdev ") + GuardTable(mode); }

// The pieces of the shared chains' rules, as nft 1.0.6 encodes the text
// they were written in before 0.4.0 (agent_fw_nft_equivalence_test
// compares the two tables object for object).
using Exprs = std::vector<nft::Expr>;
using nft::operator+;

// `meta protocol <ethertype>`: what an IPv4, IPv6 or ARP field needs in netdev.
Exprs Protocol(uint16_t ethertype) {
  return {nft::Meta{NFT_META_PROTOCOL, NFT_REG_1}, nft::Cmp{NFT_CMP_EQ, nft::Be16(ethertype), NFT_REG_1}};
}
Exprs Ip4() { return Protocol(0x0800); }
Exprs Ip6() { return Protocol(0x86dd); }
Exprs Arp() { return Protocol(0x0806); }
Exprs IifEther() { return nft::MatchIifEther(); }
Exprs Icmp6() { return Ip6() + nft::MatchL4proto(IPPROTO_ICMPV6); }

nft::Payload Load(uint32_t base, uint32_t offset, uint32_t len, uint32_t reg = NFT_REG_1) {
  return nft::Payload{base, offset, len, reg};
}
constexpr uint32_t kNh = NFT_PAYLOAD_NETWORK_HEADER, kTh = NFT_PAYLOAD_TRANSPORT_HEADER, kLl = NFT_PAYLOAD_LL_HEADER;
nft::Cmp Eq(std::string data) { return nft::Cmp{NFT_CMP_EQ, std::move(data), NFT_REG_1}; }
std::string V6(const char* a) { return nft::AddrBytes(a); }

// `iifname . <field> [!=] @set`: the port and a field, one key.
Exprs PortAnd(const nft::Payload& field, const std::string& set, bool invert = false) {
  nft::Payload second = field;
  second.dreg = NFT_REG32_04;  // after the 16 bytes of the name
  return {nft::Meta{NFT_META_IIFNAME, NFT_REG32_00}, second,
          nft::Lookup{.set = set, .sreg = NFT_REG32_00, .invert = invert}};
}

nft::Verdict Accept() { return {NF_ACCEPT, ""}; }
nft::Verdict Goto(const std::string& chain) { return {NFT_GOTO, chain}; }

// `icmpv6 type { nd-router-advert, nd-redirect }`: the anonymous set and
// the rule's match of it.
constexpr char kNotRouterSet[] = "__set_not_router";
nft::Set NotRouterSet() { return nft::Icmpv6TypeSet(kNotRouterSet); }
nft::Elements NotRouterElements() { return nft::Icmpv6TypeElements(kNotRouterSet, {134, 137}); }  // RA, redirect
Exprs NotRouter() { return Icmp6() + Exprs{Load(kTh, 0, 1), nft::Lookup{.set = kNotRouterSet}}; }

// `ip6 saddr fe80::/10 accept`, `ip6 saddr :: ip6 daddr ff02::/16 accept`:
// link-local sources stay on the link (NDP); duplicate address detection
// and MLD come before an address exists.
Exprs LinkLocal() {
  return Ip6() + Exprs{Load(kNh, 8, 16), nft::Bitwise{NFT_REG_1, NFT_REG_1, 16, V6("ffc0::"), std::string(16, '\0')},
                       Eq(V6("fe80::")), Accept()};
}
Exprs Unspecified() {
  return Ip6() + Exprs{Load(kNh, 8, 16), Eq(std::string(16, '\0')), Load(kNh, 24, 2), Eq(nft::Be16(0xff02)), Accept()};
}

struct SharedChain {
  std::string name;
  std::vector<Exprs> rules;
};

// The shared chains in order; `pod` comes first and its first rule carries
// the marker. A port's own chain (PortRules) accepts the pod's own
// addresses and sends everything else here.
std::vector<SharedChain> PolicyChains(GuardMode mode) {
  if (mode == GuardMode::kRouted) {
    return {{"pod",
             {
                 // A routed port is point-to-point: what a pod claims in ARP
                 // reaches no other pod (each pod address is routed to its
                 // own port), and the node answers for the gateway by proxy ARP.
                 Arp() + Exprs{Accept()},
                 // A pod is no router for its node: on a node that accepts
                 // router advertisements on new interfaces (accept_ra=2),
                 // one from a pod would give the node a default route via
                 // the pod. (From the pod's own global address the port's
                 // chain accepts it, and the kernel ignores it: RAs and
                 // redirects come from link-local sources.)
                 NotRouter() + Exprs{Goto("drop6")},
                 // Link-local sources stay on the link, but the node's own
                 // gateway address (fe80::1 on every routed port) is not the pod's.
                 Ip6() + Exprs{Load(kNh, 8, 16), Eq(V6("fe80::1")), Goto("drop6")},
                 LinkLocal(),
                 Unspecified(),
                 Ip4() + PortAnd(Load(kNh, 12, 4), "allow4") + Exprs{Accept()},
                 Ip6() + PortAnd(Load(kNh, 8, 16), "allow6") + Exprs{Accept()},
                 Ip4() + Exprs{Goto("drop4")},
                 Ip6() + Exprs{Goto("drop6")},
             }}};
  }
  return {
      {"pod",
       {
           IifEther() + PortAnd(Load(kLl, 6, 6), "mac", true) + Exprs{Goto("drop-mac")},
           IifEther() + Exprs{Load(kLl, 12, 2), Eq(nft::Be16(0x0806)), Goto("pod-arp")},
           IifEther() + Exprs{Load(kLl, 12, 2), Eq(nft::Be16(0x0800)), Goto("pod-ip4")},
           IifEther() + Exprs{Load(kLl, 12, 2), Eq(nft::Be16(0x86dd)), Goto("pod-ip6")},
           // VLAN tags, other protocols: a pod speaks IPv4, IPv6 and ARP.
           {Goto("drop-mac")},
       }},
      {"pod-arp",
       {
           // The sender's hardware and protocol addresses are what a
           // neighbour cache learns: both must be the pod's (an ARP probe
           // claims no address).
           Arp() + PortAnd(Load(kNh, 8, 6), "mac", true) + Exprs{Goto("drop4")},
           Arp() + Exprs{Load(kNh, 14, 4), Eq(std::string(4, '\0')), Accept()},
           Arp() + PortAnd(Load(kNh, 14, 4), "addr4") + Exprs{Accept()},
           {Goto("drop4")},
       }},
      {"pod-ip4",
       {
           Ip4() + PortAnd(Load(kNh, 12, 4), "addr4") + Exprs{Accept()},
           Ip4() + PortAnd(Load(kNh, 12, 4), "allow4") + Exprs{Accept()},
           {Goto("drop4")},
       }},
      {"pod-ip6",
       {
           // A pod is no router for its neighbours.
           NotRouter() + Exprs{Goto("drop6")},
           // It advertises only its own addresses (link-local ones are not
           // bound: see docs/security.md): `icmpv6 type nd-neighbor-advert
           // @th,64,16 & 0xffc0 != 0xfe80 iifname . @th,64,128 != @nd6`.
           Icmp6() + Exprs{Load(kTh, 0, 1), Eq(nft::U8(136)), Load(kTh, 8, 2),
                           nft::Bitwise{NFT_REG_1, NFT_REG_1, 2, nft::Be16(0xffc0), nft::Be16(0)},
                           nft::Cmp{NFT_CMP_NEQ, nft::Be16(0xfe80), NFT_REG_1}} +
               PortAnd(Load(kTh, 8, 16), "nd6", true) + Exprs{Goto("drop6")},
           LinkLocal(),
           Unspecified(),
           Ip6() + PortAnd(Load(kNh, 8, 16), "addr6") + Exprs{Accept()},
           Ip6() + PortAnd(Load(kNh, 8, 16), "allow6") + Exprs{Accept()},
           {Goto("drop6")},
       }},
  };
}

// The drop chains every drop of the table goes to: the packet is sent to
// NFLOG group kGuardDropLogGroup (weftd's drop records), at most
// kGuardDropLogRate a second for the table (the named limit "drop-log"),
// then counted and dropped. Over the rate it is dropped unrecorded: the
// drop never depends on the log.
std::vector<SharedChain> Chains(GuardMode mode) {
  auto chains = PolicyChains(mode);
  std::vector<std::pair<std::string, std::string>> drops = {{"drop4", "spoofed4"}, {"drop6", "spoofed6"}};
  if (mode == GuardMode::kBridge) drops.push_back({"drop-mac", "spoofed-mac"});
  for (const auto& [chain, counter] : drops)
    chains.push_back({chain,
                      {{nft::LimitRef{"drop-log"}, nft::Log{.prefix = "weft-guard " + counter, .group = kGuardDropLogGroup}},
                       {nft::CounterRef{counter}, nft::Verdict{NF_DROP, ""}}}});
  return chains;
}

// A set keyed by the port and one more field.
nft::Set PortSet(const std::string& name, nft::DataType second, uint32_t flags = 0) {
  const uint32_t len = (nft::DataTypeLen(second) + 3) / 4 * 4;
  nft::Set s{.name = name, .flags = flags, .key_type = nft::ConcatType({nft::kTypeIfname, second}),
             .key_len = 16 + len, .userdata = nft::ConcatSetUserdata({})};
  if (flags & NFT_SET_INTERVAL) s.fields = {16, nft::DataTypeLen(second)};
  return s;
}

// The table's objects (added when missing, never flushed).
void AddObjects(GuardMode mode, nft::Transaction* tx) {
  tx->Add(nft::NamedCounter{"spoofed4"}).Add(nft::NamedCounter{"spoofed6"});
  if (mode == GuardMode::kBridge) {
    tx->Add(nft::NamedCounter{"spoofed-mac"});
    tx->Add(PortSet("mac", nft::kTypeEther)).Add(PortSet("addr4", nft::kTypeIpv4)).Add(PortSet("addr6", nft::kTypeIpv6));
    // A neighbour advertisement's target address (ICMPv6 bytes 8-23): the
    // same keys as addr6, typed as the raw payload the rule reads
    // (`typeof iifname . @th,64,128`).
    tx->Add(nft::Set{.name = "nd6", .key_type = nft::ConcatType({nft::kTypeIfname, nft::kTypeInteger}), .key_len = 32,
                     .userdata = nft::ConcatSetUserdata({nft::TypeofMeta(NFT_META_IIFNAME),
                                                         nft::TypeofRaw(3, 64, 128)})});
  }
  tx->Add(nft::NamedLimit{.name = "drop-log", .rate = kGuardDropLogRate, .unit = 1, .burst = 100,
                          .type = NFT_LIMIT_PKTS});
  tx->Add(PortSet("allow4", nft::kTypeIpv4, NFT_SET_INTERVAL | NFT_SET_CONCAT));
  tx->Add(PortSet("allow6", nft::kTypeIpv6, NFT_SET_INTERVAL | NFT_SET_CONCAT));
  // The ports that have elements in allow4/allow6: a DEL asks this set
  // (one lookup) instead of dumping both allow sets.
  tx->Add(nft::Set{.name = kOptOutSet, .key_type = nft::kTypeIfname, .key_len = 16,
                   .userdata = nft::SetUserdata(nft::ByteOrder::kHost)});
}

// The guard's transaction with `marker` as the first rule's comment.
nft::Transaction Guard(GuardMode mode, const std::string& marker) {
  nft::Transaction tx(GuardFamily(mode), GuardTable(mode));
  tx.Add(nft::Table{GuardTable(mode)});
  AddObjects(mode, &tx);
  const auto chains = Chains(mode);
  // Chains first (a goto needs its target); then every shared chain is
  // emptied and refilled. The ports' chains are not touched.
  for (const auto& c : chains) tx.Add(nft::Chain{c.name, std::nullopt});
  for (const auto& c : chains) tx.Flush(nft::Chain{c.name, std::nullopt});
  for (const auto& c : chains) {
    for (size_t i = 0; i < c.rules.size(); ++i) {
      const bool not_router = std::any_of(c.rules[i].begin(), c.rules[i].end(), [](const nft::Expr& x) {
        const auto* l = std::get_if<nft::Lookup>(&x);
        return l && l->set == kNotRouterSet;
      });
      if (not_router) tx.Add(NotRouterSet()).Add(NotRouterElements());
      tx.Add(nft::Rule{.chain = c.name, .exprs = c.rules[i], .comment = c.name == "pod" && i == 0 ? marker : ""});
    }
  }
  return tx;
}

// What the marker hashes: the whole transaction, the ports' rules' shape
// included (a change to them changes the marker).
std::string RulesText(GuardMode mode) {
  std::string s = "port chains: ingress priority " + std::to_string(kGuardPortPriority) + "\n";
  s += nft::RenderTransaction(Guard(mode, ""));
  const IpAddress v4 = *IpAddress::Parse("192.0.2.1"), v6 = *IpAddress::Parse("2001:db8::1");
  for (const auto& r : PortRules(mode, v4, v6)) s += sys::DescribeNftRule(r) + "\n";
  return s;
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

// The markers, as constants: every ADD compares the kernel's with its
// mode's, and building and rendering the transaction to hash it cost an
// ADD 70-280 us. fw_test checks each is ComputedGuardMarker(mode), so a
// change to the rules without its new marker fails there.
std::string GuardMarker(GuardMode mode) {
  return mode == GuardMode::kRouted ? "weft-guard:cfcfe2ccd37b7b68" : "weft-guard:51449299d925de2f";
}

std::string ComputedGuardMarker(GuardMode mode) { return "weft-guard:" + Hex(Fnv1a64(RulesText(mode)), 16); }

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

sys::nft::Transaction GuardTransaction(GuardMode mode) { return Guard(mode, GuardMarker(mode)); }

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
  WEFT_RETURN_IF_ERROR(nft::Kernel().Apply(GuardTransaction(mode)).Prefix("install source guard " + TableRef(mode)));
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
