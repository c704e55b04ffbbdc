#include "policy/netpol_nft.h"

#include <netinet/in.h>
// after netinet/in.h, which the Linux headers' in.h defers to
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include <algorithm>

#include "sys/nft_build.h"
#include "sys/nft_render.h"
#include "sys/nft_udata.h"

namespace weft::policy::netpol {

namespace nft = sys::nft;

namespace {

// Offsets of the fields the chains match (network header: IPv4 saddr 12,
// daddr 16; IPv6 saddr 8, daddr 24; transport: sport 0, dport 2).
constexpr uint32_t kV4Src = 12, kV4Dst = 16, kV6Src = 8, kV6Dst = 24, kSport = 0, kDport = 2;
// ct state bits (nf_conntrack_common.h: IP_CT_ESTABLISHED 0 -> bit 2, ...).
constexpr uint32_t kCtInvalid = 1, kCtEstablished = 2, kCtRelated = 4;
// enum ip_conntrack_dir (linux/netfilter/nf_conntrack_tuple_common.h, not a uapi header): IP_CT_DIR_REPLY.
constexpr uint8_t kCtDirReply = 1;

nft::Payload Net(uint32_t offset, uint32_t len, uint32_t dreg = NFT_REG_1) {
  return {NFT_PAYLOAD_NETWORK_HEADER, offset, len, dreg};
}
nft::Payload Th(uint32_t offset, uint32_t len, uint32_t dreg = NFT_REG_1) {
  return {NFT_PAYLOAD_TRANSPORT_HEADER, offset, len, dreg};
}
NftExprs Family(bool v6) { return nft::MatchNfproto(v6 ? NFPROTO_IPV6 : NFPROTO_IPV4); }
nft::Payload Addr(bool v6, bool src, uint32_t dreg = NFT_REG_1) {
  return v6 ? Net(src ? kV6Src : kV6Dst, 16, dreg) : Net(src ? kV4Src : kV4Dst, 4, dreg);
}
nft::Cmp Eq(std::string data) { return {NFT_CMP_EQ, std::move(data), NFT_REG_1}; }
nft::Verdict Jump(const std::string& chain) { return {NFT_JUMP, chain}; }

// `ct <key> & bits` then `== want` (eq) or `!= 0`.
NftExprs CtBits(uint32_t key, uint32_t bits, bool eq, uint32_t want = 0) {
  return {nft::Ct{.key = key}, nft::Bitwise{NFT_REG_1, NFT_REG_1, 4, nft::Host32(bits), nft::Host32(0)},
          nft::Cmp{eq ? uint32_t{NFT_CMP_EQ} : uint32_t{NFT_CMP_NEQ}, nft::Host32(eq ? want : 0), NFT_REG_1}};
}
NftExprs CtReply() { return {nft::Ct{.key = NFT_CT_DIRECTION}, Eq(nft::U8(kCtDirReply))}; }
// `ct mark & M == 0 ct state established,related`: what passes unjudged.
NftExprs Established() {
  return CtBits(NFT_CT_MARK, kRecheckMark, true) + CtBits(NFT_CT_STATE, kCtEstablished | kCtRelated, false);
}
NftExprs RecheckMarked() { return CtBits(NFT_CT_MARK, kRecheckMark, true, kRecheckMark); }
// `ip saddr vmap @map`.
NftExprs Vmap(bool v6, bool src, const std::string& map) {
  return Family(v6) + NftExprs{Addr(v6, src), nft::Lookup{.set = map, .dreg = NFT_REG_VERDICT}};
}
// `iifgroup G meta nfproto ipv4 ip saddr != @local4`: a pod port whose pod
// is not local yet.
NftExprs Pending(uint32_t group, bool in, bool v6) {
  return NftExprs{nft::Meta{in ? uint32_t{NFT_META_OIFGROUP} : uint32_t{NFT_META_IIFGROUP}}, Eq(nft::Host32(group))} +
         Family(v6) + NftExprs{Addr(v6, !in), nft::Lookup{.set = v6 ? "local6" : "local4", .invert = true}};
}

const char kDropIngress[] = "drop-ingress";
const char kDropEgress[] = "drop-egress";
const char kDropLog[] = "drop-log";
constexpr char kNdSet[] = "__set_nd";


// A base chain of the filter type, policy accept.
nft::Chain Base(const std::string& name, uint32_t hook) {
  return nft::Chain{name, nft::Hook{.num = hook, .priority = 0, .type = "filter", .policy = NF_ACCEPT}};
}

std::vector<NftRule> DropChainRules(const std::string& kind) {
  bool ingress = kind == "in" || kind == "rin" || kind == "pending-in";
  return {nftr::MakeRule({nft::LimitRef{kDropLog}, nft::Log{.prefix = "weft-np " + kind, .group = kDropLogGroup}},
                         nft::Verdict{NFT_CONTINUE, ""}),
          nftr::MakeRule({nft::CounterRef{ingress ? kDropIngress : kDropEgress}}, nftr::Drop())};
}

std::vector<NftRule> RecheckReplyRules() {
  return {nftr::MakeRule(Vmap(false, false, "egress4r"), nft::Verdict{NFT_CONTINUE, ""}),
          nftr::MakeRule(Vmap(true, false, "egress6r"), nft::Verdict{NFT_CONTINUE, ""}),
          nftr::MakeRule(Vmap(false, true, "ingress4r"), nft::Verdict{NFT_CONTINUE, ""}),
          nftr::MakeRule(Vmap(true, true, "ingress6r"), nft::Verdict{NFT_CONTINUE, ""}),
          nftr::MakeRule({}, nftr::Accept())};
}

std::vector<NftRule> ForwardRules(uint32_t group) {
  const nft::Verdict none{NFT_CONTINUE, ""};
  return {nftr::MakeRule(Established(), nftr::Accept()),
          nftr::MakeRule(CtBits(NFT_CT_STATE, kCtRelated, false), nftr::Accept()),
          nftr::MakeRule(CtReply() + RecheckMarked(), Jump("recheck-reply")),
          nftr::MakeRule(Pending(group, false, false), nftr::Goto("pending-eg"), "pending pod"),
          nftr::MakeRule(Pending(group, false, true), nftr::Goto("pending-eg"), "pending pod"),
          nftr::MakeRule(Pending(group, true, false), nftr::Goto("pending-in"), "pending pod"),
          nftr::MakeRule(Pending(group, true, true), nftr::Goto("pending-in"), "pending pod"),
          nftr::MakeRule(Vmap(false, true, "egress4"), none),
          nftr::MakeRule(Vmap(true, true, "egress6"), none),
          nftr::MakeRule(Vmap(false, false, "ingress4"), none),
          nftr::MakeRule(Vmap(true, false, "ingress6"), none)};
}

// A local pod's traffic to its own node (docs/clusternetworkpolicy.md, "To
// the pod's own node"): the input hook judges a new connection of a pod
// with a node-<hash> chain by the pod's address, after what always passes
// (replies, the node's own connections, neighbour discovery); the output
// hook judges the node's replies of connections marked for a recheck. A
// pending pod is dropped as in the forward hook. An IPv6 link-local source
// names no pod (every pod has one, none is in the maps), so a pod port's
// link-local packet to the node passes only for neighbour discovery and MLD.
std::vector<NftRule> InputRules(uint32_t group) {
  const nft::Verdict none{NFT_CONTINUE, ""};
  std::string prefix = kPodPortPattern;
  prefix.pop_back();  // "wft*": the name starts so
  NftExprs link_local = NftExprs{nft::Meta{NFT_META_IIFNAME}, Eq(prefix)} + Family(true) +
                        NftExprs{Addr(true, true),
                                 nft::Bitwise{NFT_REG_1, NFT_REG_1, 16, nft::AddrBytes("ffc0::"), std::string(16, '\0')},
                                 Eq(nft::AddrBytes("fe80::"))};
  NftExprs nd = Family(true) + nft::MatchL4proto(IPPROTO_ICMPV6) + NftExprs{Th(0, 1), nft::Lookup{.set = kNdSet}};
  return {nftr::MakeRule(Established(), nftr::Accept()),
          nftr::MakeRule(CtBits(NFT_CT_STATE, kCtRelated, false), nftr::Accept()),
          nftr::MakeRule(CtReply(), nftr::Accept(), "the node's own connections"),
          nftr::MakeRule(nd, nftr::Accept(), "neighbour discovery"),
          nftr::MakeRule(link_local, nftr::Goto("drop-eg"), "pod link-local"),
          nftr::MakeRule(Pending(group, false, false), nftr::Goto("pending-eg"), "pending pod"),
          nftr::MakeRule(Pending(group, false, true), nftr::Goto("pending-eg"), "pending pod"),
          nftr::MakeRule(Vmap(false, true, "node4"), none),
          nftr::MakeRule(Vmap(true, true, "node6"), none)};
}

std::vector<NftRule> OutputRules() {
  const nft::Verdict none{NFT_CONTINUE, ""};
  return {nftr::MakeRule(CtReply() + RecheckMarked() + Vmap(false, false, "node4r"), none),
          nftr::MakeRule(CtReply() + RecheckMarked() + Vmap(true, false, "node6r"), none)};
}

// The neighbour discovery and MLD types the input hook lets through:
// router and neighbour solicitation, neighbour advertisement, MLD and MLDv2
// reports.
nft::Elements NdElements() { return nft::Icmpv6TypeElements(kNdSet, {133, 135, 136, 131, 143}); }

}  // namespace

nft::Set DispatchMapObject(const std::string& name) {
  const bool v6 = name.find('6') != std::string::npos;
  return nft::Set{.name = name,
                  .flags = NFT_SET_MAP,
                  .key_type = v6 ? nft::kTypeIpv6 : nft::kTypeIpv4,
                  .key_len = v6 ? 16u : 4u,
                  .data_type = nft::kTypeVerdict,
                  .userdata = nft::MapUserdata(nft::ByteOrder::kBig)};
}

namespace {

nft::Element MapElement(const std::string& ip, const std::string& chain) {
  return {.key = nft::AddrBytes(ip), .verdict = Jump(chain)};
}

// The table's parts in the order the text path declared them (nft lists
// chains and sets in the order they were made).
struct FixedChain {
  const char* name;
  std::optional<uint32_t> hook;
};

void AddRules(nft::Transaction& tx, const std::string& chain, const std::vector<NftRule>& rules) {
  for (NftRule r : rules) {
    r.chain = chain;
    tx.Add(std::move(r));
  }
}

// Elements ops of `set`, in batches nft would send in one command.
Status AddElementsOp(nft::Transaction& tx, bool add, const std::string& name, const SetDef& def,
                     const std::set<std::string>& elements) {
  if (elements.empty()) return Status::Ok();
  WEFT_ASSIGN_OR_RETURN(auto elems, SetElements(def, elements));
  nft::Elements e{name, std::move(elems)};
  if (add) tx.Add(std::move(e));
  else tx.Delete(std::move(e));
  return Status::Ok();
}

void MapChanges(nft::Transaction& del, nft::Transaction& add, const std::string& name, const DispatchMap& want,
                const DispatchMap& have) {
  nft::Elements dels{name, {}}, adds{name, {}};
  for (const auto& [ip, chain] : have) {
    auto it = want.find(ip);
    if (it == want.end() || it->second != chain) dels.elems.push_back({.key = nft::AddrBytes(ip)});
  }
  for (const auto& [ip, chain] : want) {
    auto it = have.find(ip);
    if (it == have.end() || it->second != chain) adds.elems.push_back(MapElement(ip, chain));
  }
  if (!dels.elems.empty()) del.Delete(std::move(dels));
  if (!adds.elems.empty()) add.Add(std::move(adds));
}

}  // namespace

namespace nftr {

nft::Verdict Accept() { return {NF_ACCEPT, ""}; }
nft::Verdict Return() { return {NFT_RETURN, ""}; }
nft::Verdict Drop() { return {NF_DROP, ""}; }
nft::Verdict Goto(const std::string& chain) { return {NFT_GOTO, chain}; }

NftExprs InSet(bool v6, bool src, const std::string& set) {
  return Family(v6) + NftExprs{Addr(v6, src), nft::Lookup{.set = set}};
}

NftExprs AddrIs(const IpAddress& ip, bool src) {
  return Family(!ip.is_v4()) + NftExprs{Addr(!ip.is_v4(), src), Eq(ip.ToBytes())};
}

NftExprs Port(Proto proto, uint16_t port, uint16_t end) {
  NftExprs out = nft::MatchL4proto(static_cast<uint8_t>(proto));
  if (port == 0) return out;
  out.push_back(Th(kDport, 2));
  if (end > port) {
    out.push_back(nft::Cmp{NFT_CMP_GTE, nft::Be16(port), NFT_REG_1});
    out.push_back(nft::Cmp{NFT_CMP_LTE, nft::Be16(end), NFT_REG_1});
  } else {
    out.push_back(Eq(nft::Be16(port)));
  }
  return out;
}

NftExprs NamedPortIn(bool v6, const std::string& set) {
  // The concatenation's fields each start at the next 4-byte register.
  const uint32_t l4 = v6 ? NFT_REG32_04 : NFT_REG32_01, port = v6 ? NFT_REG32_05 : NFT_REG32_02;
  return Family(v6) + NftExprs{Addr(v6, false, NFT_REG32_00), nft::Meta{NFT_META_L4PROTO, l4}, Th(kDport, 2, port),
                               nft::Lookup{.set = set, .sreg = NFT_REG32_00}};
}

NftExprs CtInvalid() { return CtBits(NFT_CT_STATE, kCtInvalid, false); }

NftRule MakeRule(NftExprs match, nft::Verdict verdict, const std::string& comment) {
  NftRule r;
  r.exprs = std::move(match);
  if (verdict.code != NFT_CONTINUE) r.exprs.push_back(std::move(verdict));
  r.comment = comment.size() > 127 ? comment.substr(0, 127) : comment;
  return r;
}

NftRule ReplyOf(const NftRule& rule) {
  NftRule out = rule;
  for (auto& e : out.exprs) {
    if (auto* p = std::get_if<nft::Payload>(&e)) {
      if (p->base == NFT_PAYLOAD_NETWORK_HEADER) {
        if (p->len == 4 && p->offset == kV4Src) p->offset = kV4Dst;
        else if (p->len == 4 && p->offset == kV4Dst) p->offset = kV4Src;
        else if (p->len == 16 && p->offset == kV6Src) p->offset = kV6Dst;
        else if (p->len == 16 && p->offset == kV6Dst) p->offset = kV6Src;
      } else if (p->base == NFT_PAYLOAD_TRANSPORT_HEADER && p->offset == kDport && p->len == 2) {
        p->offset = kSport;
      }
    } else if (auto* v = std::get_if<nft::Verdict>(&e)) {
      if (v->code == NFT_GOTO) v->chain = "r" + v->chain;
    }
  }
  return out;
}

std::string Render(const NftRule& rule) { return nft::RenderRule(nft::Family::kInet, rule); }

}  // namespace nftr

Result<std::string> ElementKey(const std::string& type, const std::string& element) {
  auto bad = [&](const std::string& why) {
    return Status::Error(Reason::kMalformed, Domain::kFirewall,
                         "set element \"" + element + "\" of type " + type + ": " + why);
  };
  std::vector<std::string> types, fields;
  for (size_t at = 0;;) {
    size_t dot = type.find(" . ", at);
    types.push_back(type.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
    if (dot == std::string::npos) break;
    at = dot + 3;
  }
  for (size_t at = 0;;) {
    size_t dot = element.find(" . ", at);
    fields.push_back(element.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
    if (dot == std::string::npos) break;
    at = dot + 3;
  }
  if (types.size() != fields.size()) return bad("wrong number of fields");
  std::string key;
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string& t = types[i];
    const std::string& f = fields[i];
    if (t == "ipv4_addr" || t == "ipv6_addr") {
      auto ip = IpAddress::Parse(f);
      if (!ip || ip->is_v4() != (t == "ipv4_addr")) return bad("not an " + t + ": " + f);
      key += ip->ToBytes();
    } else if (t == "inet_proto") {
      uint8_t proto = 0;
      for (Proto p : {Proto::kTcp, Proto::kUdp, Proto::kSctp})
        if (f == NftProtoName(p)) proto = static_cast<uint8_t>(p);
      if (proto == 0) return bad("unknown protocol " + f);
      key += std::string(1, static_cast<char>(proto)) + std::string(3, '\0');
    } else if (t == "inet_service") {
      if (f.empty() || f.size() > 5 || f.find_first_not_of("0123456789") != std::string::npos) return bad("bad port " + f);
      unsigned long port = std::stoul(f);
      if (port > 65535) return bad("bad port " + f);
      key += static_cast<char>(port >> 8);
      key += static_cast<char>(port & 0xff);
      key += std::string(2, '\0');
    } else {
      return bad("unsupported type " + t);
    }
  }
  return key;
}

nft::Set SetObject(const std::string& name, const SetDef& def) {
  nft::Set s{.name = name, .flags = def.interval ? uint32_t{NFT_SET_INTERVAL} : 0u};
  if (def.type == "ipv4_addr" || def.type == "ipv6_addr") {
    const bool v6 = def.type == "ipv6_addr";
    s.key_type = v6 ? nft::kTypeIpv6 : nft::kTypeIpv4;
    s.key_len = v6 ? 16 : 4;
    s.userdata = nft::SetUserdata(nft::ByteOrder::kBig);
  } else {
    // "ipv4_addr . inet_proto . inet_service" (a named-port set).
    const bool v6 = def.type.rfind("ipv6_addr", 0) == 0;
    s.key_type = nft::ConcatType({v6 ? nft::kTypeIpv6 : nft::kTypeIpv4, nft::kTypeInetProto, nft::kTypeInetService});
    s.key_len = v6 ? 24 : 12;
    s.userdata = nft::ConcatSetUserdata({});
  }
  return s;
}

Result<std::vector<nft::Element>> SetElements(const SetDef& def, const std::set<std::string>& elements) {
  std::vector<nft::Element> out;
  if (!def.interval) {
    out.reserve(elements.size());
    for (const auto& e : elements) {
      WEFT_ASSIGN_OR_RETURN(auto key, ElementKey(def.type, e));
      out.push_back({.key = std::move(key)});
    }
    return out;
  }
  // "a-b" or "a", sorted by first address (the elements' text order is not).
  std::vector<std::pair<std::string, std::string>> ranges;
  for (const auto& e : elements) {
    auto dash = e.find('-');
    std::string first = e.substr(0, dash), last = dash == std::string::npos ? first : e.substr(dash + 1);
    WEFT_ASSIGN_OR_RETURN(auto a, ElementKey(def.type, first));
    WEFT_ASSIGN_OR_RETURN(auto b, ElementKey(def.type, last));
    ranges.emplace_back(std::move(a), std::move(b));
  }
  std::sort(ranges.begin(), ranges.end());
  return nft::IntervalRangeElements(ranges);
}

Result<nft::Transaction> FullTransaction(const TableView& want) {
  nft::Transaction tx(nft::Family::kInet, kTable);
  // add, delete, add: replaced in one transaction whether it exists or not.
  tx.Add(nft::Table{kTable}).Delete(nft::Table{kTable}).Add(nft::Table{kTable});
  tx.Add(nft::NamedCounter{kDropIngress}).Add(nft::NamedCounter{kDropEgress});
  tx.Add(nft::NamedLimit{.name = kDropLog, .rate = kDropLogRate, .unit = 1, .burst = kDropLogBurst,
                         .type = NFT_LIMIT_PKTS});
  // Chains first (a rule may go to any of them), in the text path's order.
  for (const auto& [chain, kind] : kDropChains) tx.Add(nft::Chain{chain});
  for (const auto& [name, rules] : *want.chains) tx.Add(nft::Chain{name});
  tx.Add(nft::Chain{"recheck-reply"});
  tx.Add(Base("forward", NF_INET_FORWARD));
  tx.Add(Base("input", NF_INET_LOCAL_IN));
  tx.Add(Base("output", NF_INET_LOCAL_OUT));
  for (const auto& [name, def] : *want.sets) {
    tx.Add(SetObject(name, def));
    WEFT_RETURN_IF_ERROR(AddElementsOp(tx, true, name, def, def.elements));
  }
  for (size_t i = 0; i < std::size(kDispatchMaps); ++i) {
    tx.Add(DispatchMapObject(kDispatchMaps[i]));
    nft::Elements e{kDispatchMaps[i], {}};
    for (const auto& [ip, chain] : *want.maps[i]) e.elems.push_back(MapElement(ip, chain));
    if (!e.elems.empty()) tx.Add(std::move(e));
  }
  for (const auto& [chain, kind] : kDropChains) AddRules(tx, chain, DropChainRules(kind));
  for (const auto& [name, rules] : *want.chains) AddRules(tx, name, rules);
  AddRules(tx, "recheck-reply", RecheckReplyRules());
  AddRules(tx, "forward", ForwardRules(want.pending_group));
  tx.Add(nft::Icmpv6TypeSet(kNdSet)).Add(NdElements());
  AddRules(tx, "input", InputRules(want.pending_group));
  AddRules(tx, "output", OutputRules());
  return tx;
}

Result<nft::Transaction> DeltaTransaction(const TableView& want, const TableDelta& delta) {
  const auto f = nft::Family::kInet;
  nft::Transaction elems_del(f, kTable), sets_add(f, kTable), chains_new(f, kTable), chains(f, kTable),
      maps_del(f, kTable), maps_add(f, kTable), chains_del(f, kTable), sets_del(f, kTable);
  for (const auto& [name, c] : *delta.sets) {
    if (c.deleted) {
      sets_del.Delete(nft::Set{.name = name});
      continue;
    }
    auto w = want.sets->find(name);
    if (w == want.sets->end()) continue;
    const SetDef& def = w->second;
    if (c.created) {
      sets_add.Add(SetObject(name, def));
      WEFT_RETURN_IF_ERROR(AddElementsOp(sets_add, true, name, def, def.elements));
    } else if (c.flushed || (def.interval && (!c.adds.empty() || !c.dels.empty()))) {
      // An interval set is refilled whole: its elements are ranges' bounds.
      sets_add.Flush(nft::Set{.name = name});
      WEFT_RETURN_IF_ERROR(AddElementsOp(sets_add, true, name, def, def.elements));
    } else {
      WEFT_RETURN_IF_ERROR(AddElementsOp(elems_del, false, name, def, c.dels));
      WEFT_RETURN_IF_ERROR(AddElementsOp(sets_add, true, name, def, c.adds));
    }
  }
  for (const auto& [name, c] : delta.chains) {
    if (c.want) {
      if (c.have && *c.have == *c.want) continue;
      if (!c.have) chains_new.Add(nft::Chain{name});
      else chains.Flush(nft::Chain{name});
      AddRules(chains, name, *c.want);
    } else if (c.have) {
      chains_del.Delete(nft::Chain{name});
    }
  }
  for (size_t i = 0; i < std::size(kDispatchMaps); ++i)
    MapChanges(maps_del, maps_add, kDispatchMaps[i], *want.maps[i], *delta.applied_maps[i]);
  nft::Transaction tx(f, kTable);
  for (auto* part : {&elems_del, &sets_add, &chains_new, &chains, &maps_del, &maps_add, &chains_del, &sets_del})
    tx.Append(std::move(*part));
  return tx;
}

}  // namespace weft::policy::netpol
