#include "fw/hostport.h"

#include <netinet/in.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/rtnetlink.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <tuple>

#include "base/log.h"
#include "base/strings.h"
#include "fw/tool.h"
#include "sys/files.h"
#include "sys/nft_build.h"
#include "sys/nft_kernel.h"
#include "sys/nft_query.h"
#include "sys/nft_set.h"
#include "sys/nft_udata.h"

namespace weft::fw {

namespace {

constexpr const char* kMarkHex = "0x2000";
constexpr const char* kLoopback4 = "127.0.0.0/8";

std::string Suffix(const std::string& data_dir) { return Hex(Fnv1a64(data_dir), 8); }

// "10.0.0.5:80" or "[fd00::5]:80".
std::string HostPort(const IpAddress& a, int port) {
  // Appended piecewise: `"[" + std::string&&` trips GCC 12's -Wrestrict
  // false positive at -O3 (GCC bug 105329).
  std::string s;
  if (a.is_v6()) s += '[';
  s += a.ToString();
  if (a.is_v6()) s += ']';
  s += ':';
  s += std::to_string(port);
  return s;
}

std::string Key(const HostPortRule& r) {
  return r.protocol + "/" + std::to_string(r.host_port) + "/" + r.host_ip + "/" + r.container.ToString() + "/" +
         std::to_string(r.container_port);
}

}  // namespace

std::vector<HostPortRule> Canonical(std::vector<HostPortRule> rules) {
  auto key = [](const HostPortRule& r) {
    return std::make_tuple(r.protocol, r.host_port, !r.is_v4(), r.host_ip, r.container, r.container_port);
  };
  std::sort(rules.begin(), rules.end(), [&](const HostPortRule& a, const HostPortRule& b) { return key(a) < key(b); });
  rules.erase(std::unique(rules.begin(), rules.end()), rules.end());
  return rules;
}

std::string HostPortTable(const std::string& data_dir) { return "weft-hp-" + Suffix(data_dir); }

std::string HostPortMarker(const std::vector<HostPortRule>& rules) {
  std::string k;
  for (const auto& r : Canonical(rules)) k += Key(r) + ";";
  return "weft-hp:" + Hex(Fnv1a64(k), 16);
}

namespace {

// Each field of a concatenation takes a multiple of 4 bytes (one register).
void PutField(std::string* k, const std::string& bytes) {
  *k += bytes;
  k->resize((k->size() + 3) / 4 * 4, '\0');
}
std::string Proto(const std::string& p) {
  uint8_t n = p == "tcp" ? 6 : p == "udp" ? 17 : p == "sctp" ? 132 : 0;
  return std::string(1, static_cast<char>(n));
}
std::string Port(int port) {
  return {static_cast<char>((port >> 8) & 0xff), static_cast<char>(port & 0xff)};
}
std::string Addr(const IpAddress& a) { return a.ToBytes(); }
// The first and last address of `p`.
std::pair<std::string, std::string> Range(const IpPrefix& p) {
  return {p.Masked().addr().ToBytes(), p.Last().ToBytes()};
}

std::string HexWords(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i && i % 4 == 0) s += '.';
    s += d[static_cast<uint8_t>(bytes[i]) >> 4];
    s += d[static_cast<uint8_t>(bytes[i]) & 15];
  }
  return s;
}

std::string MapOf(const HostPortRule& r) {
  return std::string(r.is_v4() ? "hp4" : "hp6") + (r.host_ip.empty() ? "" : "a");
}

// Rules whose hostIP (if any) is of their own family: the only ones a map
// can hold (DesiredHostPorts never makes others).
std::vector<HostPortRule> Publishable(const std::vector<HostPortRule>& rules) {
  std::vector<HostPortRule> out;
  for (const auto& r : Canonical(rules)) {
    if (!r.host_ip.empty()) {
      auto hip = IpAddress::Parse(r.host_ip);
      if (!hip || hip->is_v4() != r.is_v4()) continue;
    }
    out.push_back(r);
  }
  return out;
}

// `a` + 1 as raw bytes; false when it wraps.
bool Increment(std::string* a) {
  for (size_t i = a->size(); i-- > 0;) {
    uint8_t b = static_cast<uint8_t>((*a)[i]);
    (*a)[i] = static_cast<char>(b + 1);
    if (b != 0xff) return true;
  }
  return false;
}

}  // namespace

