#include "policy/netpol_model.h"

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "sys/nft_build.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>

namespace weft::policy::netpol {

using sys::nft::operator+;

namespace {

using u128 = unsigned __int128;

u128 ToInt(const IpAddress& a) {
  u128 v = 0;
  for (int i = 0; i < a.size(); ++i) v = (v << 8) | a.bytes()[i];
  return v;
}

IpAddress FromInt(u128 v, bool v6) {
  uint8_t b[16];
  int n = v6 ? 16 : 4;
  for (int i = n - 1; i >= 0; --i) {
    b[i] = static_cast<uint8_t>(v & 0xff);
    v >>= 8;
  }
  return IpAddress::FromBytes(v6, b);
}

// [first, last] of a prefix.
std::pair<u128, u128> Range(const IpPrefix& p) {
  u128 lo = ToInt(p.Masked().addr());
  int host = p.host_bits();
  u128 span = host >= 128 ? ~u128(0) : ((u128(1) << host) - 1);
  return {lo, lo + span};
}

uint64_t Fnv64(const std::string& s) { return Fnv1a64(s); }

std::string ElementAddress(const std::string& e) {
  auto sp = e.find(' ');
  return sp == std::string::npos ? e : e.substr(0, sp);
}

bool IsRange(const std::string& e) { return e.find('-') != std::string::npos; }

}  // namespace

std::vector<std::string> BlockElements(const std::vector<IpBlock>& blocks, bool v6) {
  std::vector<std::pair<u128, u128>> ranges;
  for (const auto& b : blocks) {
    if (b.cidr.is_v4() == v6) continue;
    auto [lo, hi] = Range(b.cidr);
    // cidr minus its own excepts (an except narrows only its own block).
    std::vector<std::pair<u128, u128>> ex;
    for (const auto& e : b.except)
      if (e.is_v4() == b.cidr.is_v4()) ex.push_back(Range(e));
    std::sort(ex.begin(), ex.end());
    u128 cur = lo;
    bool done = false;
    for (const auto& [elo, ehi] : ex) {
      if (ehi < cur || elo > hi) continue;
      if (elo > cur) ranges.push_back({cur, elo - 1});
      if (ehi >= hi) {
        done = true;
        break;
      }
      cur = ehi + 1;
    }
    if (!done) ranges.push_back({cur, hi});
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<u128, u128>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && (merged.back().second == ~u128(0) || r.first <= merged.back().second + 1)) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  std::vector<std::string> out;
  for (const auto& [lo, hi] : merged) {
    if (lo == hi) out.push_back(FromInt(lo, v6).ToString());
    else out.push_back(FromInt(lo, v6).ToString() + "-" + FromInt(hi, v6).ToString());
  }
  return out;
}

Engine::Engine(EngineOptions opts) : opts_(std::move(opts)) {
  CreateSetDef("local4", SetDef{"ipv4_addr", false, {}});
  CreateSetDef("local6", SetDef{"ipv6_addr", false, {}});
}

std::string Engine::PodChainId(const std::string& key) { return Hex(Fnv64(key), 12); }

namespace {

// Canonical text of selectors and peers: equal text, equal selection.
std::string SelectorKey(const LabelSelector& s) {
  std::string out = s.valid ? "{" : "{!";
  for (const auto& [k, v] : s.match_labels) out += k + "=" + v + ",";
  std::vector<std::string> exprs;
  for (const auto& r : s.expressions) {
    std::vector<std::string> vals = r.values;
    std::sort(vals.begin(), vals.end());
    std::string e = r.key + "/" + std::to_string(static_cast<int>(r.op)) + "(";
    for (const auto& v : vals) e += v + ",";
    exprs.push_back(e + ")");
  }
  std::sort(exprs.begin(), exprs.end());
  for (const auto& e : exprs) out += e;
  return out + "}";
}

std::string PeerKey(const Peer& p) {
  std::string out = "[";
  out += p.pod_selector ? SelectorKey(*p.pod_selector) : "-";
  out += "|";
  out += p.namespace_selector ? SelectorKey(*p.namespace_selector) : "-";
  out += "|";
  if (p.ip_block) {
    out += p.ip_block->cidr.ToString();
    for (const auto& e : p.ip_block->except) out += "-" + e.ToString();
  }
  return out + "]";
}

}  // namespace

bool Engine::NamespaceMatches(const LabelSelector& sel, const std::string& ns) const {
  auto it = namespaces_.find(ns);
  if (it != namespaces_.end()) return sel.Matches(it->second.labels);
  // Not seen yet: the namespace carries at least its name label.
  return sel.Matches(Labels{{kNamespaceNameLabel, ns}});
}

bool Engine::PeerMatchesPod(const std::string& policy_ns, const Peer& peer, const Pod& pod) const {
  if (peer.ip_block) return false;
  if (peer.namespace_selector) {
    if (!NamespaceMatches(*peer.namespace_selector, pod.ns)) return false;
  } else if (pod.ns != policy_ns) {
    return false;
  }
  if (peer.pod_selector && !peer.pod_selector->Matches(pod.labels)) return false;
  return true;
}

void Engine::PodElements(const std::string& base, const PeerSet& ps, const Pod& p,
                         std::vector<std::pair<std::string, std::string>>* out) const {
  if (!p.Addressable() || ps.kind == PeerSet::Kind::kBlocks) return;
  bool selected = false;
  for (const auto& peer : ps.peers)
    if (PeerMatchesPod(ps.ns, peer, p)) {
      selected = true;
      break;
    }
  if (ps.kind == PeerSet::Kind::kPods) {
    if (selected)
      for (const auto& ip : p.ips)
        if (ip.is_v4() || v6_) out->push_back({base + (ip.is_v4() ? "-p4" : "-p6"), ip.ToString()});
    return;
  }
  for (const auto& ip : p.ips) {
    if (!ip.is_v4() && !v6_) continue;
    bool peer_ok = ps.any_peer || selected;
    for (const auto& peer : ps.peers) {
      if (peer_ok) break;
      if (!peer.ip_block || peer.ip_block->cidr.is_v4() != ip.is_v4()) continue;
      bool in = peer.ip_block->cidr.Contains(ip);
      for (const auto& e : peer.ip_block->except)
        if (e.Contains(ip)) in = false;
      peer_ok = in;
    }
    if (!peer_ok) continue;
    for (const auto& ref : ps.named) {
      uint16_t port = p.ResolvePort(ref.name, ref.proto);
      if (port == 0) continue;
      out->push_back({base + (ip.is_v4() ? "-n4" : "-n6"),
                      ip.ToString() + " . " + NftProtoName(ref.proto) + " . " + std::to_string(port)});
    }
  }
}

void Engine::CreateSetDef(const std::string& name, SetDef def) { sets_.Create(name, std::move(def)); }

void Engine::DeleteSetDef(const std::string& name) { sets_.Delete(name); }

void Engine::ElementDelta(const std::string& set, const std::string& elem, bool add) { sets_.Element(set, elem, add); }

void Engine::AddPodToSet(const std::string& base, const PeerSet& ps, const Pod& p, bool add) {
  std::vector<std::pair<std::string, std::string>> elems;
  PodElements(base, ps, p, &elems);
  for (const auto& [set, e] : elems) ElementDelta(set, e, add);
}

void Engine::ForSetsSeeing(const std::string& ns,
                           const std::function<void(const std::string&, const PeerSet&)>& fn) const {
  if (auto it = sets_by_ns_.find(ns); it != sets_by_ns_.end())
    for (const auto& b : it->second) fn(b, peer_sets_.at(b));
  for (const auto& b : cross_ns_sets_) fn(b, peer_sets_.at(b));
}

std::string Engine::AcquireSet(PeerSet proto, const std::string& key) {
  std::string base = "s" + Hex(Fnv64(key), 12);
  auto it = peer_sets_.find(base);
  if (it != peer_sets_.end()) {
    it->second.refs++;
    return base;
  }
  proto.refs = 1;
  bool named = proto.kind == PeerSet::Kind::kNamed;
  for (const char* fam : {"4", "6"}) {
    if (fam[0] == '6' && !v6_) continue;  // no IPv6 pod in the cluster (SetV6)
    std::string type = fam[0] == '4' ? "ipv4_addr" : "ipv6_addr";
    if (named) type += " . inet_proto . inet_service";
    CreateSetDef(base + (named ? "-n" : "-p") + fam, SetDef{type, false, {}});
  }
  const PeerSet& ps = peer_sets_.emplace(base, std::move(proto)).first->second;
  if (ps.cross_ns) cross_ns_sets_.insert(base);
  else sets_by_ns_[ps.ns].insert(base);
  // Fill it: only namespaces whose pods it can hold.
  for (const auto& [ns, keys] : pods_by_ns_) {
    bool candidate = ns == ps.ns;
    if (!candidate && ps.cross_ns) {
      bool any_ns_peer = ps.kind == PeerSet::Kind::kNamed && ps.any_peer;
      for (const auto& peer : ps.peers) {
        if (any_ns_peer) break;
        if (peer.ip_block) any_ns_peer = true;
        else if (peer.namespace_selector && NamespaceMatches(*peer.namespace_selector, ns)) any_ns_peer = true;
      }
      candidate = any_ns_peer;
    }
    if (!candidate) continue;
    for (const auto& [k, pod] : keys) AddPodToSet(base, ps, *pod, true);
  }
  return base;
}

std::string Engine::AcquireBlocks(const std::vector<std::string>& elements, bool v6) {
  std::string key = v6 ? "b6" : "b4";
  for (const auto& e : elements) key += "," + e;
  std::string base = "b" + Hex(Fnv64(key), 12);
  auto it = peer_sets_.find(base);
  if (it != peer_sets_.end()) {
    it->second.refs++;
    return base;
  }
  PeerSet ps;
  ps.kind = PeerSet::Kind::kBlocks;
  ps.refs = 1;
  ps.ns = v6 ? "6" : "4";  // (blocks belong to no namespace; the family names their set)
  peer_sets_.emplace(base, std::move(ps));
  std::string name = base + (v6 ? "-b6" : "-b4");
  CreateSetDef(name, SetDef{v6 ? "ipv6_addr" : "ipv4_addr", true, {}});
  for (const auto& e : elements) ElementDelta(name, e, true);
  return base;
}

void Engine::ReleaseSet(const std::string& base) {
  auto it = peer_sets_.find(base);
  if (it == peer_sets_.end() || --it->second.refs > 0) return;
  const PeerSet& ps = it->second;
  switch (ps.kind) {
    case PeerSet::Kind::kPods:
      DeleteSetDef(base + "-p4");
      if (v6_) DeleteSetDef(base + "-p6");
      break;
    case PeerSet::Kind::kNamed:
      DeleteSetDef(base + "-n4");
      if (v6_) DeleteSetDef(base + "-n6");
      break;
    case PeerSet::Kind::kBlocks:
      DeleteSetDef(base + (ps.ns == "6" ? "-b6" : "-b4"));
      break;
  }
  if (ps.kind != PeerSet::Kind::kBlocks) {
    if (ps.cross_ns) {
      cross_ns_sets_.erase(base);
    } else if (auto s = sets_by_ns_.find(ps.ns); s != sets_by_ns_.end()) {
      s->second.erase(base);
      if (s->second.empty()) sets_by_ns_.erase(s);
    }
  }
  peer_sets_.erase(it);
}

void Engine::AcquirePolicySets(PolicyState& ps) {
  const Policy& pol = ps.policy;
  ps.in.assign(pol.ingress.size(), {});
  ps.eg.assign(pol.egress.size(), {});
  for (int dir = 0; dir < 2; ++dir) {
    bool ingress = dir == 0;
    const auto& rules = ingress ? pol.ingress : pol.egress;
    auto& sets = ingress ? ps.in : ps.eg;
    for (size_t r = 0; r < rules.size(); ++r) {
      const Rule& rule = rules[r];
      std::vector<IpBlock> blocks;
      bool own_ns = false;  // a podSelector-only peer (the named-port set is about this namespace)
      std::set<std::string> seen;  // a peer written twice in one rule is one set
      for (const auto& peer : rule.peers) {
        if (peer.ip_block) {
          blocks.push_back(*peer.ip_block);
          continue;
        }
        // One set per distinct peer: a podSelector-only peer selects in the
        // policy's namespace, a namespaceSelector peer wherever its
        // namespaces are, whatever the policy's namespace.
        PeerSet pods;
        pods.kind = PeerSet::Kind::kPods;
        pods.peers.push_back(peer);
        pods.ns_selector = peer.namespace_selector.has_value();
        pods.cross_ns = pods.ns_selector;
        pods.ns = pods.ns_selector ? "" : pol.ns;
        if (!pods.ns_selector) own_ns = true;
        std::string key = "pods|" + pods.ns + "|" + PeerKey(peer);
        if (!seen.insert(key).second) continue;
        sets[r].pods.push_back(AcquireSet(std::move(pods), key));
      }
      auto b4 = BlockElements(blocks, false), b6 = BlockElements(blocks, true);
      if (!b4.empty()) sets[r].blocks4 = AcquireBlocks(b4, false);
      if (!b6.empty()) sets[r].blocks6 = AcquireBlocks(b6, true);
      if (ingress || rule.any_port) continue;
      PeerSet named;
      named.kind = PeerSet::Kind::kNamed;
      std::string named_key;
      for (const auto& ref : rule.ports)
        if (ref.proto_valid && !ref.name.empty()) {
          named.named.push_back(ref);
          named_key += ref.name + "/" + NftProtoName(ref.proto) + ",";
        }
      if (named.named.empty()) continue;
      named.any_peer = rule.any_peer;
      named.peers = rule.peers;
      std::string all_keys;
      for (const auto& peer : rule.peers) {
        all_keys += PeerKey(peer);
        if (peer.namespace_selector) named.ns_selector = true;
      }
      named.ns = own_ns ? pol.ns : "";
      named.cross_ns = named.ns_selector || rule.any_peer || !blocks.empty();
      std::string key = "named|" + named.ns + "|" + (rule.any_peer ? "*" : "") + "|" + all_keys + "|" + named_key;
      sets[r].named = AcquireSet(std::move(named), key);
    }
  }
}

void Engine::ReleasePolicySets(const PolicyState& ps) {
  for (const auto* sets : {&ps.in, &ps.eg})
    for (const auto& rs : *sets) {
      for (const auto* b : {&rs.named, &rs.blocks4, &rs.blocks6})
        if (!b->empty()) ReleaseSet(*b);
      for (const auto& b : rs.pods) ReleaseSet(b);
    }
}

namespace {

// The port half of a rule's matches on `pod` (one empty list = any port).
// Named ports resolve against the pod for ingress; egress named ports live
// in the rule's named-port set instead.
std::vector<NftExprs> PortMatches(const Rule& rule, const Pod& pod, bool ingress) {
  if (rule.any_port) return {NftExprs{}};
  std::vector<NftExprs> ports;
  for (const auto& ref : rule.ports) {
    if (!ref.proto_valid) continue;
    uint16_t port = ref.port, end = ref.end_port;
    if (!ref.name.empty()) {
      if (!ingress) continue;  // egress: the named-port set below
      port = pod.ResolvePort(ref.name, ref.proto);
      end = 0;
      if (port == 0) continue;  // this pod has no such port
    }
    ports.push_back(nftr::Port(ref.proto, port, end));
  }
  return ports;
}

// The verdict of a packet policy drops: the drop chain records, counts
// and drops it (the reply chains' copy of this rule goes to its reply
// twin, rdrop-*).
sys::nft::Verdict DropVerdict(bool ingress) { return nftr::Goto(ingress ? "drop-in" : "drop-eg"); }

// A local pod's chain starts so: invalid packets dropped, the pod's own
// traffic allowed.
std::vector<NftRule> ChainPrefix(const Pod& pod, bool ingress) {
  std::vector<NftRule> full;
  full.push_back(nftr::MakeRule(nftr::CtInvalid(), nftr::Drop()));
  for (const auto& ip : pod.ips)
    full.push_back(nftr::MakeRule(nftr::AddrIs(ip, ingress), ingress ? nftr::Accept() : nftr::Return(), "itself"));
  return full;
}

}  // namespace

std::vector<NftRule> Engine::RuleStatements(const std::string& policy_key, const Rule& rule, size_t index,
                                            const RuleSets& sets, bool ingress, const Pod& pod, bool v6) {
  std::string what = policy_key.substr(0, 100) + (ingress ? " ingress " : " egress ") + std::to_string(index);
  return MatchStatements(what, rule, sets, ingress, pod, ingress ? nftr::Accept() : nftr::Return(), v6);
}

std::vector<NftRule> Engine::MatchStatements(const std::string& what, const Rule& rule, const RuleSets& sets,
                                             bool ingress, const Pod& pod, const sys::nft::Verdict& verdict,
                                             bool v6) {
  std::vector<NftExprs> peers;
  if (rule.any_peer) {
    peers.emplace_back();
  } else {
    for (const auto& base : sets.pods) {
      peers.push_back(nftr::InSet(false, ingress, base + "-p4"));
      if (v6) peers.push_back(nftr::InSet(true, ingress, base + "-p6"));
    }
    if (!sets.blocks4.empty()) peers.push_back(nftr::InSet(false, ingress, sets.blocks4 + "-b4"));
    if (!sets.blocks6.empty()) peers.push_back(nftr::InSet(true, ingress, sets.blocks6 + "-b6"));
  }
  std::vector<NftExprs> ports = PortMatches(rule, pod, ingress);
  std::vector<NftRule> out;
  for (const auto& p : peers)
    for (const auto& q : ports) out.push_back(nftr::MakeRule(p + q, verdict, what));
  if (!ingress && !sets.named.empty()) {
    out.push_back(nftr::MakeRule(nftr::NamedPortIn(false, sets.named + "-n4"), verdict, what));
    if (v6) out.push_back(nftr::MakeRule(nftr::NamedPortIn(true, sets.named + "-n6"), verdict, what));
  }
  return out;
}

Engine::PodRules Engine::LocalPodRules(const Pod& pod) const {
  PodRules out;
  auto pol_keys = policies_by_ns_.find(pod.ns);
  if (pol_keys == policies_by_ns_.end()) return out;
  for (const auto& pkey : pol_keys->second) {
    const PolicyState& ps = policies_.at(pkey);
    const Policy& pol = ps.policy;
    if (!pol.pod_selector.Matches(pod.labels)) continue;
    for (int dir = 0; dir < 2; ++dir) {
      bool ingress = dir == 0;
      if (ingress ? !pol.isolates_ingress : !pol.isolates_egress) continue;
      (ingress ? out.isolated_in : out.isolated_eg) = true;
      const auto& rules = ingress ? pol.ingress : pol.egress;
      const auto& sets = ingress ? ps.in : ps.eg;
      auto& chain = ingress ? out.in : out.eg;
      for (size_t r = 0; r < rules.size(); ++r)
        for (auto& s : RuleStatements(pkey, rules[r], r, sets[r], ingress, pod, v6_)) chain.push_back(std::move(s));
    }
  }
  return out;
}

bool Engine::SubjectSelects(const ClusterPolicy& p, const Pod& pod) const {
  if (!p.enforced || !pod.Addressable()) return false;
  if (!NamespaceMatches(p.subject_ns, pod.ns)) return false;
  return !p.subject_pods || p.subject_pods->Matches(pod.labels);
}

// Evaluation per direction: the Admin tier (policies by priority, then
// name; rules in written order), then the pod's NetworkPolicies, then the
// Baseline tier, then the default (allow). Accept and Deny end it; an Admin
// Pass skips to the NetworkPolicy part (goto the tail chain), a Baseline
// Pass to the default.
//
// kNode, the pod to its own node (input hook): the same order over the
// tiers' egress rules, where NetworkPolicy, when it isolates the pod for
// egress, decides "allow" (it never restricts a pod's traffic to its own
// node, docs/networkpolicy.md, "Semantics": always allowed), and allow is final
// (accept: no ingress side follows). Pod and named-port peers are left out:
// a locally delivered packet's destination is a node address, never a
// pod's.
Engine::TierSelection Engine::SelectTiers(const Pod& pod) const {
  TierSelection out;
  for (const auto* order : {&admin_order_, &baseline_order_})
    for (const auto& entry : *order) {
      const CnpState& st = cnps_.at(entry.second);
      if ((st.policy.ingress.empty() && st.policy.egress.empty()) || !SubjectSelects(st.policy, pod)) continue;
      (order == &admin_order_ ? out.admin : out.baseline).push_back(&st);
    }
  return out;
}

Engine::TierChain Engine::ComposeChain(const Pod& pod, const TierSelection& tiers, ChainKind kind,
                                       const std::string& name, bool np_isolated,
                                       std::vector<NftRule> np_rules) const {
  const bool ingress = kind == ChainKind::kIngress;
  const bool node = kind == ChainKind::kNode;
  const sys::nft::Verdict allow = ingress || node ? nftr::Accept() : nftr::Return();
  bool pass = false;
  auto collect = [&](const std::vector<const CnpState*>& selected, bool admin, std::vector<NftRule>* into) {
    bool any = false;
    for (const CnpState* stp : selected) {
      const CnpState& st = *stp;
      const ClusterPolicy& p = st.policy;
      const auto& rules = ingress ? p.ingress : p.egress;
      if (rules.empty()) continue;
      if (!node) any = true;
      const auto& sets = ingress ? st.sets.in : st.sets.eg;
      const auto& match = ingress ? st.sets.policy.ingress : st.sets.policy.egress;
      for (size_t r = 0; r < rules.size(); ++r) {
        RuleSets rs = sets[r];
        if (node) {
          rs.pods.clear();
          rs.named.clear();
        }
        sys::nft::Verdict verdict = allow;
        bool passes = false;
        if (rules[r].action == Action::kDeny) {
          verdict = DropVerdict(ingress);
        } else if (rules[r].action == Action::kPass && admin) {
          verdict = nftr::Goto("t" + name);
          passes = true;
        }
        std::string what = std::string(TierName(p.tier)) + ":" + p.name.substr(0, 80) +
                           (ingress ? " ingress " : " egress ") + std::to_string(r) + " " +
                           ActionName(rules[r].action);
        auto statements = MatchStatements(what, match[r], rs, ingress, pod, verdict, v6_);
        if (statements.empty()) continue;
        any = true;
        pass = pass || passes;
        for (auto& s : statements) into->push_back(std::move(s));
      }
    }
    return any;
  };
  std::vector<NftRule> admin, baseline;
  bool admin_any = collect(tiers.admin, true, &admin);
  bool baseline_any = collect(tiers.baseline, false, &baseline);
  TierChain out;
  out.isolated = node ? admin_any || (baseline_any && !np_isolated) : np_isolated || admin_any || baseline_any;
  if (!out.isolated) return out;
  std::vector<NftRule> rest;
  if (node && np_isolated) {
    rest.push_back(nftr::MakeRule({}, nftr::Accept(), "NetworkPolicy: the pod's own node"));
  } else if (np_isolated) {
    rest = std::move(np_rules);
    rest.push_back(nftr::MakeRule({}, DropVerdict(ingress)));
  } else {
    rest = std::move(baseline);
    rest.push_back(nftr::MakeRule({}, allow, "default"));
  }
  if (node) out.head = {nftr::MakeRule(nftr::CtInvalid(), nftr::Drop())};
  else out.head = ChainPrefix(pod, ingress);
  for (auto& r : admin) out.head.push_back(std::move(r));
  if (pass) {
    out.head.push_back(nftr::MakeRule({}, nftr::Goto("t" + name)));
    out.tail = std::move(rest);
  } else {
    for (auto& r : rest) out.head.push_back(std::move(r));
  }
  return out;
}

void Engine::WithdrawLocalPod(const std::string& key) {
  auto it = local_ips_.find(key);
  if (it == local_ips_.end()) return;
  for (const auto& ip : it->second) {
    std::string s = ip.ToString();
    if (ip.is_v4()) {
      desired_.ingress4.erase(s);
      desired_.egress4.erase(s);
      desired_.ingress4r.erase(s);
      desired_.egress4r.erase(s);
      desired_.node4.erase(s);
      desired_.node4r.erase(s);
    } else {
      desired_.ingress6.erase(s);
      desired_.egress6.erase(s);
      desired_.ingress6r.erase(s);
      desired_.egress6r.erase(s);
      desired_.node6.erase(s);
      desired_.node6r.erase(s);
    }
    ElementDelta(ip.is_v4() ? "local4" : "local6", s, false);
  }
  local_ips_.erase(it);
}

void Engine::DropChain(const std::string& name) {
  if (desired_.chains.erase(name)) dirty_chains_.insert(name);
}

void Engine::PutChain(const std::string& name, std::vector<NftRule> rules) {
  auto it = desired_.chains.find(name);
  if (it == desired_.chains.end() || it->second != rules) {
    desired_.chains[name] = std::move(rules);
    dirty_chains_.insert(name);
  }
}

void Engine::SetPodChain(const Pod& pod, const std::string& name, TierChain chain) {
  // "in-X" judges packets as they come; "rin-X" replies of connections
  // marked for a recheck, with source and destination swapped. "tin-X" (and
  // "rtin-X") is the part after the Admin tier that its Pass rules go to.
  std::string reply_name = "r" + name;
  std::string tail_name = "t" + name, rtail_name = "rt" + name;
  if (!chain.isolated) {
    for (const auto& c : {name, reply_name, tail_name, rtail_name}) DropChain(c);
    return;
  }
  // A goto (the tail, a drop chain) goes to its reply twin.
  auto reply_of = [](const std::vector<NftRule>& rules) {
    std::vector<NftRule> reply;
    reply.reserve(rules.size());
    for (const auto& r : rules) reply.push_back(nftr::ReplyOf(r));
    return reply;
  };
  if (chain.tail.empty()) {
    DropChain(tail_name);
    DropChain(rtail_name);
  } else {
    PutChain(rtail_name, reply_of(chain.tail));
    PutChain(tail_name, std::move(chain.tail));
  }
  PutChain(reply_name, reply_of(chain.head));
  PutChain(name, std::move(chain.head));
  Model& m = desired_;
  const bool ingress = name.rfind("in-", 0) == 0, node = name.rfind("node-", 0) == 0;
  for (const auto& ip : pod.ips) {
    bool v4 = ip.is_v4();
    auto& map = node ? (v4 ? m.node4 : m.node6) : ingress ? (v4 ? m.ingress4 : m.ingress6) : (v4 ? m.egress4 : m.egress6);
    auto& rmap = node      ? (v4 ? m.node4r : m.node6r)
                 : ingress ? (v4 ? m.ingress4r : m.ingress6r)
                           : (v4 ? m.egress4r : m.egress6r);
    map[ip.ToString()] = name;
    rmap[ip.ToString()] = reply_name;
  }
}

// A node chain has nothing of its pod in it (no "itself", no named port
// resolved on it, no pod peers): pods with the same rules share one chain,
// named by a hash of its rules, so a policy change rewrites each distinct
// chain once instead of once per pod. Reference-counted by pod.
void Engine::SetNodeChain(const std::string& key, const Pod* pod, TierChain chain) {
  std::string old;
  if (auto it = pod_node_chain_.find(key); it != pod_node_chain_.end()) old = it->second;
  std::string name;
  if (pod && chain.isolated) {
    auto named = [&](const std::string& n) {
      TierChain c = chain;
      for (auto* part : {&c.head, &c.tail})
        for (auto& r : *part)
          for (auto& e : r.exprs)
            if (auto* v = std::get_if<sys::nft::Verdict>(&e); v && v->chain == "tnode-@") v->chain = "t" + n;
      return c;
    };
    std::string content;
    for (const auto* part : {&chain.head, &chain.tail}) {
      for (const auto& r : *part) content += nftr::Render(r) + "\n";
      content += "|\n";
    }
    name = "node-" + Hex(Fnv64(content), 12);
    TierChain placed = named(name);
    auto existing = desired_.chains.find(name);
    if (name != old && existing != desired_.chains.end() && existing->second != placed.head) {
      name = "node-" + PodChainId(key);  // a hash collision: this pod's own chain
      placed = named(name);
    }
    if (name != old) node_chain_refs_[name]++;
    SetPodChain(*pod, name, std::move(placed));  // unchanged rules: nothing to send
    pod_node_chain_[key] = name;
    Model& m = desired_;
    for (const auto& ip : pod->ips) {
      (ip.is_v4() ? m.node4 : m.node6)[ip.ToString()] = name;
      (ip.is_v4() ? m.node4r : m.node6r)[ip.ToString()] = "r" + name;
    }
  } else {
    pod_node_chain_.erase(key);
  }
  if (!old.empty() && old != name) {
    auto it = node_chain_refs_.find(old);
    if (it != node_chain_refs_.end() && --it->second <= 0) {
      node_chain_refs_.erase(it);
      SetPodChain(Pod{}, old, TierChain{});
    }
  }
}

void Engine::RebuildLocalPod(const std::string& key) {
  std::string cid = PodChainId(key);
  std::string in_chain = "in-" + cid, eg_chain = "eg-" + cid;
  WithdrawLocalPod(key);
  auto pit = pods_.find(key);
  if (pit == pods_.end() || !IsLocal(*pit->second)) {
    for (const auto& c : {in_chain, eg_chain}) SetPodChain(Pod{}, c, TierChain{});
    SetNodeChain(key, nullptr, TierChain{});
    return;
  }
  const Pod& pod = *pit->second;
  local_ips_[key] = pod.ips;
  for (const auto& ip : pod.ips) ElementDelta(ip.is_v4() ? "local4" : "local6", ip.ToString(), true);
  PodRules rules = LocalPodRules(pod);
  const TierSelection tiers = SelectTiers(pod);  // once for the three chains
  SetNodeChain(key, &pod, ComposeChain(pod, tiers, ChainKind::kNode, "node-@", rules.isolated_eg, {}));
  SetPodChain(pod, in_chain,
              ComposeChain(pod, tiers, ChainKind::kIngress, in_chain, rules.isolated_in, std::move(rules.in)));
  SetPodChain(pod, eg_chain,
              ComposeChain(pod, tiers, ChainKind::kEgress, eg_chain, rules.isolated_eg, std::move(rules.eg)));
}

void Engine::RebuildLocalPodsOfNamespace(const std::string& ns) {
  auto it = pods_by_ns_.find(ns);
  if (it == pods_by_ns_.end()) return;
  for (const auto& [k, pod] : it->second)
    if (IsLocal(*pod)) RebuildLocalPod(k);
}

void Engine::UpsertPod(const Pod& pod) { UpsertPod(std::make_shared<const Pod>(pod)); }

void Engine::CountV6(const Pod& p, int delta) {
  for (const auto& ip : p.ips)
    if (!ip.is_v4()) v6_addrs_ += delta;
}

void Engine::SetV6(bool on) {
  if (on == v6_) return;
  if (!on) {
    // The last IPv6 pod address is gone: the IPv6 sets are empty.
    for (const auto& [base, ps] : peer_sets_) {
      if (ps.kind == PeerSet::Kind::kPods) DeleteSetDef(base + "-p6");
      if (ps.kind == PeerSet::Kind::kNamed) DeleteSetDef(base + "-n6");
    }
    v6_ = false;
  } else {
    v6_ = true;
    for (const auto& [base, ps] : peer_sets_) {
      if (ps.kind == PeerSet::Kind::kBlocks) continue;
      bool named = ps.kind == PeerSet::Kind::kNamed;
      CreateSetDef(base + (named ? "-n6" : "-p6"),
                   SetDef{named ? "ipv6_addr . inet_proto . inet_service" : "ipv6_addr", false, {}});
    }
    // Fill them: only pods with an IPv6 address contribute.
    for (const auto& entry : pods_) {
      const auto& pod = entry.second;  // a named copy: clang 14 cannot capture structured bindings
      bool has6 = false;
      for (const auto& ip : pod->ips) has6 = has6 || !ip.is_v4();
      if (!has6) continue;
      std::vector<std::pair<std::string, std::string>> elems;
      ForSetsSeeing(pod->ns, [&](const std::string& b, const PeerSet& ps) { PodElements(b, ps, *pod, &elems); });
      for (const auto& [set, e] : elems)
        if (set.ends_with("6")) ElementDelta(set, e, true);
    }
  }
  // Every local chain gains or loses its IPv6 peer rules.
  for (const auto& [key, ips] : std::unordered_map<std::string, std::vector<IpAddress>>(local_ips_)) {
    if (batching_) deferred_.insert(key);
    else RebuildLocalPod(key);
  }
}

void Engine::UpsertPod(PodPtr pod) {
  std::string key = pod->key();
  auto it = pods_.find(key);
  bool was_local = false;
  if (it != pods_.end()) {
    if (it->second == pod || *it->second == *pod) return;
    was_local = IsLocal(*it->second);
    const Pod& old = *it->second;
    ForSetsSeeing(old.ns, [&](const std::string& b, const PeerSet& ps) { AddPodToSet(b, ps, old, false); });
    CountV6(old, -1);
    it->second = std::move(pod);
  } else {
    it = pods_.emplace(key, std::move(pod)).first;
  }
  const Pod& cur = *it->second;
  pods_by_ns_[cur.ns][key] = &cur;
  CountV6(cur, +1);
  if (v6_ && v6_addrs_ == 0) SetV6(false);
  if (!v6_ && v6_addrs_ > 0) {
    SetV6(true);  // fills the new sets from every pod, this one included
    ForSetsSeeing(cur.ns, [&](const std::string& b, const PeerSet& ps) {
      std::vector<std::pair<std::string, std::string>> elems;
      PodElements(b, ps, cur, &elems);
      for (const auto& [set, e] : elems)
        if (!set.ends_with("6")) ElementDelta(set, e, true);
    });
  } else {
    ForSetsSeeing(cur.ns, [&](const std::string& b, const PeerSet& ps) { AddPodToSet(b, ps, cur, true); });
  }
  if (was_local || IsLocal(cur)) RebuildLocalPod(key);
}

void Engine::RemovePod(const std::string& key) {
  auto it = pods_.find(key);
  if (it == pods_.end()) return;
  const Pod& old = *it->second;
  ForSetsSeeing(old.ns, [&](const std::string& b, const PeerSet& ps) { AddPodToSet(b, ps, old, false); });
  CountV6(old, -1);
  std::string ns = old.ns;
  pods_.erase(it);
  auto bit = pods_by_ns_.find(ns);
  if (bit != pods_by_ns_.end()) {
    bit->second.erase(key);
    if (bit->second.empty()) pods_by_ns_.erase(bit);
  }
  if (v6_ && v6_addrs_ == 0) SetV6(false);
  RebuildLocalPod(key);
}

void Engine::UpsertNamespace(const Namespace& ns) {
  Namespace n = ns;
  n.labels.emplace(kNamespaceNameLabel, n.name);
  auto it = namespaces_.find(n.name);
  Labels old = it != namespaces_.end() ? it->second.labels : Labels{{kNamespaceNameLabel, n.name}};
  if (old == n.labels) {
    namespaces_[n.name] = std::move(n);
    return;
  }
  // Pods of this namespace move in or out of namespaceSelector peers: only
  // of the sets with a peer whose namespaceSelector decides differently on
  // the old and the new labels (a pod's membership depends on its
  // namespace's labels through those alone).
  std::vector<const std::pair<const std::string, PeerSet>*> affected;
  for (const auto& b : cross_ns_sets_) {
    const auto& entry = *peer_sets_.find(b);
    if (!entry.second.ns_selector) continue;
    for (const auto& peer : entry.second.peers)
      if (peer.namespace_selector &&
          peer.namespace_selector->Matches(old) != peer.namespace_selector->Matches(n.labels)) {
        affected.push_back(&entry);
        break;
      }
  }
  const std::map<std::string, const Pod*>* keys = nullptr;
  if (auto pit = pods_by_ns_.find(n.name); pit != pods_by_ns_.end()) keys = &pit->second;
  if (keys)
    for (const auto* b : affected)
      for (const auto& [k, pod] : *keys) AddPodToSet(b->first, b->second, *pod, false);
  std::string name = n.name;
  namespaces_[name] = std::move(n);
  if (keys)
    for (const auto* b : affected)
      for (const auto& [k, pod] : *keys) AddPodToSet(b->first, b->second, *pod, true);
  // ClusterNetworkPolicy subjects select by namespace labels.
  if (!cnps_.empty()) RebuildLocalPodsOfNamespace(name);
}

void Engine::RemoveNamespace(const std::string& name) {
  // Its pods (if any remain) fall back to the name label only.
  UpsertNamespace(Namespace{name, {{kNamespaceNameLabel, name}}});
  namespaces_.erase(name);
}

void Engine::UpsertPolicy(const Policy& policy) {
  std::string key = policy.key();
  auto it = policies_.find(key);
  std::optional<PolicyState> old;
  if (it != policies_.end()) {
    if (it->second.policy == policy) return;
    old = std::move(it->second);
  }
  PolicyState& ps = policies_[key];
  ps = PolicyState{};
  ps.policy = policy;
  policies_by_ns_[policy.ns].insert(key);
  // The new sets first: a set both versions use keeps its reference and its
  // elements (no churn in the kernel).
  AcquirePolicySets(ps);
  if (old) ReleasePolicySets(*old);
  RebuildLocalPodsOfNamespace(policy.ns);
}

void Engine::RemovePolicy(const std::string& key) {
  auto it = policies_.find(key);
  if (it == policies_.end()) return;
  std::string ns = it->second.policy.ns;
  ReleasePolicySets(it->second);
  policies_.erase(it);
  auto bit = policies_by_ns_.find(ns);
  if (bit != policies_by_ns_.end()) {
    bit->second.erase(key);
    if (bit->second.empty()) policies_by_ns_.erase(bit);
  }
  RebuildLocalPodsOfNamespace(ns);
}

std::vector<std::string> Engine::NamespacesWithPolicies() const {
  std::set<std::string> out;
  for (const auto& [ns, keys] : policies_by_ns_) out.insert(ns);
  // Namespaces a ClusterNetworkPolicy with rules may select: every known
  // namespace its subject's namespace selector matches.
  for (const auto& [name, st] : cnps_) {
    const ClusterPolicy& p = st.policy;
    if (!p.enforced || (p.ingress.empty() && p.egress.empty())) continue;
    for (const auto& [ns, n] : namespaces_)
      if (p.subject_ns.Matches(n.labels)) out.insert(ns);
  }
  return {out.begin(), out.end()};
}

size_t Engine::local_isolated(bool ingress) const {
  std::set<std::string> chains;
  const auto& m4 = ingress ? desired_.ingress4 : desired_.egress4;
  const auto& m6 = ingress ? desired_.ingress6 : desired_.egress6;
  for (const auto* m : {&m4, &m6})
    for (const auto& [ip, c] : *m) chains.insert(c);
  return chains.size();
}

std::vector<PodPolicyView> Engine::LocalPods() const {
  std::vector<PodPolicyView> out;
  for (const auto& [key, ips] : local_ips_) {
    const Pod& pod = *pods_.at(key);
    PodPolicyView v;
    v.pod = key;
    for (const auto& ip : ips) v.ips.push_back(ip.ToString());
    if (auto pk = policies_by_ns_.find(pod.ns); pk != policies_by_ns_.end()) {
      for (const auto& pkey : pk->second) {
        const Policy& pol = policies_.at(pkey).policy;
        if (!pol.pod_selector.Matches(pod.labels)) continue;
        if (pol.isolates_ingress) v.ingress_policies.push_back(pkey);
        if (pol.isolates_egress) v.egress_policies.push_back(pkey);
      }
    }
    // ClusterNetworkPolicies as "Admin:name" / "Baseline:name", in the order
    // they are evaluated.
    for (const auto* order : {&admin_order_, &baseline_order_})
      for (const auto& entry : *order) {
        const ClusterPolicy& p = cnps_.at(entry.second).policy;
        if (!SubjectSelects(p, pod)) continue;
        std::string name = std::string(TierName(p.tier)) + ":" + p.name;
        if (!p.ingress.empty()) v.ingress_policies.push_back(name);
        if (!p.egress.empty()) v.egress_policies.push_back(name);
      }
    v.isolated_ingress = !v.ingress_policies.empty();
    v.isolated_egress = !v.egress_policies.empty();
    std::string cid = PodChainId(key);
    auto rendered = [&](const std::string& chain, std::vector<std::string>* into) {
      if (auto it = desired_.chains.find(chain); it != desired_.chains.end())
        for (const auto& r : it->second) into->push_back(nftr::Render(r));
    };
    rendered("in-" + cid, &v.ingress_rules);
    rendered("eg-" + cid, &v.egress_rules);
    if (auto n = pod_node_chain_.find(key); n != pod_node_chain_.end()) rendered(n->second, &v.node_rules);
    out.push_back(std::move(v));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pod < b.pod; });
  return out;
}

