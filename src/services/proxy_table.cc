#include "services/proxy_table.h"

#include <netinet/in.h>
// after netinet/in.h, which the Linux headers' in.h defers to
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/rtnetlink.h>

#include <algorithm>

#include "base/strings.h"
#include "sys/nft_build.h"
#include "sys/nft_udata.h"

namespace weft::services {
namespace {

using Exprs = std::vector<nft::Expr>;

constexpr uint32_t kV4Src = 12, kV4Dst = 16, kV6Src = 8, kV6Dst = 24, kDport = 2;
constexpr uint32_t kCtStateNew = 8;  // NF_CT_STATE_BIT(IP_CT_NEW)
// kube-proxy's priorities: the filter hooks at dstnat - 10, NAT at dstnat and srcnat.
constexpr int32_t kFilterPriority = -110, kDstnatPriority = -100, kSrcnatPriority = 100;

nft::Payload Net(uint32_t offset, uint32_t len, uint32_t dreg = NFT_REG_1) {
  return {NFT_PAYLOAD_NETWORK_HEADER, offset, len, dreg};
}
nft::Payload Addr(bool v6, bool src, uint32_t dreg = NFT_REG_1) {
  return v6 ? Net(src ? kV6Src : kV6Dst, 16, dreg) : Net(src ? kV4Src : kV4Dst, 4, dreg);
}
nft::Payload Dport(uint32_t dreg = NFT_REG_1) { return {NFT_PAYLOAD_TRANSPORT_HEADER, kDport, 2, dreg}; }
nft::Cmp Eq(std::string data) { return {NFT_CMP_EQ, std::move(data), NFT_REG_1}; }
Exprs Family(bool v6) { return nft::MatchNfproto(v6 ? NFPROTO_IPV6 : NFPROTO_IPV4); }
nft::Verdict Jump(const std::string& c) { return {NFT_JUMP, c}; }
nft::Verdict Goto(const std::string& c) { return {NFT_GOTO, c}; }

// `ip saddr 10.0.0.0/8` (eq) or `ip saddr != 10.0.0.0/8`.
Exprs InPrefix(const IpPrefix& p, bool src, bool eq) {
  const bool v6 = !p.is_v4();
  std::string mask(p.addr().size(), '\0');
  for (int bit = 0; bit < p.len(); ++bit) mask[bit / 8] = static_cast<char>(mask[bit / 8] | (0x80 >> (bit % 8)));
  return {Addr(v6, src),
          nft::Bitwise{NFT_REG_1, NFT_REG_1, static_cast<uint32_t>(p.addr().size()), mask,
                       std::string(p.addr().size(), '\0')},
          nft::Cmp{eq ? uint32_t{NFT_CMP_EQ} : uint32_t{NFT_CMP_NEQ}, p.Masked().addr().ToBytes(), NFT_REG_1}};
}
// `fib daddr type local` / `fib saddr type local`.
Exprs FibLocal(bool daddr) {
  return {nft::Fib{daddr ? uint32_t{NFTA_FIB_F_DADDR} : uint32_t{NFTA_FIB_F_SADDR}, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1},
          Eq(nft::Host32(RTN_LOCAL))};
}
// `ip daddr != 127.0.0.0/8` / `ip6 daddr != ::1`: NodePorts are not served on loopback (no route_localnet).
Exprs NotLoopback(bool v6) {
  if (v6) return {Addr(true, false), nft::Cmp{NFT_CMP_NEQ, nft::AddrBytes("::1"), NFT_REG_1}};
  return InPrefix(*IpPrefix::Parse("127.0.0.0/8"), false, false);
}
// `ip daddr . meta l4proto . th dport vmap @map` (each field in the next 4-byte register).
Exprs AddrProtoPortVmap(bool v6, const std::string& map) {
  const uint32_t l4 = v6 ? NFT_REG32_04 : NFT_REG32_01, port = v6 ? NFT_REG32_05 : NFT_REG32_02;
  return Family(v6) + Exprs{Addr(v6, false, NFT_REG32_00), nft::Meta{NFT_META_L4PROTO, l4}, Dport(port),
                            nft::Lookup{.set = map, .sreg = NFT_REG32_00, .dreg = NFT_REG_VERDICT}};
}
// `fib daddr type local meta l4proto . th dport vmap @map` on a non-loopback address of the family.
Exprs NodePortVmap(bool v6, const std::string& map) {
  return Family(v6) + NotLoopback(v6) + FibLocal(true) +
         Exprs{nft::Meta{NFT_META_L4PROTO, NFT_REG32_00}, Dport(NFT_REG32_01),
               nft::Lookup{.set = map, .sreg = NFT_REG32_00, .dreg = NFT_REG_VERDICT}};
}
// `ct state new`.
Exprs CtNew() {
  return {nft::Ct{.key = NFT_CT_STATE},
          nft::Bitwise{NFT_REG_1, NFT_REG_1, 4, nft::Host32(kCtStateNew), nft::Host32(0)},
          nft::Cmp{NFT_CMP_NEQ, nft::Host32(0), NFT_REG_1}};
}

TableRule Rule(Exprs match, std::optional<nft::Verdict> verdict = std::nullopt, const std::string& comment = "") {
  TableRule r;
  r.rule.exprs = std::move(match);
  if (verdict) r.rule.exprs.push_back(*verdict);
  r.rule.comment = comment;
  return r;
}

nft::Set VerdictMap(const std::string& name, std::vector<nft::DataType> key) {
  uint32_t len = 0;
  for (auto t : key) len += (nft::DataTypeLen(t) + 3) / 4 * 4;
  return nft::Set{.name = name,
                  .flags = NFT_SET_MAP,
                  .key_type = nft::ConcatType(key),
                  .key_len = len,
                  .data_type = nft::kTypeVerdict,
                  .userdata = nft::ConcatVerdictMapUserdata()};
}

nft::Chain Base(const std::string& name, uint32_t hook, const char* type, int32_t priority) {
  return nft::Chain{name, nft::Hook{.num = hook, .priority = priority, .type = type, .policy = NF_ACCEPT}};
}

// "abcdefgh": 40 bits of FNV-1a 64 in base32 (kube-proxy's hashes are
// SHA-256 in base32; any stable hash serves).
std::string Hash8(const std::string& s) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  const uint64_t h = Fnv1a64(s);
  std::string out;
  for (int i = 0; i < 8; ++i) out += kAlphabet[(h >> (59 - 5 * i)) & 31];
  return out;
}

// The map verdicts of a service port's traffic with nowhere to go.
nft::Verdict RejectVerdict() { return Goto(kRejectChain); }
nft::Verdict DropVerdict() { return nft::Verdict{NF_DROP, ""}; }

uint8_t NatFamily(bool v6) { return v6 ? NFPROTO_IPV6 : NFPROTO_IPV4; }

// One service port in one family (proxier.go's loop body).
class PortBuilder {
 public:
  PortBuilder(const Service& svc, const ServicePort& port, const IpAddress& cluster_ip, const Config& cfg,
              ServiceObjects& out)
      : svc_(svc), port_(port), cip_(cluster_ip), v6_(!cluster_ip.is_v4()), cfg_(cfg), out_(out),
        name_(PortName(svc, port)) {
    for (const auto& p : cfg.cluster_cidrs)
      if (p.is_v4() == !v6_) cidr_ = p;
  }