const std::vector<std::string>& NftHostPortMaps() {
  static const std::vector<std::string> k = {"hp4", "hp4a", "hp6", "hp6a"};
  return k;
}

std::vector<sys::NftElement> NftHostPortElements(const std::vector<HostPortRule>& rules) {
  std::vector<sys::NftElement> out;
  for (const auto& r : Publishable(rules)) {
    std::string key;
    if (!r.host_ip.empty()) PutField(&key, Addr(*IpAddress::Parse(r.host_ip)));
    PutField(&key, Proto(r.protocol));
    PutField(&key, Port(r.host_port));
    std::string data;
    PutField(&data, Addr(r.container.addr()));
    PutField(&data, Port(r.container_port));
    out.push_back({MapOf(r), key, "", data});
  }
  return out;
}

std::vector<IpPrefix> NftHostPortSources(const std::vector<HostPortRule>& rules) {
  std::vector<IpPrefix> all;
  for (const auto& r : Publishable(rules)) {
    all.push_back(r.container.Masked());
    if (r.is_v4()) all.push_back(*IpPrefix::Parse(kLoopback4));
  }
  std::sort(all.begin(), all.end(), [](const IpPrefix& a, const IpPrefix& b) {
    return std::make_tuple(!a.is_v4(), a.addr(), a.len()) < std::make_tuple(!b.is_v4(), b.addr(), b.len());
  });
  std::vector<IpPrefix> out;
  for (const auto& p : all) {
    bool covered = std::any_of(all.begin(), all.end(), [&](const IpPrefix& o) {
      return o.is_v4() == p.is_v4() && o.len() < p.len() && o.Contains(p.addr());
    });
    bool dup = !out.empty() && out.back().addr() == p.addr() && out.back().len() == p.len();
    if (!covered && !dup) out.push_back(p);
  }
  return out;
}

std::vector<sys::NftElement> NftSourceElements(const IpPrefix& p) {
  const std::string set = p.is_v4() ? "hp4-src" : "hp6-src";
  auto [lo, hi] = Range(p);
  std::vector<sys::NftElement> out = {{set, lo, "", ""}};
  if (Increment(&hi)) out.push_back({set, hi, "", "", sys::kNftIntervalEnd});
  return out;
}

