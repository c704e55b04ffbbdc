#include "sys/nft_render.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "sys/nft_udata.h"

namespace weft::sys::nft {
namespace {

enum class Kind {
  kRaw, kIpv4, kIpv6, kEther, kIfname, kPort, kProto, kNfproto, kEthertype, kHex, kDecimal, kCtState, kIfType, kIcmp6Type,
  kAddrType, kCtDirection
};

// A value loaded into a register: its nft words and how its bytes read.
struct Field {
  std::string text;
  Kind kind = Kind::kRaw;
  bool dependency = false;  // meta nfproto / l4proto: nft leaves it out before the payload it guards
  std::string mask;         // a bitwise AND applied to it
  std::string xor_;         // and the XOR after it
  std::string imm;          // an immediate's bytes
  uint32_t full = 0;        // an address loaded in part (its first bytes): the address's length
  bool map = false;         // a map's data (`... map @m`): all of it, whatever registers it fills
};

std::string HexBytes(const std::string& b) {
  std::string s = "0x";
  char buf[3];
  for (unsigned char c : b) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    s += buf;
  }
  return s;
}

uint64_t BigEndian(const std::string& b) {
  uint64_t v = 0;
  for (size_t i = 0; i < b.size() && i < 8; ++i) v = v << 8 | static_cast<unsigned char>(b[i]);
  return v;
}
uint64_t HostEndian(const std::string& b) {
  uint64_t v = 0;
  for (size_t i = b.size(); i-- > 0;)
    if (i < 8) v = v << 8 | static_cast<unsigned char>(b[i]);
  return v;
}

std::string ProtoName(unsigned p) {
  switch (p) {
    case IPPROTO_TCP: return "tcp";
    case IPPROTO_UDP: return "udp";
    case IPPROTO_ICMP: return "icmp";
    case IPPROTO_ICMPV6: return "ipv6-icmp";
    case IPPROTO_SCTP: return "sctp";
    default: return std::to_string(p);
  }
}

std::string CtStates(uint64_t bits) {
  static const std::pair<uint64_t, const char*> kNames[] = {
      {1, "invalid"}, {2, "established"}, {4, "related"}, {8, "new"}, {64, "untracked"}};
  std::string s;
  for (const auto& [bit, name] : kNames)
    if (bits & bit) s += (s.empty() ? "" : ",") + std::string(name);
  return s.empty() ? HexBytes(std::to_string(bits)) : s;
}

std::string Format(Kind k, const std::string& b) {
  char buf[INET6_ADDRSTRLEN];
  switch (k) {
    case Kind::kIpv4:
      if (b.size() == 4 && inet_ntop(AF_INET, b.data(), buf, sizeof buf)) return buf;
      break;
    case Kind::kIpv6:
      if (b.size() == 16 && inet_ntop(AF_INET6, b.data(), buf, sizeof buf)) return buf;
      break;
    case Kind::kEther:
      if (b.size() >= 6) {
        char m[18];
        const auto* u = reinterpret_cast<const unsigned char*>(b.data());
        std::snprintf(m, sizeof m, "%02x:%02x:%02x:%02x:%02x:%02x", u[0], u[1], u[2], u[3], u[4], u[5]);
        return m;
      }
      break;
    // Fewer bytes than the name without its NUL: a wildcard (`"wft*"`).
    case Kind::kIfname:
      return "\"" + std::string(b.c_str()) + (b.find('\0') == std::string::npos ? "*" : "") + "\"";
    case Kind::kCtDirection:
      if (b.size() == 1 && (b[0] == 0 || b[0] == 1)) return b[0] ? "reply" : "original";
      break;
    case Kind::kPort: return std::to_string(BigEndian(b.substr(0, 2)));
    case Kind::kProto: return b.empty() ? "" : ProtoName(static_cast<unsigned char>(b[0]));
    case Kind::kAddrType: {
      static const char* const kTypes[] = {"unspec",    "unicast", "local",       "broadcast", "anycast", "multicast",
                                           "blackhole", "unreachable", "prohibit", "throw",     "nat",     "xresolve"};
      const uint64_t t = HostEndian(b);
      return t < 12 ? kTypes[t] : std::to_string(t);
    }
    case Kind::kIcmp6Type: {
      if (b.size() != 1) return HexBytes(b);
      switch (static_cast<unsigned char>(b[0])) {
        case 1: return "destination-unreachable";
        case 2: return "packet-too-big";
        case 3: return "time-exceeded";
        case 4: return "parameter-problem";
        case 128: return "echo-request";
        case 129: return "echo-reply";
        case 130: return "mld-listener-query";
        case 131: return "mld-listener-report";
        case 132: return "mld-listener-done";
        case 133: return "nd-router-solicit";
        case 134: return "nd-router-advert";
        case 135: return "nd-neighbor-solicit";
        case 136: return "nd-neighbor-advert";
        case 137: return "nd-redirect";
        case 138: return "router-renumbering";
        case 141: return "ind-neighbor-solicit";
        case 142: return "ind-neighbor-advert";
        case 143: return "mld2-listener-report";
        default: return std::to_string(static_cast<unsigned char>(b[0]));
      }
    }
    case Kind::kNfproto:
      if (b.size() == 1 && b[0] == NFPROTO_IPV4) return "ipv4";
      if (b.size() == 1 && b[0] == NFPROTO_IPV6) return "ipv6";
      break;
    case Kind::kEthertype: {
      const uint64_t t = BigEndian(b);
      if (t == 0x0800) return "ip";
      if (t == 0x86dd) return "ip6";
      if (t == 0x0806) return "arp";
      if (t == 0x8100) return "vlan";
      return HexBytes(b);
    }
    case Kind::kHex: {
      char h[24];
      std::snprintf(h, sizeof h, "0x%08llx", static_cast<unsigned long long>(HostEndian(b)));
      return h;
    }
    case Kind::kDecimal: return std::to_string(HostEndian(b));
    case Kind::kIfType: return HostEndian(b) == 1 ? "ether" : std::to_string(HostEndian(b));  // ARPHRD_ETHER
    case Kind::kCtState: return CtStates(HostEndian(b));
    case Kind::kRaw: {
      // nft prints a raw field as an integer: hex without leading zeros (0x800).
      std::string h = HexBytes(b);
      const size_t first = h.find_first_not_of('0', 2);
      return first == std::string::npos ? (b.empty() ? h : "0x0") : "0x" + h.substr(first);
    }
  }
  return HexBytes(b);
}

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

Field MetaField(uint32_t key) {
  switch (key) {
    case NFT_META_LEN: return {"meta length", Kind::kDecimal};
    case NFT_META_PROTOCOL: return {"meta protocol", Kind::kEthertype};
    case NFT_META_NFPROTO: return {"meta nfproto", Kind::kNfproto, true};
    case NFT_META_L4PROTO: return {"meta l4proto", Kind::kProto, true};
    // What nft adds before an `ether` field in a family without a link layer of its own.
    case NFT_META_IIFTYPE: return {"meta iiftype", Kind::kIfType, true};
    case NFT_META_MARK: return {"meta mark", Kind::kHex};
    case NFT_META_IIF: return {"iif", Kind::kDecimal};
    case NFT_META_OIF: return {"oif", Kind::kDecimal};
    case NFT_META_IIFNAME: return {"iifname", Kind::kIfname};
    case NFT_META_OIFNAME: return {"oifname", Kind::kIfname};
    case NFT_META_SKUID: return {"meta skuid", Kind::kDecimal};
    case NFT_META_SKGID: return {"meta skgid", Kind::kDecimal};
    case NFT_META_IIFGROUP: return {"iifgroup", Kind::kDecimal};
    case NFT_META_OIFGROUP: return {"oifgroup", Kind::kDecimal};
    default: return {"meta key " + std::to_string(key), Kind::kRaw};
  }
}

Field CtField(const Ct& c) {
  const std::string dir = c.dir ? (*c.dir ? " reply" : " original") : "";
  switch (c.key) {
    case NFT_CT_STATE: return {"ct state", Kind::kCtState};
    case NFT_CT_MARK: return {"ct mark", Kind::kHex};
    case NFT_CT_STATUS: return {"ct status", Kind::kHex};
    case NFT_CT_DIRECTION: return {"ct direction", Kind::kCtDirection};
    case NFT_CT_SRC_IP: return {"ct" + dir + " ip saddr", Kind::kIpv4};
    case NFT_CT_DST_IP: return {"ct" + dir + " ip daddr", Kind::kIpv4};
    case NFT_CT_SRC_IP6: return {"ct" + dir + " ip6 saddr", Kind::kIpv6};
    case NFT_CT_DST_IP6: return {"ct" + dir + " ip6 daddr", Kind::kIpv6};
    case NFT_CT_PROTO_DST: return {"ct" + dir + " proto-dst", Kind::kPort};
    default: return {"ct key " + std::to_string(c.key), Kind::kRaw};
  }
}

// What nft knows of the packet from the rule so far (its dependencies).
struct Context {
  int nfproto = -1;   // NFPROTO_IPV4 / IPV6 / ARP
  int l4proto = -1;   // IPPROTO_*
};

// A payload's field, and whether it is one nft names (so a pending
// dependency it needs is left out).
Field PayloadField(const Payload& p, const Context& cx, bool* named) {
  *named = true;
  if (p.base == NFT_PAYLOAD_LL_HEADER) {
    if (p.offset == 0 && p.len == 6) return {"ether daddr", Kind::kEther};
    if (p.offset == 6 && p.len == 6) return {"ether saddr", Kind::kEther};
    if (p.offset == 12 && p.len == 2) return {"ether type", Kind::kEthertype};
  }
  if (p.base == NFT_PAYLOAD_NETWORK_HEADER && cx.nfproto == NFPROTO_IPV4) {
    if (p.offset == 12 && p.len == 4) return {"ip saddr", Kind::kIpv4};
    if (p.offset == 16 && p.len == 4) return {"ip daddr", Kind::kIpv4};
    if ((p.offset == 12 || p.offset == 16) && p.len < 4)
      return {p.offset == 12 ? "ip saddr" : "ip daddr", Kind::kIpv4, false, "", "", "", 4};
    if (p.offset == 9 && p.len == 1) return {"ip protocol", Kind::kProto};
  }
  if (p.base == NFT_PAYLOAD_NETWORK_HEADER && cx.nfproto == NFPROTO_ARP) {
    if (p.offset == 8 && p.len == 6) return {"arp saddr ether", Kind::kEther};
    if (p.offset == 14 && p.len == 4) return {"arp saddr ip", Kind::kIpv4};
    if (p.offset == 18 && p.len == 6) return {"arp daddr ether", Kind::kEther};
    if (p.offset == 24 && p.len == 4) return {"arp daddr ip", Kind::kIpv4};
  }
  if (p.base == NFT_PAYLOAD_TRANSPORT_HEADER && cx.l4proto == IPPROTO_ICMPV6 && p.offset == 0 && p.len == 1)
    return {"icmpv6 type", Kind::kIcmp6Type};
  if (p.base == NFT_PAYLOAD_NETWORK_HEADER && cx.nfproto == NFPROTO_IPV6) {
    if (p.offset == 8 && p.len == 16) return {"ip6 saddr", Kind::kIpv6};
    if (p.offset == 24 && p.len == 16) return {"ip6 daddr", Kind::kIpv6};
    // A prefix that ends on a byte: nft loads only its bytes.
    if ((p.offset == 8 || p.offset == 24) && p.len < 16)
      return {p.offset == 8 ? "ip6 saddr" : "ip6 daddr", Kind::kIpv6, false, "", "", "", 16};
    if (p.offset == 6 && p.len == 1) return {"ip6 nexthdr", Kind::kProto};
  }
  if (p.base == NFT_PAYLOAD_TRANSPORT_HEADER &&
      (cx.l4proto == IPPROTO_TCP || cx.l4proto == IPPROTO_UDP || cx.l4proto == IPPROTO_SCTP) && p.len == 2 &&
      (p.offset == 0 || p.offset == 2))
    return {ProtoName(cx.l4proto) + (p.offset == 0 ? " sport" : " dport"), Kind::kPort};
  // Ports of whatever transport protocol the packet has.
  // (They need no dependency, so one before them stays.)
  if (p.base == NFT_PAYLOAD_TRANSPORT_HEADER && cx.l4proto == -1 && p.len == 2 && (p.offset == 0 || p.offset == 2)) {
    *named = false;
    return {p.offset == 0 ? "th sport" : "th dport", Kind::kPort};
  }
  *named = false;
  const char* base = p.base == NFT_PAYLOAD_LL_HEADER ? "ll" : p.base == NFT_PAYLOAD_NETWORK_HEADER ? "nh" : "th";
  return {"@" + std::string(base) + "," + std::to_string(p.offset * 8) + "," + std::to_string(p.len * 8), Kind::kRaw};
}

std::string VerdictText(const Verdict& v) {
  switch (v.code) {
    case NF_ACCEPT: return "accept";
    case NF_DROP: return "drop";
    case NFT_CONTINUE: return "continue";
    case NFT_RETURN: return "return";
    case NFT_JUMP: return "jump " + v.chain;
    case NFT_GOTO: return "goto " + v.chain;
    case NFT_BREAK: return "break";
    default: return "verdict " + std::to_string(v.code);
  }
}

std::string CmpOp(uint32_t op) {
  switch (op) {
    case NFT_CMP_EQ: return "";
    case NFT_CMP_NEQ: return "!= ";
    case NFT_CMP_LT: return "< ";
    case NFT_CMP_LTE: return "<= ";
    case NFT_CMP_GT: return "> ";
    case NFT_CMP_GTE: return ">= ";
    default: return "op" + std::to_string(op) + " ";
  }
}

// The prefix length of `mask` (all ones then all zeros), or -1.
int PrefixLen(const std::string& mask) {
  int len = 0;
  bool zeros = false;
  for (unsigned char c : mask)
    for (int b = 7; b >= 0; --b) {
      const bool one = (c >> b) & 1;
      if (one && zeros) return -1;
      if (one) ++len;
      else zeros = true;
    }
  return len;
}

std::string UnitName(uint64_t unit) {
  switch (unit) {
    case 1: return "second";
    case 60: return "minute";
    case 3600: return "hour";
    case 86400: return "day";
    case 604800: return "week";
    default: return std::to_string(unit) + "s";
  }
}

// "rate [over] 10/minute [burst 7 packets]", as nft writes a limit.
std::string LimitText(const Limit& l) {
  std::string s = std::string("rate ") + (l.invert ? "over " : "");
  if (l.type == NFT_LIMIT_PKT_BYTES) {
    s += std::to_string(l.rate) + " bytes/" + UnitName(l.unit);
    if (l.burst) s += " burst " + std::to_string(l.burst) + " bytes";
  } else {
    s += std::to_string(l.rate) + "/" + UnitName(l.unit);
    if (l.burst != 5 && l.burst != 0) s += " burst " + std::to_string(l.burst) + " packets";
  }
  return s;
}
Limit AsLimit(const NamedLimit& l) { return Limit{l.rate, l.unit, l.burst, l.type, l.invert}; }

// The anonymous sets of a table or transaction, by name: their elements as
// nft writes them in a rule (`{ 134, 137 }`).
using InlineSets = std::map<std::string, std::string>;

class RuleRenderer {
 public:
  explicit RuleRenderer(Family f, const InlineSets* inline_sets = nullptr)
      : family_(f), l3_known_(f != Family::kNetdev && f != Family::kBridge), inline_(inline_sets) {
    if (f == Family::kIp) cx_.nfproto = NFPROTO_IPV4;
    if (f == Family::kIp6) cx_.nfproto = NFPROTO_IPV6;
  }