  void Build(const std::vector<PortEndpoint>& all) {
    const Categorized c = CategorizeEndpoints(all, svc_, cfg_.node);
    const std::string cluster_chain = ChainName("svc", v6_, name_), local_chain = ChainName("local", v6_, name_),
                      ext_chain = ChainName("ext", v6_, name_);
    const bool uses_cluster = !c.cluster.empty() && svc_.UsesClusterEndpoints();
    const bool uses_local = !c.local.empty() && svc_.UsesLocalEndpoints();
    std::string internal_chain = cluster_chain;
    bool has_internal = c.has_any;
    if (svc_.InternalLocal()) {
      internal_chain = local_chain;
      has_internal = !c.local.empty();
    }
    std::string external_policy_chain = cluster_chain;
    bool has_external = c.has_any;
    if (svc_.ExternalLocal()) {
      external_policy_chain = local_chain;
      has_external = !c.local.empty();
    }
    const bool uses_ext = c.has_any && svc_.ExternallyAccessible();
    // Nowhere to go: no endpoint at all, rejected; endpoints, but none the policy may use on this node, dropped
    // (kube-proxy's verdicts, the same for internal and external traffic).
    const nft::Verdict filter = c.has_any ? DropVerdict() : RejectVerdict();

    std::vector<IpAddress> external_ips, lb_ips;
    for (const auto& ip : svc_.external_ips)
      if (ip.is_v4() == !v6_) external_ips.push_back(ip);
    for (const auto& ip : svc_.lb_ips)
      if (ip.is_v4() == !v6_) lb_ips.push_back(ip);

    // The maps: where each destination goes.
    const std::string ips = ServiceIpsMap(v6_), none = NoEndpointServicesMap(v6_);
    if (has_internal) Entry(ips, MapKeyBytes(cip_, port_.proto, port_.port), Goto(internal_chain));
    else Entry(none, MapKeyBytes(cip_, port_.proto, port_.port), filter);
    for (const auto* list : {&external_ips, &lb_ips})
      for (const auto& ip : *list) {
        if (c.has_any) Entry(ips, MapKeyBytes(ip, port_.proto, port_.port), Goto(ext_chain));
        if (!has_external) Entry(none, MapKeyBytes(ip, port_.proto, port_.port), filter);
      }
    if (port_.node_port) {
      const std::string key = MapKeyBytes(std::nullopt, port_.proto, port_.node_port);
      if (c.has_any) Entry(NodePortsMap(v6_), key, Goto(ext_chain));
      if (!has_external) Entry(NoEndpointNodePortsMap(v6_), key, filter);
    }

    // The policy chains, and the internal traffic's masquerade in the one ClusterIP traffic takes.
    if (uses_cluster) out_.chains[cluster_chain] = PolicyRules(c.cluster, internal_chain == cluster_chain && has_internal);
    if (uses_local) out_.chains[local_chain] = PolicyRules(c.local, internal_chain == local_chain && has_internal);

    if (uses_ext) {
      std::vector<TableRule>& ext = out_.chains[ext_chain];
      if (!svc_.ExternalLocal()) {
        // Endpoints elsewhere may be chosen: masquerade, so the reply comes back through this node.
        ext.push_back(Rule({}, Jump(kMarkMasqChain)));
      } else {
        if (cidr_)
          ext.push_back(Rule(Family(v6_) + InPrefix(*cidr_, true, true), Goto(cluster_chain), "short-circuit pod traffic"));
        ext.push_back(Rule(FibLocal(false), Jump(kMarkMasqChain), "masquerade local traffic"));
        ext.push_back(Rule(FibLocal(false), Goto(cluster_chain), "short-circuit local traffic"));
      }
      if (has_external) ext.push_back(Rule({}, Goto(external_policy_chain)));
    }

    for (const auto& e : c.reachable) {
      const std::string aff = ChainName("aff", v6_, name_, EndpointPart(e));
      if (svc_.affinity_client_ip)
        out_.sets[aff] = nft::Set{.name = aff,
                                  .flags = NFT_SET_TIMEOUT | NFT_SET_EVAL,
                                  .key_type = v6_ ? nft::kTypeIpv6 : nft::kTypeIpv4,
                                  .key_len = v6_ ? 16u : 4u,
                                  .timeout_ms = uint64_t{svc_.affinity_timeout} * 1000,
                                  .userdata = nft::SetUserdata(nft::ByteOrder::kBig)};
      std::vector<TableRule>& rules = out_.chains[ChainName("ep", v6_, name_, EndpointPart(e))];
      // Hairpin: a pod reaching itself through the Service is masqueraded, or its reply would skip the DNAT.
      rules.push_back(Rule(Family(v6_) + Exprs{Addr(v6_, true), Eq(e.ip.ToBytes())}, Jump(kMarkMasqChain)));
      if (svc_.affinity_client_ip)
        rules.push_back(Rule(Family(v6_) + Exprs{Addr(v6_, true), nft::Dynset{NFT_DYNSET_OP_UPDATE, aff, NFT_REG_1, 0}}));
      rules.push_back(Rule(nft::MatchL4proto(static_cast<uint8_t>(port_.proto)) +
                           Exprs{nft::Immediate{NFT_REG_1, e.ip.ToBytes()}, nft::Immediate{NFT_REG_2, nft::Be16(e.port)},
                                 nft::Nat{.type = NFT_NAT_DNAT, .family = NatFamily(v6_), .reg_addr = NFT_REG_1,
                                          .reg_proto = NFT_REG_2}}));
    }

    PortState st{v6_, port_.proto, port_.port, port_.node_port, {cip_}, c.reachable, c.has_any, name_};
    st.vips.insert(st.vips.end(), external_ips.begin(), external_ips.end());
    st.vips.insert(st.vips.end(), lb_ips.begin(), lb_ips.end());
    out_.ports.push_back(std::move(st));
  }