std::vector<const Policy*> Engine::PoliciesIn(const std::string& ns) const {
  std::vector<const Policy*> out;
  if (auto it = policies_by_ns_.find(ns); it != policies_by_ns_.end())
    for (const auto& key : it->second) out.push_back(&policies_.at(key).policy);
  return out;
}

std::string PodPolicyViewsJson(const std::vector<PodPolicyView>& pods) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& v : pods)
    out.push_back({{"pod", v.pod},
                   {"ips", v.ips},
                   {"isolatedIngress", v.isolated_ingress},
                   {"isolatedEgress", v.isolated_egress},
                   {"ingressPolicies", v.ingress_policies},
                   {"egressPolicies", v.egress_policies},
                   {"ingressRules", v.ingress_rules},
                   {"egressRules", v.egress_rules},
                   {"nodeRules", v.node_rules}});
  return out.dump(2) + "\n";
}

// --- The table's transactions (netpol_nft.h) ----------------------------------

TableView Engine::View() const {
  const Model& m = desired_;
  return TableView{&m.sets,
                   &m.chains,
                   {&m.ingress4, &m.egress4, &m.ingress6, &m.egress6, &m.ingress4r, &m.egress4r, &m.ingress6r,
                    &m.egress6r, &m.node4, &m.node6, &m.node4r, &m.node6r},
                   opts_.pending_group};
}