  std::string Render(const Rule& r) {
    for (size_t i = 0; i < r.exprs.size(); ++i) {
      // `th dport 100-200`: a load compared >= then <=, as nft sends a range.
      const auto* lo = std::get_if<Cmp>(&r.exprs[i]);
      const auto* hi = i + 1 < r.exprs.size() ? std::get_if<Cmp>(&r.exprs[i + 1]) : nullptr;
      if (lo && hi && lo->op == NFT_CMP_GTE && hi->op == NFT_CMP_LTE && lo->sreg == hi->sreg && OnRange(*lo, *hi)) {
        ++i;
        continue;
      }
      std::visit([&](const auto& e) { On(e); }, r.exprs[i]);
    }
    FlushDependency();
    std::string s;
    for (const auto& w : out_) s += (s.empty() ? "" : " ") + w;
    if (!r.comment.empty()) s += (s.empty() ? "" : " ") + std::string("comment ") + Quote(r.comment);
    return s;
  }

 private:
  void Load(uint32_t reg, Field f) {
    regs_[reg] = std::move(f);
    order_.push_back(reg);
  }
  Field Take(uint32_t reg) {
    Field f = regs_.count(reg) ? regs_[reg] : Field{"reg " + std::to_string(reg), Kind::kRaw};
    order_.erase(std::remove(order_.begin(), order_.end(), reg), order_.end());
    return f;
  }
  void Emit(std::string w) {
    FlushDependency();
    out_.push_back(std::move(w));
  }
  void FlushDependency() {
    if (!dependency_.empty()) out_.push_back(std::move(dependency_));
    dependency_.clear();
  }