std::vector<std::string> NftIntervals(const std::vector<sys::NftElement>& elements) {
  std::vector<std::pair<std::string, std::string>> starts;  // (set, key)
  std::vector<std::pair<std::string, std::string>> ends;
  for (const auto& e : elements)
    ((e.flags & sys::kNftIntervalEnd) ? ends : starts).emplace_back(e.set, e.key);
  std::sort(ends.begin(), ends.end());
  std::vector<std::string> out;
  for (const auto& [set, key] : starts) {
    // The range ends at the first end element above its start.
    auto it = std::upper_bound(ends.begin(), ends.end(), std::make_pair(set, key));
    std::string end = it != ends.end() && it->first == set ? it->second : "";
    out.push_back(set + " " + HexWords(key) + "-" + HexWords(end));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string NftElementText(const sys::NftElement& e) {
  std::string s = e.set + " " + HexWords(e.key);
  if (!e.key_end.empty()) s += "-" + HexWords(e.key_end);
  if (!e.data.empty()) s += " : " + HexWords(e.data);
  return s;
}

namespace {
namespace nft = sys::nft;
using Exprs = std::vector<nft::Expr>;
using nft::operator+;

constexpr uint32_t kNh = NFT_PAYLOAD_NETWORK_HEADER, kTh = NFT_PAYLOAD_TRANSPORT_HEADER;

// `[ip daddr .] meta l4proto . th dport`: a map's key into the registers
// from NFT_REG32_00 (each field at the next 4-byte register).
Exprs MapKey(bool v6, bool host_ip) {
  Exprs k;
  uint32_t reg = NFT_REG32_00;
  if (host_ip) {
    k.push_back(nft::Payload{kNh, v6 ? 24u : 16u, v6 ? 16u : 4u, reg});
    reg += v6 ? 4 : 1;
  }
  k.push_back(nft::Meta{NFT_META_L4PROTO, reg});
  k.push_back(nft::Payload{kTh, 2, 2, reg + 1});
  return k;
}

std::string MapName(bool v6, bool host_ip) { return std::string(v6 ? "hp6" : "hp4") + (host_ip ? "a" : ""); }

// `ip saddr @hp4-src <key> @hp4 meta mark set meta mark | 0x2000`
Exprs MarkRule(bool v6, bool host_ip) {
  return nft::MatchNfproto(v6 ? NFPROTO_IPV6 : NFPROTO_IPV4) +
         Exprs{nft::Payload{kNh, v6 ? 8u : 12u, v6 ? 16u : 4u, NFT_REG_1},
               nft::Lookup{.set = std::string(v6 ? "hp6" : "hp4") + "-src", .sreg = NFT_REG_1}} +
         MapKey(v6, host_ip) +
         Exprs{nft::Lookup{.set = MapName(v6, host_ip), .sreg = NFT_REG32_00}, nft::Meta{NFT_META_MARK, NFT_REG_1},
               nft::Bitwise{NFT_REG_1, NFT_REG_1, 4, nft::Host32(~kHostPortMasqMark), nft::Host32(kHostPortMasqMark)},
               nft::MetaSet{NFT_META_MARK, NFT_REG_1}};
}

// `dnat ip to <key> map @hp4`: the map's data is the pod's address, then
// its port in the next register.
Exprs DnatRule(bool v6, bool host_ip) {
  return nft::MatchNfproto(v6 ? NFPROTO_IPV6 : NFPROTO_IPV4) + MapKey(v6, host_ip) +
         Exprs{nft::Lookup{.set = MapName(v6, host_ip), .sreg = NFT_REG32_00, .dreg = NFT_REG_1},
               nft::Nat{.type = NFT_NAT_DNAT, .family = v6 ? uint32_t{NFPROTO_IPV6} : uint32_t{NFPROTO_IPV4},
                        .reg_addr = NFT_REG_1, .reg_proto = v6 ? uint32_t{NFT_REG32_04} : uint32_t{NFT_REG32_01}}};
}

constexpr char kNotReplySet[] = "__set_not_reply";

nft::Set HostPortMap(bool v6, bool host_ip) {
  const nft::DataType addr = v6 ? nft::kTypeIpv6 : nft::kTypeIpv4;
  std::vector<nft::DataType> key = {nft::kTypeInetProto, nft::kTypeInetService};
  if (host_ip) key.insert(key.begin(), addr);
  const uint32_t alen = v6 ? 16 : 4;
  return nft::Set{.name = MapName(v6, host_ip), .flags = NFT_SET_MAP, .key_type = nft::ConcatType(key),
                  .key_len = (host_ip ? alen : 0) + 8, .data_type = nft::ConcatType({addr, nft::kTypeInetService}),
                  .data_len = alen + 4, .userdata = nft::ConcatMapUserdata()};
}
}  // namespace

sys::nft::Transaction NftHostPortTransaction(const std::string& table, const std::vector<HostPortRule>& rules) {
  nft::Transaction tx(nft::Family::kInet, table);
  // Created if missing, then deleted and made again: one replacement in one
  // kernel transaction, whatever was there.
  tx.Add(nft::Table{table}).Delete(nft::Table{table});
  if (Canonical(rules).empty()) return tx;
  tx.Add(nft::Table{table});
  const auto sources = NftHostPortSources(rules);
  for (bool v6 : {false, true}) {
    tx.Add(HostPortMap(v6, false)).Add(HostPortMap(v6, true));
    tx.Add(nft::Set{.name = std::string(v6 ? "hp6" : "hp4") + "-src", .flags = NFT_SET_INTERVAL,
                    .key_type = v6 ? nft::kTypeIpv6 : nft::kTypeIpv4, .key_len = v6 ? 16u : 4u,
                    .userdata = nft::SetUserdata(nft::ByteOrder::kBig)});
  }
  auto hook = [](uint32_t num, int32_t prio, const char* type) {
    return nft::Hook{.num = num, .priority = prio, .type = type, .policy = NF_ACCEPT};
  };
  tx.Add(nft::Chain{"prerouting", hook(NF_INET_PRE_ROUTING, -100, "nat")});
  tx.Add(nft::Chain{"output", hook(NF_INET_LOCAL_OUT, -100, "nat")});
  tx.Add(nft::Chain{"hostports", std::nullopt});
  tx.Add(nft::Chain{"postrouting", hook(NF_INET_POST_ROUTING, 100, "nat")});
  tx.Add(nft::Chain{"localhost-guard", hook(NF_INET_LOCAL_IN, 0, "filter")});
  auto rule = [&](const std::string& chain, Exprs e) {
    tx.Add(nft::Rule{.chain = chain, .exprs = std::move(e), .comment = kNftHostPortBase});
  };
  // fib daddr type local jump hostports
  const Exprs local = {nft::Fib{NFTA_FIB_F_DADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1},
                       nft::Cmp{NFT_CMP_EQ, nft::Host32(RTN_LOCAL), NFT_REG_1}, nft::Verdict{NFT_JUMP, "hostports"}};
  rule("prerouting", local);
  rule("output", local);
  // The marks first: a DNAT ends the chain for the packet. A map is also a
  // set of its keys.
  for (bool v6 : {false, true})
    for (bool host_ip : {false, true}) rule("hostports", MarkRule(v6, host_ip));
  for (bool v6 : {false, true})
    for (bool host_ip : {true, false}) rule("hostports", DnatRule(v6, host_ip));
  // meta mark & 0x2000 == 0x2000 masquerade
  rule("postrouting", {nft::Meta{NFT_META_MARK, NFT_REG_1},
                       nft::Bitwise{NFT_REG_1, NFT_REG_1, 4, nft::Host32(kHostPortMasqMark), nft::Host32(0)},
                       nft::Cmp{NFT_CMP_EQ, nft::Host32(kHostPortMasqMark), NFT_REG_1}, nft::Nat{.masq = true}});
  // iifname != "lo" ip daddr 127.0.0.0/8 ct state != { established, related } drop
  tx.Add(nft::Set{.name = kNotReplySet, .flags = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT, .key_type = nft::kTypeCtState,
                  .key_len = 4, .userdata = nft::TypeofSetUserdata(nft::ByteOrder::kHost, nft::TypeofCt(NFT_CT_STATE))});
  tx.Add(nft::Elements{kNotReplySet,
                       {nft::Element{nft::Host32(NF_CT_STATE_BIT(IP_CT_RELATED))},
                        nft::Element{nft::Host32(NF_CT_STATE_BIT(IP_CT_ESTABLISHED))}}});
  rule("localhost-guard",
       Exprs{nft::Meta{NFT_META_IIFNAME, NFT_REG_1}, nft::Cmp{NFT_CMP_NEQ, nft::IfnameBytes("lo"), NFT_REG_1}} +
           nft::MatchNfproto(NFPROTO_IPV4) +
           Exprs{nft::Payload{kNh, 16, 1, NFT_REG_1}, nft::Cmp{NFT_CMP_EQ, nft::U8(127), NFT_REG_1},
                 nft::Ct{NFT_CT_STATE, NFT_REG_1, std::nullopt},
                 nft::Lookup{.set = kNotReplySet, .sreg = NFT_REG_1, .invert = true}, nft::Verdict{NF_DROP, ""}});
  for (bool v6 : {false, true}) {
    std::vector<IpPrefix> family;
    for (const auto& p : sources)
      if (p.is_v4() != v6) family.push_back(p);
    if (!family.empty())
      tx.Add(nft::Elements{std::string(v6 ? "hp6" : "hp4") + "-src", nft::IntervalElements(family)});
  }
  std::map<std::string, std::vector<nft::Element>> maps;
  for (const auto& e : NftHostPortElements(rules)) maps[e.set].push_back(nft::Element{.key = e.key, .data = e.data});
  for (auto& [set, elems] : maps) tx.Add(nft::Elements{set, std::move(elems)});
  return tx;
}

bool NftHostPortBaseInPlace(const std::vector<sys::NftRuleInfo>& have) {
  int base = 0;
  for (const auto& r : have) {
    if (r.comment != kNftHostPortBase) return false;
    ++base;
  }
  return base == 12;  // prerouting, output, 8 in hostports, postrouting, localhost-guard
}

std::vector<sys::NftChange> NftHostPortDiff(const std::vector<HostPortRule>& want,
                                            const std::vector<sys::NftElement>& have) {
  auto desired = NftHostPortElements(want);
  auto same_key = [](const sys::NftElement& a, const sys::NftElement& b) { return a.set == b.set && a.key == b.key; };
  std::vector<sys::NftChange> del, add;
  for (const auto& h : have) {
    auto it = std::find_if(desired.begin(), desired.end(), [&](const auto& d) { return same_key(d, h); });
    if (it == desired.end() || it->data != h.data) del.push_back({sys::NftChange::kDeleteElement, h});
  }
  for (const auto& d : desired)
    if (std::find(have.begin(), have.end(), d) == have.end()) add.push_back({sys::NftChange::kAddElement, d});
  // Deletions first: a key with other data is deleted, then added anew.
  auto by_set = [](const sys::NftChange& a, const sys::NftChange& b) { return a.elem.set < b.elem.set; };
  std::stable_sort(del.begin(), del.end(), by_set);
  std::stable_sort(add.begin(), add.end(), by_set);
  del.insert(del.end(), add.begin(), add.end());
  return del;
}

IptablesHostPortChains IptablesHostPortChainNames(const std::string& data_dir) {
  std::string x = Suffix(data_dir);
  return {"WEFT-HP-" + x, "WEFT-HP-MASQ-" + x, "WEFT-HP-LO-" + x};  // <= 21 chars
}

std::vector<IptablesLine> IptablesHostPortRules(const std::string& data_dir, const std::vector<HostPortRule>& in,
                                                bool v6) {
  auto all = Canonical(in);
  std::vector<HostPortRule> rules;
  for (const auto& r : all)
    if (r.is_v4() != v6) rules.push_back(r);
  std::vector<IptablesLine> out;
  if (rules.empty()) return out;
  auto ch = IptablesHostPortChainNames(data_dir);
  // The marker covers both families so one hash describes the whole state.
  const std::string c = " -m comment --comment " + HostPortMarker(all);
  const std::string mark = " -j MARK --set-xmark " + std::string(kMarkHex) + "/" + kMarkHex;
  for (const auto& r : rules) {
    std::string match = "-A " + ch.dnat;
    if (!r.host_ip.empty()) match += " -d " + r.host_ip + (v6 ? "/128" : "/32");
    match += " -p " + r.protocol + " -m " + r.protocol + " --dport " + std::to_string(r.host_port);
    out.push_back({"nat", match + " -s " + r.container.Masked().ToString() + c + mark});
    if (!v6) out.push_back({"nat", match + " -s " + kLoopback4 + c + mark});
    out.push_back({"nat", match + c + " -j DNAT --to-destination " + HostPort(r.container.addr(), r.container_port)});
  }
  out.push_back({"nat", "-A " + ch.masq + " -m mark --mark " + kMarkHex + "/" + kMarkHex + c + " -j MASQUERADE"});
  if (!v6)
    out.push_back({"filter", "-A " + ch.guard + " -d " + kLoopback4 + " ! -i lo -m conntrack ! --ctstate " +
                                 "RELATED,ESTABLISHED" + c + " -j DROP"});
  return out;
}

std::vector<IptablesLine> IptablesHostPortJumps(const std::string& data_dir, bool v6) {
  auto ch = IptablesHostPortChainNames(data_dir);
  const std::string c = " -m comment --comment weft-hostports";
  std::vector<IptablesLine> out = {
      {"nat", "-A PREROUTING -m addrtype --dst-type LOCAL" + c + " -j " + ch.dnat},
      {"nat", "-A OUTPUT -m addrtype --dst-type LOCAL" + c + " -j " + ch.dnat},
      {"nat", "-A POSTROUTING" + c + " -j " + ch.masq},
  };
  if (!v6) out.push_back({"filter", "-A INPUT" + c + " -j " + ch.guard});
  return out;
}

std::string RenderIptablesHostPorts(const std::string& data_dir, const std::vector<HostPortRule>& rules, bool v6,
                                    const std::vector<IptablesLine>& jumps, bool remove) {
  auto ch = IptablesHostPortChainNames(data_dir);
  auto lines = remove ? std::vector<IptablesLine>{} : IptablesHostPortRules(data_dir, rules, v6);
  std::string s;
  for (const char* table : {"nat", "filter"}) {
    std::vector<std::string> chains;
    if (std::string(table) == "nat") {
      chains = {ch.dnat, ch.masq};
    } else if (!v6) {
      chains = {ch.guard};
    } else {
      continue;
    }
    s += std::string("*") + table + "\n";
    for (const auto& c : chains) s += ":" + c + " - [0:0]\n";  // declaring flushes it
    for (const auto& l : lines)
      if (l.table == table) s += l.line + "\n";
    for (const auto& j : jumps) {
      if (j.table != table) continue;
      s += (remove ? "-D" + j.line.substr(2) : j.line) + "\n";
    }
    if (remove)
      for (const auto& c : chains) s += "-X " + c + "\n";
    s += "COMMIT\n";
  }
  return s;
}

namespace {

class NftHostPorts : public HostPortFirewall {
 public:
  explicit NftHostPorts(std::string data_dir) : data_dir_(std::move(data_dir)), table_(HostPortTable(data_dir_)) {}

  Status Sync(const HostPortSource& source) override {
    WEFT_ASSIGN_OR_RETURN(auto want, source());
    WEFT_ASSIGN_OR_RETURN(Plan plan, MakePlan(want));
    if (plan.kind == Plan::kNone) return Status::Ok();
    WEFT_ASSIGN_OR_RETURN(auto lock, Lock());
    return SyncLocked(source);
  }

  Status Add(const std::vector<HostPortRule>& mine, const HostPortSource& source) override {
    WEFT_ASSIGN_OR_RETURN(auto lock, Lock());
    std::vector<sys::NftChange> changes;
    // The pod's subnet as a hairpin source: re-adding a present range is a
    // no-op in the kernel.
    for (const auto& p : NftHostPortSources(mine))
      for (auto& e : NftSourceElements(p)) changes.push_back({sys::NftChange::kAddElement, std::move(e)});
    for (auto& e : NftHostPortElements(mine)) changes.push_back({sys::NftChange::kAddElement, std::move(e)});
    Status st = sys::NftApply(sys::NftFamily::kInet, table_, changes, &keep_);
    if (st.ok()) return st;
    // No table yet (the node's first mapping), a table of another layout,
    // or a key still holding stale data: the full diff repairs all of them.
    WEFT_LOG(kInfo, "hostPort elements not added alone; syncing the whole table", {"table", table_}, {"err", st});
    return SyncLocked(source);
  }

  Status Remove(const std::vector<HostPortRule>& mine, const HostPortSource& source,
                const std::function<Result<bool>()>& others) override {
    WEFT_ASSIGN_OR_RETURN(auto lock, Lock());
    WEFT_ASSIGN_OR_RETURN(bool any, others());
    std::vector<sys::NftChange> changes;
    if (!any) {
      changes.push_back({sys::NftChange::kDeleteTable, {}});
    } else {
      for (auto& e : NftHostPortElements(mine)) changes.push_back({sys::NftChange::kDeleteElement, std::move(e)});
    }
    Status st = sys::NftApply(sys::NftFamily::kInet, table_, changes, &keep_);
    if (st.ok() || (!any && st.sys_errno() == ENOENT)) return Status::Ok();
    // An element already gone (a DEL retried after a crash) aborts the
    // batch: the full diff removes whatever of ours is left.
    WEFT_LOG(kInfo, "hostPort elements not deleted alone; syncing the whole table", {"table", table_}, {"err", st});
    return SyncLocked(source);
  }

  Result<std::string> Verify(const std::vector<HostPortRule>& mine) override {
    WEFT_ASSIGN_OR_RETURN(auto rules, sys::NftRules(sys::NftFamily::kInet, table_));
    if (!NftHostPortBaseInPlace(rules))
      return "table inet " + table_ + " is missing or its rules differ from weft's (" + std::to_string(rules.size()) +
             " rule(s))";
    std::string missing;
    std::map<std::string, std::vector<sys::NftElement>> sets;
    for (const auto& e : NftHostPortElements(mine)) {
      if (!sets.count(e.set)) {
        WEFT_ASSIGN_OR_RETURN(sets[e.set], sys::NftElements(sys::NftFamily::kInet, table_, e.set));
      }
      const auto& have = sets[e.set];
      if (std::find(have.begin(), have.end(), e) == have.end())
        missing += (missing.empty() ? "" : ", ") + NftElementText(e);
    }
    WEFT_ASSIGN_OR_RETURN(auto sources, Sources());
    for (const auto& p : NftHostPortSources(mine)) {
      auto want = NftIntervals(NftSourceElements(p));
      if (!std::includes(sources.begin(), sources.end(), want.begin(), want.end()))
        missing += std::string(missing.empty() ? "" : ", ") + (p.is_v4() ? "hp4-src " : "hp6-src ") + p.ToString();
    }
    if (missing.empty()) return std::string();
    return "table inet " + table_ + " lacks element(s) " + missing;
  }

 private:
  struct Plan {
    enum Kind { kNone, kDeleteTable, kRebuild, kElements } kind = kNone;
    std::vector<sys::NftChange> changes;
  };

  Result<sys::FileLock> Lock() { return sys::FileLock::Acquire(data_dir_ + "/firewall.lock"); }

  // The ranges in hp4-src and hp6-src (NftIntervals).
  Result<std::vector<std::string>> Sources() {
    std::vector<sys::NftElement> all;
    for (const char* set : {"hp4-src", "hp6-src"}) {
      WEFT_ASSIGN_OR_RETURN(auto es, sys::NftElements(sys::NftFamily::kInet, table_, set));
      all.insert(all.end(), es.begin(), es.end());
    }
    return NftIntervals(all);
  }

  // What makes the kernel match `want`: nothing, deleting the table,
  // building it whole (no table, or its base rules differ), or element
  // changes.
  Result<Plan> MakePlan(const std::vector<HostPortRule>& want) {
    Plan p;
    if (Canonical(want).empty()) {
      WEFT_ASSIGN_OR_RETURN(bool exists, sys::NftTableExists(sys::NftFamily::kInet, table_));
      if (exists) p.kind = Plan::kDeleteTable;
      return p;
    }
    WEFT_ASSIGN_OR_RETURN(auto rules, sys::NftRules(sys::NftFamily::kInet, table_));
    if (!NftHostPortBaseInPlace(rules)) {
      p.kind = Plan::kRebuild;
      return p;
    }
    // The hairpin sources change only with the pods' subnets: when they
    // differ, the table is built whole.
    std::vector<sys::NftElement> src;
    for (const auto& pre : NftHostPortSources(want)) {
      auto es = NftSourceElements(pre);
      src.insert(src.end(), es.begin(), es.end());
    }
    WEFT_ASSIGN_OR_RETURN(auto sources, Sources());
    if (sources != NftIntervals(src)) {
      p.kind = Plan::kRebuild;
      return p;
    }
    std::vector<sys::NftElement> have;
    for (const auto& map : NftHostPortMaps()) {
      WEFT_ASSIGN_OR_RETURN(auto es, sys::NftElements(sys::NftFamily::kInet, table_, map));
      have.insert(have.end(), es.begin(), es.end());
    }
    p.changes = NftHostPortDiff(want, have);
    if (!p.changes.empty()) p.kind = Plan::kElements;
    return p;
  }

  // REQUIRES: the lock is held.
  Status SyncLocked(const HostPortSource& source) {
    WEFT_ASSIGN_OR_RETURN(auto want, source());  // under the lock: includes every committed row
    WEFT_ASSIGN_OR_RETURN(Plan plan, MakePlan(want));
    switch (plan.kind) {
      case Plan::kNone:
        return Status::Ok();
      case Plan::kDeleteTable: {
        Status st = sys::NftApply(sys::NftFamily::kInet, table_, {{sys::NftChange::kDeleteTable, {}}}, &keep_);
        return st.ok() || st.sys_errno() == ENOENT ? Status::Ok() : st;
      }
      case Plan::kElements:
        return sys::NftApply(sys::NftFamily::kInet, table_, plan.changes, &keep_);
      case Plan::kRebuild:
        break;
    }
    return sys::nft::Kernel().Apply(NftHostPortTransaction(table_, want), &keep_).Prefix("build hostPort table " + table_);
  }

  std::string data_dir_, table_;
  // The nfnetlink socket of the last change, closed with this object: a
  // process that closes it right after deleting nf_tables objects waits for
  // their destruction (an RCU grace period, ~10 ms); DEL keeps this object
  // until its veth is gone, so that wait overlaps the veth's own.
  UniqueFd keep_;
};

class IptablesHostPorts : public HostPortFirewall {
 public:
  explicit IptablesHostPorts(std::string data_dir) : data_dir_(std::move(data_dir)) {}

  // The chains are rebuilt whole: ADD and DEL cost what a full sync does.
  Status Add(const std::vector<HostPortRule>&, const HostPortSource& source) override { return Sync(source); }
  Status Remove(const std::vector<HostPortRule>&, const HostPortSource& source,
                const std::function<Result<bool>()>&) override {
    return Sync(source);
  }
  // Every rule carries the marker of the whole set, so one attachment's
  // rules cannot be told apart: CHECK does not look at them.
  Result<std::string> Verify(const std::vector<HostPortRule>&) override { return std::string(); }

  Status Sync(const HostPortSource& source) override {
    // The iptables backend already pays for iptables-save per family, so it
    // takes the lock first: one consistent read of the database for both.
    WEFT_ASSIGN_OR_RETURN(auto lock, sys::FileLock::Acquire(data_dir_ + "/firewall.lock"));
    WEFT_ASSIGN_OR_RETURN(auto want, source());
    for (bool v6 : {false, true}) {
      WEFT_ASSIGN_OR_RETURN(auto state, Read(want, v6));
      if (state.in_place) continue;
      bool remove = IptablesHostPortRules(data_dir_, want, v6).empty();
      const auto& jumps = remove ? state.present_jumps : state.missing_jumps;
      std::string tool = v6 ? "ip6tables-restore" : "iptables-restore";
      WEFT_ASSIGN_OR_RETURN(auto r, RunTool(tool, {"-w", "--noflush"},
                                            RenderIptablesHostPorts(data_dir_, want, v6, jumps, remove)));
      if (r.exit_code != 0) return ToolError(tool + ": install hostPort chains", r);
    }
    return Status::Ok();
  }

 private:
  struct State {
    bool in_place = true;
    std::vector<IptablesLine> missing_jumps, present_jumps;
  };

  Result<State> Read(const std::vector<HostPortRule>& want, bool v6) {
    std::string tool = v6 ? "ip6tables-save" : "iptables-save";
    WEFT_ASSIGN_OR_RETURN(auto r, RunTool(tool, {}, ""));
    if (r.exit_code != 0) return ToolError(tool, r);
    auto ch = IptablesHostPortChainNames(data_dir_);
    std::vector<std::string> have;
    for (auto l : Split(r.out, '\n')) have.emplace_back(Trim(l));
    auto ours = [&](const std::string& l) {
      for (const auto& c : {ch.dnat, ch.masq, ch.guard})
        if (StartsWith(l, "-A " + c + " ")) return true;
      return false;
    };
    auto want_lines = IptablesHostPortRules(data_dir_, want, v6);
    std::string marker = HostPortMarker(want);
    State st;
    size_t count = 0;
    bool chains_exist = false;
    for (const auto& l : have) {
      if (StartsWith(l, ":" + ch.dnat + " ")) chains_exist = true;
      if (!ours(l)) continue;
      ++count;
      if (l.find(marker) == std::string::npos) st.in_place = false;
    }
    if (count != want_lines.size()) st.in_place = false;
    for (const auto& j : IptablesHostPortJumps(data_dir_, v6)) {
      // iptables-save prints the same spec we add, modulo spacing.
      bool present = std::find(have.begin(), have.end(), j.line) != have.end();
      (present ? st.present_jumps : st.missing_jumps).push_back(j);
    }
    if (want_lines.empty()) {
      if (!st.present_jumps.empty() || chains_exist) st.in_place = false;
    } else if (!st.missing_jumps.empty()) {
      st.in_place = false;
    }
    return st;
  }

  std::string data_dir_;
};

}  // namespace

std::unique_ptr<HostPortFirewall> NewNftHostPorts(std::string data_dir) {
  return std::make_unique<NftHostPorts>(std::move(data_dir));
}
std::unique_ptr<HostPortFirewall> NewIptablesHostPorts(std::string data_dir) {
  return std::make_unique<IptablesHostPorts>(std::move(data_dir));
}

Status FlushUdpConntrack(const std::vector<HostPortRule>& rules) {
  std::vector<std::pair<int, bool>> done;
  for (const auto& r : Canonical(rules)) {
    if (r.protocol != "udp") continue;
    std::pair<int, bool> k{r.host_port, r.is_v4()};
    if (std::find(done.begin(), done.end(), k) != done.end()) continue;
    done.push_back(k);
    auto res = RunTool("conntrack", {"-D", "-f", r.is_v4() ? "ipv4" : "ipv6", "-p", "udp", "--orig-port-dst",
                                     std::to_string(r.host_port)},
                       "");
    // Exit 1 with "0 flow entries" is the common case; a missing tool means
    // there is nothing we can flush. Neither should fail the pod.
    if (!res.ok()) return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace weft::fw