 private:
  void Entry(const std::string& map, std::string key, nft::Verdict v) {
    out_.entries.insert_or_assign(MapKey{map, std::move(key)}, std::move(v));
  }

  // A policy chain: ClusterIP traffic's masquerade (when this chain is the
  // ClusterIP's), affinity, then a random endpoint.
  std::vector<TableRule> PolicyRules(const std::vector<PortEndpoint>& eps, bool internal) {
    std::vector<TableRule> rules;
    if (internal) {
      Exprs to_vip = Family(v6_) + Exprs{Addr(v6_, false), Eq(cip_.ToBytes())} +
                     nft::MatchL4proto(static_cast<uint8_t>(port_.proto)) + Exprs{Dport(), Eq(nft::Be16(port_.port))};
      if (cfg_.masquerade_all) rules.push_back(Rule(to_vip, Jump(kMarkMasqChain)));
      // From off the pod network (a route to the service range through this node): masquerade, as the reply may leave by another node.
      else if (cidr_) rules.push_back(Rule(to_vip + InPrefix(*cidr_, true, false), Jump(kMarkMasqChain)));
    }
    if (svc_.affinity_client_ip)
      for (const auto& e : eps)
        rules.push_back(Rule(Family(v6_) + Exprs{Addr(v6_, true),
                                                 nft::Lookup{.set = ChainName("aff", v6_, name_, EndpointPart(e))}},
                             Goto(ChainName("ep", v6_, name_, EndpointPart(e)))));
    TableRule pick = Rule({nft::Numgen{NFT_NG_RANDOM, static_cast<uint32_t>(eps.size()), 0, NFT_REG_1},
                           nft::Lookup{.set = kAnonymousMap, .sreg = NFT_REG_1, .dreg = NFT_REG_VERDICT}});
    for (size_t i = 0; i < eps.size(); ++i)
      pick.vmap.push_back(nft::Element{.key = nft::Host32(static_cast<uint32_t>(i)),
                                       .verdict = Goto(ChainName("ep", v6_, name_, EndpointPart(eps[i])))});
    rules.push_back(std::move(pick));
    return rules;
  }