  void On(const Meta& m) {
    Field f = MetaField(m.key);
    // In a family without a network protocol of its own (netdev, bridge),
    // nft adds `meta protocol` before a field of IPv4, IPv6 or ARP.
    if (m.key == NFT_META_PROTOCOL && !l3_known_) f.dependency = true;
    Load(m.dreg, std::move(f));
  }
  void On(const Ct& c) { Load(c.dreg, CtField(c)); }
  void On(const Payload& p) {
    bool named = false;
    Field f = PayloadField(p, cx_, &named);
    // The dependency nft adds itself is left out before a field it names.
    if (named && !dependency_.empty()) dependency_.clear();
    Load(p.dreg, std::move(f));
  }
  void On(const Numgen& g) {
    Load(g.dreg, {std::string("numgen ") + (g.type == NFT_NG_RANDOM ? "random" : "inc") + " mod " +
                      std::to_string(g.modulus) + (g.offset ? " offset " + std::to_string(g.offset) : ""),
                  Kind::kDecimal});
  }
  void On(const Immediate& i) {
    Field f{HexBytes(i.data), Kind::kRaw};
    f.imm = i.data;
    Load(i.dreg, std::move(f));
  }
  void On(const Bitwise& b) {
    Field f = Take(b.sreg);
    f.mask = b.mask;
    f.xor_ = b.xor_;
    Load(b.dreg, std::move(f));
  }
  bool OnRange(const Cmp& lo, const Cmp& hi) {
    if (!regs_.count(lo.sreg) || !regs_[lo.sreg].mask.empty()) return false;
    Field f = Take(lo.sreg);
    Emit(f.text + " " + Format(f.kind, lo.data) + "-" + Format(f.kind, hi.data));
    return true;
  }
  void On(const Cmp& c) {
    Field f = Take(c.sreg);
    if (f.kind == Kind::kCtState && !f.mask.empty() && c.op == NFT_CMP_NEQ && HostEndian(c.data) == 0) {
      Emit(f.text + " " + CtStates(HostEndian(f.mask)));
      return;
    }
    std::string value = Format(f.kind, c.data);
    if (f.full && c.data.size() < f.full && f.mask.empty()) {
      std::string padded = c.data;
      padded.resize(f.full, '\0');
      value = Format(f.kind, padded) + "/" + std::to_string(c.data.size() * 8);
    } else if (!f.mask.empty()) {
      const int plen = PrefixLen(f.mask);
      if ((f.kind == Kind::kIpv4 || f.kind == Kind::kIpv6) && plen >= 0) {
        value += "/" + std::to_string(plen);
      } else {
        f.text += " & " + Format(f.kind == Kind::kRaw ? Kind::kRaw : Kind::kHex, f.mask);
        if (c.op == NFT_CMP_EQ) f.text += " ==";
      }
    }
    const std::string text = f.text + " " + CmpOp(c.op) + value;
    if (f.dependency && c.op == NFT_CMP_EQ && f.mask.empty()) {
      // meta nfproto / l4proto: context for what follows, printed only
      // when nothing follows that needs it.
      if (f.kind == Kind::kNfproto && !c.data.empty()) cx_.nfproto = static_cast<unsigned char>(c.data[0]);
      if (f.kind == Kind::kEthertype && c.data.size() == 2) {
        const unsigned type = (static_cast<unsigned char>(c.data[0]) << 8) | static_cast<unsigned char>(c.data[1]);
        cx_.nfproto = type == 0x0800 ? NFPROTO_IPV4 : type == 0x86dd ? NFPROTO_IPV6 : type == 0x0806 ? NFPROTO_ARP : -1;
      }
      if (f.kind == Kind::kProto && !c.data.empty()) {
        cx_.l4proto = static_cast<unsigned char>(c.data[0]);
        // ICMPv6 is IPv6's own: nft leaves out the IPv6 dependency too.
        if (cx_.l4proto == IPPROTO_ICMPV6 && cx_.nfproto == NFPROTO_IPV6) dependency_.clear();
      }
      FlushDependency();
      dependency_ = text;
      return;
    }
    if ((f.text == "ip protocol" || f.text == "ip6 nexthdr") && c.op == NFT_CMP_EQ && !c.data.empty())
      cx_.l4proto = static_cast<unsigned char>(c.data[0]);
    Emit(text);
  }
  void On(const Lookup& l) {
    std::string keys;
    std::vector<uint32_t> regs;
    for (uint32_t r : order_)
      if (r >= l.sreg || order_.size() == 1) regs.push_back(r);
    if (regs.empty()) regs.push_back(l.sreg);
    for (uint32_t r : regs) keys += (keys.empty() ? "" : " . ") + Take(r).text;
    std::string set = "@" + l.set;
    if (inline_)
      if (auto it = inline_->find(l.set); it != inline_->end()) set = it->second;
    if (!l.dreg) {
      Emit(keys + (l.invert ? " != " : " ") + set);
    } else if (*l.dreg == NFT_REG_VERDICT) {
      Emit(keys + " vmap " + set);
    } else {
      Field f{keys + " map " + set, Kind::kRaw};
      f.map = true;
      Load(*l.dreg, std::move(f));
    }
  }
  void On(const Verdict& v) { Emit(VerdictText(v)); }
  void On(const Counter& c) {
    Emit("counter packets " + std::to_string(c.packets) + " bytes " + std::to_string(c.bytes));
  }
  void On(const CounterRef& c) { Emit("counter name " + Quote(c.name)); }
  void On(const LimitRef& l) { Emit("limit name " + Quote(l.name)); }
  void On(const Fib& f) {
    std::string what = f.flags & NFTA_FIB_F_DADDR ? "daddr" : f.flags & NFTA_FIB_F_SADDR ? "saddr" : "?";
    if (f.flags & NFTA_FIB_F_MARK) what += " . mark";
    if (f.flags & NFTA_FIB_F_IIF) what += " . iif";
    if (f.flags & NFTA_FIB_F_OIF) what += " . oif";
    if (f.result == NFT_FIB_RESULT_ADDRTYPE) Load(f.dreg, {"fib " + what + " type", Kind::kAddrType});
    else if (f.result == NFT_FIB_RESULT_OIF) Load(f.dreg, {"fib " + what + " oif", Kind::kDecimal});
    else Load(f.dreg, {"fib " + what + " oifname", Kind::kIfname});
  }
  void On(const MetaSet& m) {
    Field v = Take(m.sreg);
    std::string key = MetaField(m.key).text;
    Emit(key + " set " + ValueText(v));
  }
  void On(const Log& g) {
    std::string s = "log";
    if (!g.prefix.empty()) s += " prefix " + Quote(g.prefix);
    if (g.group) {
      s += " group " + std::to_string(*g.group);
      if (g.snaplen) s += " snaplen " + std::to_string(g.snaplen);
      if (g.qthreshold) s += " queue-threshold " + std::to_string(g.qthreshold);
    }
    Emit(s);
  }
  void On(const Limit& l) { Emit("limit " + LimitText(l)); }
  // As nft prints it: the family's default (port unreachable) as plain `reject`.
  void On(const Reject& r) {
    if (r.type == NFT_REJECT_TCP_RST) return Emit("reject with tcp reset");
    if (r.type == NFT_REJECT_ICMPX_UNREACH) {
      static const char* const kCodes[] = {"no-route", "port-unreachable", "host-unreachable", "admin-prohibited"};
      if (r.code == NFT_REJECT_ICMPX_PORT_UNREACH) return Emit("reject");
      return Emit("reject with icmpx " + (r.code < 4 ? std::string(kCodes[r.code]) : std::to_string(r.code)));
    }
    const bool v6 = family_ == Family::kIp6 || cx_.nfproto == NFPROTO_IPV6;
    if (r.code == (v6 ? 4 : 3)) return Emit("reject");  // ICMP6_DST_UNREACH_NOPORT, ICMP_PORT_UNREACH
    Emit(std::string("reject with ") + (v6 ? "icmpv6 " : "icmp ") + std::to_string(r.code));
  }
  void On(const Dynset& d) {
    const char* op = d.op == NFT_DYNSET_OP_UPDATE ? "update" : d.op == NFT_DYNSET_OP_DELETE ? "delete" : "add";
    std::string key = Take(d.sreg_key).text;  // one field: what the layer's users write
    if (d.timeout_ms) key += " timeout " + std::to_string(d.timeout_ms / 1000) + "s";
    Emit(std::string(op) + " @" + d.set + " { " + key + " }");
  }
  void On(const Nat& n) {
    if (n.masq) {
      std::string s = "masquerade";
      if (n.reg_proto) s += " to :" + Value(n.reg_proto, Kind::kPort);
      if (n.flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY) s += " fully-random";
      Emit(s);
      return;
    }
    std::string s = n.type == NFT_NAT_SNAT ? "snat" : "dnat";
    const bool v6 = n.family == NFPROTO_IPV6;
    s += v6 ? " ip6" : " ip";
    s += " to";
    if (n.reg_addr && regs_.count(n.reg_addr) && regs_[n.reg_addr].map) {
      // `dnat ip to ip daddr . th dport map @m`: address and port from the map's data.
      Emit(s + " " + Take(n.reg_addr).text);
      return;
    }
    if (n.reg_addr) {
      std::string a = Value(n.reg_addr, v6 ? Kind::kIpv6 : Kind::kIpv4);
      s += " " + (v6 && n.reg_proto ? "[" + a + "]" : a);
    }
    if (n.reg_proto) s += ":" + Value(n.reg_proto, Kind::kPort);
    Emit(s);
  }
  // A loaded value with the bitwise applied to it, as nft writes it:
  // `meta mark | 0x00002000` (the bits set), `x & m`, or `(x & m) ^ v`.
  static std::string ValueText(const Field& f) {
    if (!f.imm.empty()) return Format(f.kind, f.imm);
    if (f.mask.empty()) return f.text;
    const Kind k = f.kind == Kind::kRaw ? Kind::kRaw : Kind::kHex;
    const bool xor_zero = f.xor_.find_first_not_of('\0') == std::string::npos;
    if (xor_zero) return f.text + " & " + Format(k, f.mask);
    std::string inv = f.mask;
    for (auto& c : inv) c = static_cast<char>(~c);
    if (inv == f.xor_) return f.text + " | " + Format(k, f.xor_);
    if (f.mask.find_first_not_of('\xff') == std::string::npos) return f.text + " ^ " + Format(k, f.xor_);
    return "(" + f.text + " & " + Format(k, f.mask) + ") ^ " + Format(k, f.xor_);
  }
  // A register's value as `k` (an immediate) or its words (a map lookup).
  std::string Value(uint32_t reg, Kind k) {
    Field f = Take(reg);
    return f.imm.empty() ? f.text : Format(k, f.imm);
  }