Result<sys::nft::Transaction> Engine::Full() const { return FullTransaction(View()); }

Result<sys::nft::Transaction> Engine::Delta() const {
  const Model& h = applied_;
  TableDelta d;
  d.sets = &sets_.changes();
  for (const auto& name : dirty_chains_) {
    TableDelta::ChainChange c;
    if (auto w = desired_.chains.find(name); w != desired_.chains.end()) c.want = &w->second;
    if (auto a = h.chains.find(name); a != h.chains.end()) c.have = &a->second;
    d.chains[name] = c;
  }
  d.applied_maps = {&h.ingress4, &h.egress4, &h.ingress6, &h.egress6, &h.ingress4r, &h.egress4r,
                    &h.ingress6r, &h.egress6r, &h.node4, &h.node6, &h.node4r, &h.node6r};
  return DeltaTransaction(View(), d);
}

void Engine::MarkApplied(bool full) {
  sets_.Applied(full || !has_applied_);
  if (full || !has_applied_) {
    applied_.chains = desired_.chains;
  } else {
    // Only what changed since the last apply (an event touches a few of
    // the node's hundreds of chains).
    for (const auto& name : dirty_chains_) {
      auto w = desired_.chains.find(name);
      if (w == desired_.chains.end()) applied_.chains.erase(name);
      else applied_.chains[name] = w->second;
    }
  }
  applied_.ingress4 = desired_.ingress4;
  applied_.egress4 = desired_.egress4;
  applied_.ingress6 = desired_.ingress6;
  applied_.egress6 = desired_.egress6;
  applied_.ingress4r = desired_.ingress4r;
  applied_.egress4r = desired_.egress4r;
  applied_.ingress6r = desired_.ingress6r;
  applied_.egress6r = desired_.egress6r;
  applied_.node4 = desired_.node4;
  applied_.node6 = desired_.node6;
  applied_.node4r = desired_.node4r;
  applied_.node6r = desired_.node6r;
  dirty_chains_.clear();
  has_applied_ = true;
}