  const Service& svc_;
  const ServicePort& port_;
  const IpAddress cip_;
  const bool v6_;
  const Config& cfg_;
  ServiceObjects& out_;
  const std::string name_;
  std::optional<IpPrefix> cidr_;
};

}  // namespace

const char* ServiceIpsMap(bool v6) { return v6 ? "service-ips6" : "service-ips4"; }
const char* NodePortsMap(bool v6) { return v6 ? "service-nodeports6" : "service-nodeports4"; }
const char* NoEndpointServicesMap(bool v6) { return v6 ? "no-endpoint-services6" : "no-endpoint-services4"; }
const char* NoEndpointNodePortsMap(bool v6) { return v6 ? "no-endpoint-nodeports6" : "no-endpoint-nodeports4"; }

std::vector<std::string> AllMaps() {
  std::vector<std::string> out;
  for (bool v6 : {false, true})
    for (const char* m : {ServiceIpsMap(v6), NodePortsMap(v6), NoEndpointServicesMap(v6), NoEndpointNodePortsMap(v6)})
      out.push_back(m);
  return out;
}

std::string PortName(const Service& svc, const ServicePort& port) {
  return svc.ns + "/" + svc.name + "/" + ProtoName(port.proto) + "/" + port.name;
}

std::string ChainName(const char* kind, bool v6, const std::string& port_name, const std::string& endpoint) {
  const std::string rest = port_name + (endpoint.empty() ? "" : "__" + endpoint);
  std::string name = std::string(kind) + (v6 ? "6" : "4") + "-" + Hash8((v6 ? "6|" : "4|") + rest) + "-" + rest;
  if (name.size() > kMaxNameLen) name.resize(kMaxNameLen);
  return name;
}