  Context cx_;
  std::map<uint32_t, Field> regs_;
  std::vector<uint32_t> order_;
  std::string dependency_;
  std::vector<std::string> out_;
  Family family_;
  bool l3_known_;  // the family has its network protocol (ip, ip6, inet)
  const InlineSets* inline_;
};

std::string HookName(Family f, uint32_t num) {
  if (f == Family::kNetdev) return num == 0 ? "ingress" : num == 1 ? "egress" : std::to_string(num);
  static const char* kNames[] = {"prerouting", "input", "forward", "output", "postrouting", "ingress"};
  return num < 6 ? kNames[num] : std::to_string(num);
}

std::string Priority(Family f, uint32_t hook, int32_t prio) {
  struct Std {
    const char* name;
    int32_t value;
  };
  std::vector<Std> std_prios;
  if (f == Family::kBridge) {
    std_prios = {{"dstnat", -300}, {"filter", -200}, {"out", 100}, {"srcnat", 300}};
  } else if (f == Family::kNetdev) {
    std_prios = {{"filter", 0}};
  } else {
    std_prios = {{"raw", -300}, {"mangle", -150}, {"filter", 0}, {"security", 50}};
    // nft 1.0.6 names these two only on their own hooks (an output chain at
    // -100 lists as -100).
    if (hook == NF_INET_PRE_ROUTING) std_prios.push_back({"dstnat", -100});
    if (hook == NF_INET_POST_ROUTING) std_prios.push_back({"srcnat", 100});
  }
  for (const auto& s : std_prios) {
    const int64_t off = static_cast<int64_t>(prio) - s.value;
    if (off == 0) return s.name;
    if (off > 0 && off <= 10) return std::string(s.name) + " + " + std::to_string(off);
    if (off < 0 && off >= -10) return std::string(s.name) + " - " + std::to_string(-off);
  }
  return std::to_string(prio);
}

std::string HookText(Family f, const Hook& h) {
  std::string s = "type " + h.type + " hook " + HookName(f, h.num);
  if (!h.device.empty()) s += " device " + Quote(h.device);
  s += " priority " + Priority(f, h.num, h.priority) + "; policy " + (h.policy == NF_DROP ? "drop" : "accept") + ";";
  return s;
}

std::string TypeName(DataType t) {
  switch (t) {
    case kTypeVerdict: return "verdict";
    case kTypeInteger: return "integer";
    case kTypeString: return "string";
    case kTypeIpv4: return "ipv4_addr";
    case kTypeIpv6: return "ipv6_addr";
    case kTypeEther: return "ether_addr";
    case kTypeInetProto: return "inet_proto";
    case kTypeInetService: return "inet_service";
    case kTypeMark: return "mark";
    case kTypeIfname: return "ifname";
    case kTypeIcmp6Type: return "icmpv6_type";
    case kTypeCtState: return "ct_state";
  }
  return "type" + std::to_string(static_cast<uint32_t>(t));
}

std::string TypesName(uint32_t type) {
  std::string s;
  for (DataType t : ConcatFields(type)) s += (s.empty() ? "" : " . ") + TypeName(t);
  return s;
}

Kind KindOf(DataType t) {
  switch (t) {
    case kTypeIpv4: return Kind::kIpv4;
    case kTypeIpv6: return Kind::kIpv6;
    case kTypeEther: return Kind::kEther;
    case kTypeIfname: return Kind::kIfname;
    case kTypeInetService: return Kind::kPort;
    case kTypeInetProto: return Kind::kProto;
    case kTypeMark: return Kind::kHex;
    case kTypeIcmp6Type: return Kind::kIcmp6Type;
    case kTypeCtState: return Kind::kCtState;
    default: return Kind::kRaw;
  }
}

// A key's fields in nft's words: `a . b`, ranges per field as a prefix
// (10.0.0.0/24) or a-b.
std::string KeyText(const Set& set, const std::string& key, const std::string& end) {
  const std::vector<DataType> types = ConcatFields(set.key_type);
  std::string s;
  size_t at = 0;
  for (size_t i = 0; i < types.size(); ++i) {
    uint32_t len = i < set.fields.size() ? set.fields[i] : DataTypeLen(types[i]);
    if (len == 0) len = static_cast<uint32_t>(key.size() - std::min(at, key.size()));
    const std::string a = key.substr(std::min(at, key.size()), len);
    Kind kind = KindOf(types[i]);
    // A lone integer of host byte order (numgen's, `numgen random mod 2 vmap { 0 : ... }`) is a number.
    if (types.size() == 1 && types[0] == kTypeInteger && KeyByteOrder(set.userdata) == ByteOrder::kHost)
      kind = Kind::kDecimal;
    std::string f = Format(kind, a);
    if (!end.empty()) {
      const std::string b = end.substr(std::min(at, end.size()), len);
      if (b != a) {
        // A prefix: the bits after the shared leading ones are 0s in a, 1s
        // in b (only for ends as long as their starts: a dump may hold any).
        int plen = 0;
        const size_t bits = a.size() == b.size() ? a.size() * 8 : 0;
        while (static_cast<size_t>(plen) < bits &&
               (((static_cast<unsigned char>(a[plen / 8]) ^ static_cast<unsigned char>(b[plen / 8])) >> (7 - plen % 8)) &
                1) == 0)
          ++plen;
        bool prefix = bits > 0 && (types[i] == kTypeIpv4 || types[i] == kTypeIpv6);
        for (size_t bit = plen; prefix && bit < bits; ++bit) {
          const bool x = (static_cast<unsigned char>(a[bit / 8]) >> (7 - bit % 8)) & 1;
          const bool y = (static_cast<unsigned char>(b[bit / 8]) >> (7 - bit % 8)) & 1;
          if (x || !y) prefix = false;
        }
        f += prefix ? "/" + std::to_string(plen) : "-" + Format(KindOf(types[i]), b);
      }
    }
    s += (s.empty() ? "" : " . ") + f;
    at += (len + 3) / 4 * 4;
  }
  return s;
}

// One-field interval sets hold a range as two elements (start; exclusive
// end flagged NFT_SET_ELEM_INTERVAL_END): joined back into nft's words.
std::vector<std::string> ElementTexts(const Set& set, std::vector<Element> elems) {
  std::vector<std::string> out;
  const bool halves = (set.flags & NFT_SET_INTERVAL) && !(set.flags & NFT_SET_CONCAT) && set.fields.size() <= 1;
  // nft lists elements in key order, whatever order the kernel dumps them;
  // a concatenation (outside interval sets) it orders as one little-endian
  // number, its last byte first (nft 1.0.6 lists `a . tcp . 60` before
  // `b . tcp . 70`, whatever a and b).
  const bool le = ConcatFields(set.key_type).size() > 1 && !(set.flags & NFT_SET_INTERVAL);
  std::sort(elems.begin(), elems.end(), [le](const Element& a, const Element& b) {
    if (!le) return a.key < b.key;
    return std::lexicographical_compare(a.key.rbegin(), a.key.rend(), b.key.rbegin(), b.key.rend(),
                                        [](char x, char y) { return static_cast<unsigned char>(x) < static_cast<unsigned char>(y); });
  });
  if (!halves) {
    for (const auto& e : elems) out.push_back(RenderElement(set, e));
    return out;
  }
  for (size_t i = 0; i < elems.size(); ++i) {
    if (elems[i].flags & NFT_SET_ELEM_INTERVAL_END) continue;
    Element e = elems[i];
    // The end is the next element's key minus one (or the top of the range).
    std::string last(e.key.size(), '\xff');
    if (i + 1 < elems.size() && (elems[i + 1].flags & NFT_SET_ELEM_INTERVAL_END)) {
      last = elems[i + 1].key;
      for (size_t j = last.size(); j-- > 0;) {
        if (last[j]-- != 0) break;
      }
    }
    if (last != e.key) e.key_end = last;
    out.push_back(RenderElement(set, e));
  }
  return out;
}

// A duration as nft prints one: "3h", "1m30s", "500ms".
std::string DurationText(uint64_t ms) {
  static const std::pair<uint64_t, const char*> kUnits[] = {
      {86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
  std::string s;
  for (const auto& [unit, name] : kUnits)
    if (ms >= unit) {
      s += std::to_string(ms / unit) + name;
      ms %= unit;
    }
  return s.empty() ? "0s" : s;
}

// A set's declaration: "type ...", "flags ...", "timeout ...".
std::vector<std::string> SetLines(const Set& s) {
  std::vector<std::string> l;
  std::string type = "type " + TypesName(s.key_type);
  if (auto fields = TypeofFields(s.userdata); fields && !(s.flags & NFT_SET_MAP)) {
    type = "typeof";
    for (size_t i = 0; i < fields->size(); ++i) type += (i ? " . " : " ") + TypeofFieldText((*fields)[i]);
  }
  if (s.flags & NFT_SET_MAP) type += " : " + TypesName(s.data_type);
  l.push_back(type);
  std::string flags;
  if (s.flags & NFT_SET_CONSTANT) flags += ",constant";
  if (s.flags & NFT_SET_INTERVAL) flags += ",interval";
  // nft 1.0.6: a default timeout implies the flag, except in a dynamic set (`flags dynamic,timeout`).
  if (s.flags & NFT_SET_EVAL) flags += ",dynamic";
  if ((s.flags & NFT_SET_TIMEOUT) && (!s.timeout_ms || (s.flags & NFT_SET_EVAL))) flags += ",timeout";
  if (!flags.empty()) l.push_back("flags " + flags.substr(1));
  if (s.timeout_ms) l.push_back("timeout " + DurationText(s.timeout_ms));
  return l;
}

std::string SetKeyword(const Set& s) { return s.flags & NFT_SET_MAP ? "map " : "set "; }

std::string SetText(const Set& s, const std::vector<Element>* elems) {
  std::string t = "\t" + SetKeyword(s) + s.name + " {\n";
  for (const auto& l : SetLines(s)) t += "\t\t" + l + "\n";
  if (elems && !elems->empty()) {
    // nft's lines of elements: by the key's type, five numbers (ports,
    // protocols, marks, integers), two IPv4 addresses, or one of anything
    // else (IPv6 addresses, names, concatenations) to a line.
    const auto fields = ConcatFields(s.key_type);
    size_t per_line = 1;
    if (fields.size() == 1) {
      const DataType k = fields[0];
      if (k == kTypeInetService || k == kTypeInetProto || k == kTypeMark || k == kTypeInteger) per_line = 5;
      if (k == kTypeIpv4) per_line = 2;
    }
    std::string list;
    size_t n = 0;
    for (const auto& e : ElementTexts(s, *elems)) {
      if (n > 0) list += n % per_line == 0 ? ",\n\t\t\t     " : ", ";
      list += e;
      ++n;
    }
    t += "\t\telements = { " + list + " }\n";
  }
  return t + "\t}\n";
}

// An anonymous set as a rule shows it: "{ 22, 80 }".
std::string InlineText(const Set& s, const std::vector<Element>& elems) {
  std::string list;
  for (const auto& e : ElementTexts(s, elems)) list += (list.empty() ? "" : ", ") + e;
  return "{ " + list + " }";
}

const Set* Find(const std::vector<Set>& sets, const std::string& name) {
  for (const auto& s : sets)
    if (s.name == name) return &s;
  return nullptr;
}


}  // namespace

std::string FamilyName(Family f) {
  switch (f) {
    case Family::kIp: return "ip";
    case Family::kIp6: return "ip6";
    case Family::kInet: return "inet";
    case Family::kBridge: return "bridge";
    case Family::kNetdev: return "netdev";
  }
  return "family" + std::to_string(static_cast<int>(f));
}

std::string RenderRule(Family family, const Rule& rule) { return RuleRenderer(family).Render(rule); }

std::string RenderElement(const Set& set, const Element& e) {
  std::string s = KeyText(set, e.key, e.key_end);
  if (e.timeout_ms) s += " timeout " + std::to_string(e.timeout_ms / 1000) + "s";
  if (e.verdict) s += " : " + VerdictText(*e.verdict);
  else if (!e.data.empty()) {
    Set as_key = set;
    as_key.key_type = set.data_type;
    as_key.fields.clear();
    s += " : " + KeyText(as_key, e.data, "");
  }
  return s;
}

std::string RenderTable(const TableState& t) {
  std::vector<std::string> blocks;
  for (const auto& c : t.counters)
    blocks.push_back("\tcounter " + c.name + " {\n\t\tpackets " + std::to_string(c.packets) + " bytes " +
                     std::to_string(c.bytes) + "\n\t}\n");
  for (const auto& l : t.limits) blocks.push_back("\tlimit " + l.name + " {\n\t\t" + LimitText(AsLimit(l)) + "\n\t}\n");
  InlineSets inline_sets;
  for (const auto& s : t.sets) {
    auto it = t.elements.find(s.name);
    const std::vector<Element>* elems = it == t.elements.end() ? nullptr : &it->second;
    if (s.flags & NFT_SET_ANONYMOUS) {
      inline_sets[s.name] = InlineText(s, elems ? *elems : std::vector<Element>{});
      continue;
    }
    blocks.push_back(SetText(s, elems));
  }
  for (const auto& c : t.chains) {
    std::string b = "\tchain " + c.name + " {\n";
    if (c.hook) b += "\t\t" + HookText(t.family, *c.hook) + "\n";
    for (const auto& r : t.rules)
      if (r.chain == c.name) b += "\t\t" + RuleRenderer(t.family, &inline_sets).Render(r) + "\n";
    blocks.push_back(b + "\t}\n");
  }
  std::string s = "table " + FamilyName(t.family) + " " + t.table.name + " {\n";
  for (size_t i = 0; i < blocks.size(); ++i) s += (i ? "\n" : "") + blocks[i];
  return s + "}\n";
}

std::string RenderOp(Family family, const std::string& table, const Op& op, const std::vector<Set>& known) {
  const std::string v = VerbName(op.verb);
  const std::string t = FamilyName(family) + " " + table;
  const bool add = op.verb == Verb::kAdd || op.verb == Verb::kCreate;
  if (const auto* x = std::get_if<Table>(&op.object))
    return v + " table " + FamilyName(family) + " " + (x->name.empty() ? table : x->name);
  if (const auto* c = std::get_if<Chain>(&op.object)) {
    std::string s = v + " chain " + t + " " + c->name;
    if (add && c->hook) s += " { " + HookText(family, *c->hook) + " }";
    return s;
  }
  if (const auto* r = std::get_if<Rule>(&op.object)) {
    if (!add) return v + " rule " + t + " " + r->chain + " handle " + std::to_string(r->handle);
    return v + " rule " + t + " " + r->chain + " " + RenderRule(family, *r);
  }
  if (const auto* s = std::get_if<Set>(&op.object)) {
    if (!add) return v + " " + SetKeyword(*s) + t + " " + s->name;
    std::string spec;
    for (const auto& l : SetLines(*s)) spec += l + "; ";
    return v + " " + SetKeyword(*s) + t + " " + s->name + " { " + spec + "}";
  }
  if (const auto* es = std::get_if<Elements>(&op.object)) {
    const Set* set = Find(known, es->set);
    std::string list;
    // With its set known, as nft lists it (an interval set's halves as ranges).
    if (set)
      for (const auto& text : ElementTexts(*set, es->elems)) list += (list.empty() ? "" : ", ") + text;
    else
      for (const auto& e : es->elems)
        list += (list.empty() ? "" : ", ") + HexBytes(e.key) + (e.key_end.empty() ? "" : "-" + HexBytes(e.key_end));
    return v + " element " + t + " " + es->set + " { " + list + " }";
  }
  if (const auto* k = std::get_if<NamedCounter>(&op.object)) return v + " counter " + t + " " + k->name;
  if (const auto* l = std::get_if<NamedLimit>(&op.object)) {
    if (!add) return v + " limit " + t + " " + l->name;
    return v + " limit " + t + " " + l->name + " { " + LimitText(AsLimit(*l)) + "; }";
  }
  return v + " ?";
}

std::string RenderTransaction(const Transaction& tx) {
  // An anonymous set is written where its rule looks it up, as nft reads it.
  std::map<std::string, Set> anon;
  std::map<std::string, std::vector<Element>> anon_elems;
  for (const Op& op : tx.ops()) {
    if (const auto* set = std::get_if<Set>(&op.object); set && (set->flags & NFT_SET_ANONYMOUS)) anon[set->name] = *set;
    if (const auto* es = std::get_if<Elements>(&op.object); es && anon.count(es->set))
      anon_elems[es->set].insert(anon_elems[es->set].end(), es->elems.begin(), es->elems.end());
  }
  InlineSets inline_sets;
  for (const auto& [name, set] : anon) inline_sets[name] = InlineText(set, anon_elems[name]);
  std::vector<Set> known;
  std::string s;
  for (const Op& op : tx.ops()) {
    if (const auto* set = std::get_if<Set>(&op.object)) {
      known.push_back(*set);
      if (anon.count(set->name)) continue;
    }
    if (const auto* es = std::get_if<Elements>(&op.object); es && anon.count(es->set)) continue;
    if (const auto* r = std::get_if<Rule>(&op.object); r && op.verb == Verb::kAdd) {
      s += "add rule " + FamilyName(tx.family()) + " " + tx.table() + " " + r->chain + " " +
           RuleRenderer(tx.family(), &inline_sets).Render(*r) + "\n";
      continue;
    }
    s += RenderOp(tx.family(), tx.table(), op, known) + "\n";
  }
  return s;
}

}  // namespace weft::sys::nft