std::vector<std::string> Engine::Tightened() const {
  std::set<std::string> out;
  if (!has_applied_) return {};
  for (const auto& [name, c] : sets_.changes()) {
    if (name == "local4" || name == "local6") continue;
    for (const auto& e : c.dels)
      if (!IsRange(e)) out.insert(ElementAddress(e));
    // An address entering the peers of a Deny or Pass rule loses what a
    // later rule allowed it.
    auto dash = name.rfind('-');
    if (dash != std::string::npos && deny_bases_.count(name.substr(0, dash)))
      for (const auto& e : c.adds)
        if (!IsRange(e)) out.insert(ElementAddress(e));
  }
  // Local pods whose chain changed or that became isolated.
  std::set<std::string> changed_chains;
  for (const auto& name : dirty_chains_) {
    auto h = applied_.chains.find(name);
    auto w = desired_.chains.find(name);
    if (w != desired_.chains.end() && (h == applied_.chains.end() || h->second != w->second))
      changed_chains.insert(name[0] == 't' ? name.substr(1) : name);  // a tail stands for its head
    else if (w == desired_.chains.end() && h != applied_.chains.end() && name[0] == 't')
      changed_chains.insert(name.substr(1));
  }
  auto scan = [&](const std::map<std::string, std::string>& want, const std::map<std::string, std::string>& have) {
    for (const auto& [ip, chain] : want) {
      auto it = have.find(ip);
      if (it == have.end() || it->second != chain || changed_chains.count(chain)) out.insert(ip);
    }
  };
  scan(desired_.ingress4, applied_.ingress4);
  scan(desired_.egress4, applied_.egress4);
  scan(desired_.ingress6, applied_.ingress6);
  scan(desired_.egress6, applied_.egress6);
  scan(desired_.node4, applied_.node4);
  scan(desired_.node6, applied_.node6);
  return {out.begin(), out.end()};
}

}  // namespace weft::policy::netpol