std::string EndpointPart(const PortEndpoint& e) {
  std::string ip = e.ip.ToString();
  std::replace(ip.begin(), ip.end(), ':', '.');
  return ip + "/" + std::to_string(e.port);
}

std::string MapKeyBytes(const std::optional<IpAddress>& addr, Proto proto, uint16_t port) {
  std::string key = addr ? addr->ToBytes() : "";
  key += nft::U8(static_cast<uint8_t>(proto)) + std::string(3, '\0');
  key += nft::Be16(port) + std::string(2, '\0');
  return key;
}

ServiceObjects BuildService(const Service& svc, const std::vector<const EndpointSlice*>& slices, const Config& cfg) {
  ServiceObjects out;
  if (!svc.skip.empty()) return out;
  for (const IpAddress& cip : svc.cluster_ips)
    for (const ServicePort& port : svc.ports)
      PortBuilder(svc, port, cip, cfg, out).Build(MergeEndpoints(slices, port, !cip.is_v4(), cfg.node));
  return out;
}

void AddFixedObjects(nft::Transaction& tx, const Config& cfg) {
  for (bool v6 : {false, true}) {
    const nft::DataType addr = v6 ? nft::kTypeIpv6 : nft::kTypeIpv4;
    tx.Add(VerdictMap(ServiceIpsMap(v6), {addr, nft::kTypeInetProto, nft::kTypeInetService}));
    tx.Add(VerdictMap(NodePortsMap(v6), {nft::kTypeInetProto, nft::kTypeInetService}));
    tx.Add(VerdictMap(NoEndpointServicesMap(v6), {addr, nft::kTypeInetProto, nft::kTypeInetService}));
    tx.Add(VerdictMap(NoEndpointNodePortsMap(v6), {nft::kTypeInetProto, nft::kTypeInetService}));
  }
  for (const char* c : {kMarkMasqChain, kMasqueradingChain, kRejectChain, kServicesChain, kEndpointsCheckChain,
                        kNodePortEndpointsCheckChain})
    tx.Add(nft::Chain{c});
  tx.Add(Base("filter-input", NF_INET_LOCAL_IN, "filter", kFilterPriority));
  tx.Add(Base("filter-forward", NF_INET_FORWARD, "filter", kFilterPriority));
  tx.Add(Base("filter-output", NF_INET_LOCAL_OUT, "filter", kFilterPriority));
  tx.Add(Base("nat-prerouting", NF_INET_PRE_ROUTING, "nat", kDstnatPriority));
  tx.Add(Base("nat-output", NF_INET_LOCAL_OUT, "nat", kDstnatPriority));
  tx.Add(Base("nat-postrouting", NF_INET_POST_ROUTING, "nat", kSrcnatPriority));

  const uint32_t mark = cfg.masquerade_mark;
  std::vector<std::pair<std::string, TableRule>> rules = {
      // meta mark set meta mark | M
      {kMarkMasqChain, Rule({nft::Meta{NFT_META_MARK, NFT_REG_1},
                             nft::Bitwise{NFT_REG_1, NFT_REG_1, 4, nft::Host32(~mark), nft::Host32(mark)},
                             nft::MetaSet{NFT_META_MARK, NFT_REG_1}})},
      // meta mark & M == 0 return; meta mark set meta mark ^ M; masquerade fully-random
      {kMasqueradingChain, Rule({nft::Meta{NFT_META_MARK, NFT_REG_1},
                                 nft::Bitwise{NFT_REG_1, NFT_REG_1, 4, nft::Host32(mark), nft::Host32(0)},
                                 Eq(nft::Host32(0))},
                                nft::Verdict{NFT_RETURN, ""})},
      {kMasqueradingChain, Rule({nft::Meta{NFT_META_MARK, NFT_REG_1},
                                 nft::Bitwise{NFT_REG_1, NFT_REG_1, 4, nft::Host32(~0u), nft::Host32(mark)},
                                 nft::MetaSet{NFT_META_MARK, NFT_REG_1}})},
      {kMasqueradingChain, Rule({nft::Nat{.masq = true, .flags = NF_NAT_RANGE_PROTO_RANDOM_FULLY}})},
      // TCP gets a reset, the rest ICMP port unreachable: "connection refused" either way.
      {kRejectChain, Rule(nft::MatchL4proto(IPPROTO_TCP) + Exprs{nft::Reject{NFT_REJECT_TCP_RST, 0}})},
      {kRejectChain, Rule({nft::Reject{NFT_REJECT_ICMPX_UNREACH, NFT_REJECT_ICMPX_PORT_UNREACH}})},
      {kServicesChain, Rule(AddrProtoPortVmap(false, ServiceIpsMap(false)))},
      {kServicesChain, Rule(AddrProtoPortVmap(true, ServiceIpsMap(true)))},
      {kServicesChain, Rule(NodePortVmap(false, NodePortsMap(false)))},
      {kServicesChain, Rule(NodePortVmap(true, NodePortsMap(true)))},
      {kEndpointsCheckChain, Rule(AddrProtoPortVmap(false, NoEndpointServicesMap(false)))},
      {kEndpointsCheckChain, Rule(AddrProtoPortVmap(true, NoEndpointServicesMap(true)))},
      {kNodePortEndpointsCheckChain, Rule(NodePortVmap(false, NoEndpointNodePortsMap(false)))},
      {kNodePortEndpointsCheckChain, Rule(NodePortVmap(true, NoEndpointNodePortsMap(true)))},
      {"filter-input", Rule(CtNew(), Jump(kNodePortEndpointsCheckChain))},
      {"filter-input", Rule(CtNew(), Jump(kEndpointsCheckChain))},
      {"filter-forward", Rule(CtNew(), Jump(kEndpointsCheckChain))},
      {"filter-output", Rule(CtNew(), Jump(kEndpointsCheckChain))},
      {"nat-prerouting", Rule({}, Jump(kServicesChain))},
      {"nat-output", Rule({}, Jump(kServicesChain))},
      {"nat-postrouting", Rule({}, Jump(kMasqueradingChain))},
  };
  AnonymousNames none;
  for (auto& [chain, r] : rules) AddRules(tx, chain, {r}, none);
}

void AddRules(nft::Transaction& tx, const std::string& chain, const std::vector<TableRule>& rules,
              AnonymousNames& names) {
  for (const TableRule& tr : rules) {
    nft::Rule r = tr.rule;
    r.chain = chain;
    for (auto& e : r.exprs)
      if (auto* l = std::get_if<nft::Lookup>(&e); l && l->set == kAnonymousMap) {
        const std::string name = names.Next();
        l->set = name;
        tx.Add(nft::Set{.name = name,
                        .flags = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_MAP,
                        .key_type = nft::kTypeInteger,
                        .key_len = 4,
                        .data_type = nft::kTypeVerdict,
                        .userdata = nft::MapUserdata(nft::ByteOrder::kHost)});
        tx.Add(nft::Elements{name, tr.vmap});
      }
    tx.Add(std::move(r));
  }
}

}  // namespace weft::services
