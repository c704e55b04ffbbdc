#include "agent/netpol_model.h"

#include <algorithm>
#include <cstdio>

namespace weft::agent::netpol {
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

uint64_t Fnv64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string Hex(uint64_t v, int digits) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return std::string(buf + 16 - digits);
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += ' ';
    out += p;
  }
  return out;
}

// The address part of a set element ("10.0.0.1", "10.0.0.1 . tcp . 80").
std::string ElementAddress(const std::string& e) {
  auto sp = e.find(' ');
  return sp == std::string::npos ? e : e.substr(0, sp);
}

bool IsRange(const std::string& e) { return e.find('-') != std::string::npos; }

const char* kDropIngress = "drop-ingress";
const char* kDropEgress = "drop-egress";

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
  desired_.sets["local4"] = SetDef{"ipv4_addr", false, {}};
  desired_.sets["local6"] = SetDef{"ipv6_addr", false, {}};
}

std::string Engine::PolicyId(const std::string& key) { return "p" + Hex(Fnv64(key), 12); }
std::string Engine::PodChainId(const std::string& key) { return Hex(Fnv64(key), 12); }

const Labels& Engine::NamespaceLabels(const std::string& ns) const {
  static const Labels kEmpty;
  auto it = namespaces_.find(ns);
  return it == namespaces_.end() ? kEmpty : it->second.labels;
}

bool Engine::PeerMatchesPod(const Policy& pol, const Peer& peer, const Pod& pod) const {
  if (peer.ip_block) return false;
  if (peer.namespace_selector) {
    auto it = namespaces_.find(pod.ns);
    if (it == namespaces_.end()) {
      // Not seen yet: the namespace carries at least its name label.
      Labels l{{kNamespaceNameLabel, pod.ns}};
      if (!peer.namespace_selector->Matches(l)) return false;
    } else if (!peer.namespace_selector->Matches(it->second.labels)) {
      return false;
    }
  } else if (pod.ns != pol.ns) {
    return false;
  }
  if (peer.pod_selector && !peer.pod_selector->Matches(pod.labels)) return false;
  return true;
}

void Engine::PodElements(const PolicyState& ps, bool ingress, size_t r, const Pod& p,
                         std::vector<std::pair<std::string, std::string>>* out) const {
  if (!p.Addressable()) return;
  const Rule& rule = ingress ? ps.policy.ingress[r] : ps.policy.egress[r];
  const RuleSets& rs = ingress ? ps.in[r] : ps.eg[r];
  bool selected = false;
  for (const auto& peer : rule.peers)
    if (PeerMatchesPod(ps.policy, peer, p)) {
      selected = true;
      break;
    }
  if (rs.pods && selected)
    for (const auto& ip : p.ips) out->push_back({ps.SetName(ingress, r, ip.is_v4() ? "p4" : "p6"), ip.ToString()});
  if (!rs.named) return;
  for (const auto& ip : p.ips) {
    bool peer_ok = rule.any_peer || selected;
    if (!peer_ok) {
      for (const auto& peer : rule.peers) {
        if (!peer.ip_block || peer.ip_block->cidr.is_v4() != ip.is_v4()) continue;
        bool in = peer.ip_block->cidr.Contains(ip);
        for (const auto& e : peer.ip_block->except)
          if (e.Contains(ip)) in = false;
        if (in) {
          peer_ok = true;
          break;
        }
      }
    }
    if (!peer_ok) continue;
    for (const auto& ref : rule.ports) {
      if (!ref.proto_valid || ref.name.empty()) continue;
      uint16_t port = p.ResolvePort(ref.name, ref.proto);
      if (port == 0) continue;
      out->push_back({ps.SetName(ingress, r, ip.is_v4() ? "n4" : "n6"),
                      ip.ToString() + " . " + NftProtoName(ref.proto) + " . " + std::to_string(port)});
    }
  }
}

void Engine::ElementDelta(const std::string& set, const std::string& elem, bool add) {
  auto& refs = refs_[set];
  if (add) {
    if (refs[elem]++ == 0) {
      desired_.sets[set].elements.insert(elem);
      SetDirty(set);
    }
    return;
  }
  auto it = refs.find(elem);
  if (it == refs.end()) return;
  if (--it->second == 0) {
    refs.erase(it);
    desired_.sets[set].elements.erase(elem);
    SetDirty(set);
  }
}

void Engine::AddPodToPolicySets(const PolicyState& ps, const Pod& p, bool add) {
  std::vector<std::pair<std::string, std::string>> elems;
  for (size_t r = 0; r < ps.policy.ingress.size(); ++r) PodElements(ps, true, r, p, &elems);
  for (size_t r = 0; r < ps.policy.egress.size(); ++r) PodElements(ps, false, r, p, &elems);
  for (const auto& [set, e] : elems) ElementDelta(set, e, add);
}

void Engine::RebuildPolicySets(PolicyState& ps, bool /*create*/) {
  const Policy& pol = ps.policy;
  ps.id = PolicyId(pol.key());
  ps.in.assign(pol.ingress.size(), {});
  ps.eg.assign(pol.egress.size(), {});
  ps.has_ns_selector = false;
  ps.needs_all_pods = false;
  auto plan = [&](bool ingress) {
    const auto& rules = ingress ? pol.ingress : pol.egress;
    auto& sets = ingress ? ps.in : ps.eg;
    for (size_t r = 0; r < rules.size(); ++r) {
      const Rule& rule = rules[r];
      std::vector<IpBlock> blocks;
      bool any_block = false;
      for (const auto& peer : rule.peers) {
        if (peer.ip_block) {
          blocks.push_back(*peer.ip_block);
          any_block = true;
        } else {
          sets[r].pods = true;
          if (peer.namespace_selector) ps.has_ns_selector = true;
        }
      }
      auto b4 = BlockElements(blocks, false), b6 = BlockElements(blocks, true);
      sets[r].blocks4 = !b4.empty();
      sets[r].blocks6 = !b6.empty();
      if (sets[r].blocks4) desired_.sets[ps.SetName(ingress, r, "b4")] = SetDef{"ipv4_addr", true, {b4.begin(), b4.end()}};
      if (sets[r].blocks6) desired_.sets[ps.SetName(ingress, r, "b6")] = SetDef{"ipv6_addr", true, {b6.begin(), b6.end()}};
      if (sets[r].blocks4) SetDirty(ps.SetName(ingress, r, "b4"));
      if (sets[r].blocks6) SetDirty(ps.SetName(ingress, r, "b6"));
      if (sets[r].pods) {
        for (const char* s : {"p4", "p6"}) {
          std::string n = ps.SetName(ingress, r, s);
          desired_.sets[n] = SetDef{s[1] == '4' ? "ipv4_addr" : "ipv6_addr", false, {}};
          SetDirty(n);
        }
      }
      if (!ingress && !rule.any_port) {
        for (const auto& ref : rule.ports)
          if (ref.proto_valid && !ref.name.empty()) sets[r].named = true;
        if (sets[r].named) {
          if (rule.any_peer || any_block) ps.needs_all_pods = true;
          for (const char* s : {"n4", "n6"}) {
            std::string n = ps.SetName(false, r, s);
            desired_.sets[n] = SetDef{std::string(s[1] == '4' ? "ipv4_addr" : "ipv6_addr") +
                                          " . inet_proto . inet_service",
                                      false, {}};
            SetDirty(n);
          }
        }
      }
    }
  };
  plan(true);
  plan(false);
  // Fill the pod sets: only namespaces whose pods some peer can select.
  for (const auto& [ns, keys] : pods_by_ns_) {
    bool candidate = ps.needs_all_pods || (ns == pol.ns);
    if (!candidate && ps.has_ns_selector) {
      Labels fallback{{kNamespaceNameLabel, ns}};
      auto it = namespaces_.find(ns);
      const Labels& l = it == namespaces_.end() ? fallback : it->second.labels;
      for (const auto* rules : {&pol.ingress, &pol.egress})
        for (const auto& rule : *rules)
          for (const auto& peer : rule.peers)
            if (peer.namespace_selector && peer.namespace_selector->Matches(l)) candidate = true;
    }
    if (!candidate) continue;
    for (const auto& k : keys) AddPodToPolicySets(ps, pods_.at(k), true);
  }
}

void Engine::DropPolicySets(const PolicyState& ps) {
  auto drop = [&](const std::string& n) {
    if (desired_.sets.erase(n)) SetDirty(n);
    refs_.erase(n);
  };
  for (size_t r = 0; r < ps.in.size(); ++r)
    for (const char* s : {"p4", "p6", "b4", "b6", "n4", "n6"}) drop(ps.SetName(true, r, s));
  for (size_t r = 0; r < ps.eg.size(); ++r)
    for (const char* s : {"p4", "p6", "b4", "b6", "n4", "n6"}) drop(ps.SetName(false, r, s));
}

void Engine::RebuildLocalPod(const std::string& key) {
  std::string cid = PodChainId(key);
  std::string in_chain = "in-" + cid, eg_chain = "eg-" + cid;
  // Withdraw what the pod owned.
  if (auto it = local_ips_.find(key); it != local_ips_.end()) {
    for (const auto& ip : it->second) {
      std::string s = ip.ToString();
      if (ip.is_v4()) {
        desired_.ingress4.erase(s);
        desired_.egress4.erase(s);
      } else {
        desired_.ingress6.erase(s);
        desired_.egress6.erase(s);
      }
      ElementDelta(ip.is_v4() ? "local4" : "local6", s, false);
    }
    local_ips_.erase(it);
  }
  auto drop_chain = [&](const std::string& n) {
    if (desired_.chains.erase(n)) dirty_chains_.insert(n);
  };
  auto pit = pods_.find(key);
  if (pit == pods_.end() || !IsLocal(pit->second)) {
    drop_chain(in_chain);
    drop_chain(eg_chain);
    return;
  }
  const Pod& pod = pit->second;
  local_ips_[key] = pod.ips;
  for (const auto& ip : pod.ips) ElementDelta(ip.is_v4() ? "local4" : "local6", ip.ToString(), true);

  std::vector<std::string> in_rules, eg_rules;
  bool iso_in = false, iso_eg = false;
  for (const auto& [pkey, ps] : policies_) {
    const Policy& pol = ps.policy;
    if (pol.ns != pod.ns || !pol.pod_selector.Matches(pod.labels)) continue;
    for (int dir = 0; dir < 2; ++dir) {
      bool ingress = dir == 0;
      if (ingress ? !pol.isolates_ingress : !pol.isolates_egress) continue;
      (ingress ? iso_in : iso_eg) = true;
      const auto& rules = ingress ? pol.ingress : pol.egress;
      const auto& sets = ingress ? ps.in : ps.eg;
      auto& out = ingress ? in_rules : eg_rules;
      const char* addr = ingress ? "saddr" : "daddr";
      const char* verdict = ingress ? "accept" : "return";
      for (size_t r = 0; r < rules.size(); ++r) {
        const Rule& rule = rules[r];
        std::vector<std::string> peers;
        if (rule.any_peer) {
          peers.push_back("");
        } else {
          if (sets[r].pods) {
            peers.push_back(std::string("ip ") + addr + " @" + ps.SetName(ingress, r, "p4"));
            peers.push_back(std::string("ip6 ") + addr + " @" + ps.SetName(ingress, r, "p6"));
          }
          if (sets[r].blocks4) peers.push_back(std::string("ip ") + addr + " @" + ps.SetName(ingress, r, "b4"));
          if (sets[r].blocks6) peers.push_back(std::string("ip6 ") + addr + " @" + ps.SetName(ingress, r, "b6"));
        }
        std::vector<std::string> ports;
        if (rule.any_port) {
          ports.push_back("");
        } else {
          for (const auto& ref : rule.ports) {
            if (!ref.proto_valid) continue;
            std::string proto = std::string("meta l4proto ") + NftProtoName(ref.proto);
            uint16_t port = ref.port, end = ref.end_port;
            if (!ref.name.empty()) {
              if (!ingress) continue;  // egress: the named-port set below
              port = pod.ResolvePort(ref.name, ref.proto);
              end = 0;
              if (port == 0) continue;  // this pod has no such port
            }
            if (port == 0) ports.push_back(proto);
            else if (end > port) ports.push_back(proto + " th dport " + std::to_string(port) + "-" + std::to_string(end));
            else ports.push_back(proto + " th dport " + std::to_string(port));
          }
        }
        // nft keeps at most 128 bytes of a comment.
        std::string what = pkey.substr(0, 100) + (ingress ? " ingress " : " egress ") + std::to_string(r);
        std::string tag = "comment \"" + what + "\"";
        for (const auto& p : peers)
          for (const auto& q : ports) out.push_back(Join({p, q, verdict, tag}));
        if (!ingress && sets[r].named) {
          out.push_back(std::string("ip daddr . meta l4proto . th dport @") + ps.SetName(false, r, "n4") + " " +
                        verdict + " " + tag);
          out.push_back(std::string("ip6 daddr . meta l4proto . th dport @") + ps.SetName(false, r, "n6") + " " +
                        verdict + " " + tag);
        }
      }
    }
  }
  auto set_chain = [&](const std::string& name, bool isolated, bool ingress, std::vector<std::string> rules) {
    if (!isolated) {
      drop_chain(name);
      return;
    }
    std::vector<std::string> full;
    full.push_back("ct state invalid drop");
    for (const auto& ip : pod.ips)
      full.push_back(std::string(ip.is_v4() ? "ip " : "ip6 ") + (ingress ? "saddr " : "daddr ") + ip.ToString() +
                     (ingress ? " accept" : " return") + " comment \"itself\"");
    for (auto& r : rules) full.push_back(std::move(r));
    full.push_back(std::string("counter name \"") + (ingress ? kDropIngress : kDropEgress) + "\" drop");
    auto it = desired_.chains.find(name);
    if (it == desired_.chains.end() || it->second != full) {
      desired_.chains[name] = std::move(full);
      dirty_chains_.insert(name);
    }
    for (const auto& ip : pod.ips) {
      auto& map = ingress ? (ip.is_v4() ? desired_.ingress4 : desired_.ingress6)
                          : (ip.is_v4() ? desired_.egress4 : desired_.egress6);
      map[ip.ToString()] = name;
    }
  };
  set_chain(in_chain, iso_in, true, std::move(in_rules));
  set_chain(eg_chain, iso_eg, false, std::move(eg_rules));
}

void Engine::RebuildLocalPodsOfNamespace(const std::string& ns) {
  auto it = pods_by_ns_.find(ns);
  if (it == pods_by_ns_.end()) return;
  for (const auto& k : it->second)
    if (IsLocal(pods_.at(k))) RebuildLocalPod(k);
}

void Engine::UpsertPod(const Pod& pod) {
  std::string key = pod.key();
  auto it = pods_.find(key);
  bool was_local = false;
  if (it != pods_.end()) {
    if (it->second == pod) return;
    was_local = IsLocal(it->second);
    for (const auto& [k, ps] : policies_) AddPodToPolicySets(ps, it->second, false);
    it->second = pod;
  } else {
    pods_.emplace(key, pod);
    pods_by_ns_[pod.ns].insert(key);
  }
  const Pod& cur = pods_.at(key);
  for (const auto& [k, ps] : policies_) AddPodToPolicySets(ps, cur, true);
  if (was_local || IsLocal(cur)) RebuildLocalPod(key);
}

void Engine::RemovePod(const std::string& key) {
  auto it = pods_.find(key);
  if (it == pods_.end()) return;
  for (const auto& [k, ps] : policies_) AddPodToPolicySets(ps, it->second, false);
  std::string ns = it->second.ns;
  pods_.erase(it);
  auto bit = pods_by_ns_.find(ns);
  if (bit != pods_by_ns_.end()) {
    bit->second.erase(key);
    if (bit->second.empty()) pods_by_ns_.erase(bit);
  }
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
  // Pods of this namespace move in or out of namespaceSelector peers.
  std::vector<const PolicyState*> affected;
  for (const auto& [k, ps] : policies_)
    if (ps.has_ns_selector) affected.push_back(&ps);
  const std::set<std::string>* keys = nullptr;
  if (auto pit = pods_by_ns_.find(n.name); pit != pods_by_ns_.end()) keys = &pit->second;
  if (keys)
    for (const auto* ps : affected)
      for (const auto& k : *keys) AddPodToPolicySets(*ps, pods_.at(k), false);
  std::string name = n.name;
  namespaces_[name] = std::move(n);
  if (keys)
    for (const auto* ps : affected)
      for (const auto& k : *keys) AddPodToPolicySets(*ps, pods_.at(k), true);
}

void Engine::RemoveNamespace(const std::string& name) {
  // Its pods (if any remain) fall back to the name label only.
  UpsertNamespace(Namespace{name, {{kNamespaceNameLabel, name}}});
  namespaces_.erase(name);
}

void Engine::UpsertPolicy(const Policy& policy) {
  std::string key = policy.key();
  auto it = policies_.find(key);
  if (it != policies_.end()) {
    if (it->second.policy == policy) return;
    DropPolicySets(it->second);
  }
  PolicyState& ps = policies_[key];
  ps.policy = policy;
  policies_by_ns_[policy.ns].insert(key);
  RebuildPolicySets(ps, true);
  RebuildLocalPodsOfNamespace(policy.ns);
}

void Engine::RemovePolicy(const std::string& key) {
  auto it = policies_.find(key);
  if (it == policies_.end()) return;
  std::string ns = it->second.policy.ns;
  DropPolicySets(it->second);
  policies_.erase(it);
  auto bit = policies_by_ns_.find(ns);
  if (bit != policies_by_ns_.end()) {
    bit->second.erase(key);
    if (bit->second.empty()) policies_by_ns_.erase(bit);
  }
  RebuildLocalPodsOfNamespace(ns);
}

std::vector<std::string> Engine::NamespacesWithPolicies() const {
  std::vector<std::string> out;
  for (const auto& [ns, keys] : policies_by_ns_) out.push_back(ns);
  std::sort(out.begin(), out.end());
  return out;
}

size_t Engine::local_isolated(bool ingress) const {
  std::set<std::string> chains;
  for (const auto* m : ingress ? std::vector<const std::map<std::string, std::string>*>{&desired_.ingress4, &desired_.ingress6}
                               : std::vector<const std::map<std::string, std::string>*>{&desired_.egress4, &desired_.egress6})
    for (const auto& [ip, c] : *m) chains.insert(c);
  return chains.size();
}

std::vector<PodPolicyView> Engine::LocalPods() const {
  std::vector<PodPolicyView> out;
  for (const auto& [key, ips] : local_ips_) {
    const Pod& pod = pods_.at(key);
    PodPolicyView v;
    v.pod = key;
    for (const auto& ip : ips) v.ips.push_back(ip.ToString());
    for (const auto& [pkey, ps] : policies_) {
      const Policy& pol = ps.policy;
      if (pol.ns != pod.ns || !pol.pod_selector.Matches(pod.labels)) continue;
      if (pol.isolates_ingress) v.ingress_policies.push_back(pkey);
      if (pol.isolates_egress) v.egress_policies.push_back(pkey);
    }
    v.isolated_ingress = !v.ingress_policies.empty();
    v.isolated_egress = !v.egress_policies.empty();
    std::string cid = PodChainId(key);
    if (auto it = desired_.chains.find("in-" + cid); it != desired_.chains.end()) v.ingress_rules = it->second;
    if (auto it = desired_.chains.find("eg-" + cid); it != desired_.chains.end()) v.egress_rules = it->second;
    out.push_back(std::move(v));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pod < b.pod; });
  return out;
}

// --- Rendering --------------------------------------------------------------

namespace {

std::string Elements(const std::set<std::string>& elems) {
  std::string out;
  for (const auto& e : elems) {
    if (!out.empty()) out += ", ";
    out += e;
  }
  return out;
}

std::string SetDecl(const SetDef& s) {
  return std::string("type ") + s.type + ";" + (s.interval ? " flags interval;" : "");
}

void MapDecl(std::string& out, const char* name, const char* type, const std::map<std::string, std::string>& m) {
  out += std::string("  map ") + name + " {\n    type " + type + " : verdict;\n";
  if (!m.empty()) {
    out += "    elements = { ";
    bool first = true;
    for (const auto& [ip, chain] : m) {
      if (!first) out += ", ";
      first = false;
      out += ip + " : jump " + chain;
    }
    out += " }\n";
  }
  out += "  }\n";
}

std::string ForwardChain(uint32_t group) {
  std::string g = std::to_string(group);
  std::string out;
  out += "  chain forward {\n";
  out += "    type filter hook forward priority filter; policy accept;\n";
  out += "    ct state established,related accept\n";
  out += "    iifgroup " + g + " meta nfproto ipv4 ip saddr != @local4 counter name \"" + kDropEgress + "\" drop comment \"pending pod\"\n";
  out += "    iifgroup " + g + " meta nfproto ipv6 ip6 saddr != @local6 counter name \"" + kDropEgress + "\" drop comment \"pending pod\"\n";
  out += "    oifgroup " + g + " meta nfproto ipv4 ip daddr != @local4 counter name \"" + kDropIngress + "\" drop comment \"pending pod\"\n";
  out += "    oifgroup " + g + " meta nfproto ipv6 ip6 daddr != @local6 counter name \"" + kDropIngress + "\" drop comment \"pending pod\"\n";
  out += "    ip saddr vmap @egress4\n";
  out += "    ip6 saddr vmap @egress6\n";
  out += "    ip daddr vmap @ingress4\n";
  out += "    ip6 daddr vmap @ingress6\n";
  out += "  }\n";
  return out;
}

void AddElements(std::string& out, const std::string& set, const std::set<std::string>& elems, bool add) {
  if (elems.empty()) return;
  out += std::string(add ? "add" : "delete") + " element inet " + kTable + " " + set + " { " + Elements(elems) + " }\n";
}

void MapDelta(std::string& del, std::string& add, const char* name, const std::map<std::string, std::string>& want,
              const std::map<std::string, std::string>& have) {
  std::set<std::string> dels, adds;
  for (const auto& [ip, chain] : have) {
    auto it = want.find(ip);
    if (it == want.end() || it->second != chain) dels.insert(ip);
  }
  for (const auto& [ip, chain] : want) {
    auto it = have.find(ip);
    if (it == have.end() || it->second != chain) adds.insert(ip + " : jump " + chain);
  }
  AddElements(del, name, dels, false);
  AddElements(add, name, adds, true);
}

}  // namespace

std::string Engine::RenderFull() const {
  const Model& m = desired_;
  std::string out;
  out += std::string("add table inet ") + kTable + "\n";
  out += std::string("delete table inet ") + kTable + "\n";
  out += std::string("table inet ") + kTable + " {\n";
  out += std::string("  counter ") + kDropIngress + " {\n  }\n";
  out += std::string("  counter ") + kDropEgress + " {\n  }\n";
  for (const auto& [name, s] : m.sets) {
    out += "  set " + name + " {\n    " + SetDecl(s) + "\n";
    if (!s.elements.empty()) out += "    elements = { " + Elements(s.elements) + " }\n";
    out += "  }\n";
  }
  for (const auto& [name, rules] : m.chains) {
    out += "  chain " + name + " {\n";
    for (const auto& r : rules) out += "    " + r + "\n";
    out += "  }\n";
  }
  MapDecl(out, "ingress4", "ipv4_addr", m.ingress4);
  MapDecl(out, "egress4", "ipv4_addr", m.egress4);
  MapDecl(out, "ingress6", "ipv6_addr", m.ingress6);
  MapDecl(out, "egress6", "ipv6_addr", m.egress6);
  out += ForwardChain(opts_.pending_group);
  out += "}\n";
  return out;
}

std::string Engine::RenderDelta() const {
  const Model& want = desired_;
  const Model& have = applied_;
  std::string sets_add, chains, maps_del, maps_add, chains_del, sets_del, elems_del;
  for (const auto& name : dirty_sets_) {
    auto w = want.sets.find(name);
    auto h = have.sets.find(name);
    if (w != want.sets.end() && h == have.sets.end()) {
      sets_add += std::string("add set inet ") + kTable + " " + name + " { " + SetDecl(w->second) + " }\n";
      AddElements(sets_add, name, w->second.elements, true);
    } else if (w != want.sets.end()) {
      std::set<std::string> adds, dels;
      std::set_difference(w->second.elements.begin(), w->second.elements.end(), h->second.elements.begin(),
                          h->second.elements.end(), std::inserter(adds, adds.end()));
      std::set_difference(h->second.elements.begin(), h->second.elements.end(), w->second.elements.begin(),
                          w->second.elements.end(), std::inserter(dels, dels.end()));
      // Deletions first: an interval set rejects a new range that overlaps
      // one being removed.
      AddElements(elems_del, name, dels, false);
      AddElements(sets_add, name, adds, true);
    } else if (h != have.sets.end()) {
      sets_del += std::string("delete set inet ") + kTable + " " + name + "\n";
    }
  }
  for (const auto& name : dirty_chains_) {
    auto w = want.chains.find(name);
    auto h = have.chains.find(name);
    if (w != want.chains.end()) {
      if (h != have.chains.end() && h->second == w->second) continue;
      chains += std::string(h == have.chains.end() ? "add chain inet " : "flush chain inet ") + kTable + " " + name + "\n";
      for (const auto& r : w->second) chains += std::string("add rule inet ") + kTable + " " + name + " " + r + "\n";
    } else if (h != have.chains.end()) {
      chains_del += std::string("delete chain inet ") + kTable + " " + name + "\n";
    }
  }
  MapDelta(maps_del, maps_add, "ingress4", want.ingress4, have.ingress4);
  MapDelta(maps_del, maps_add, "egress4", want.egress4, have.egress4);
  MapDelta(maps_del, maps_add, "ingress6", want.ingress6, have.ingress6);
  MapDelta(maps_del, maps_add, "egress6", want.egress6, have.egress6);
  return elems_del + sets_add + chains + maps_del + maps_add + chains_del + sets_del;
}

void Engine::MarkApplied(bool full) {
  if (full || !has_applied_) {
    applied_ = desired_;
    dirty_sets_.clear();
    dirty_chains_.clear();
    has_applied_ = true;
    return;
  }
  for (const auto& name : dirty_sets_) {
    auto w = desired_.sets.find(name);
    if (w == desired_.sets.end()) applied_.sets.erase(name);
    else applied_.sets[name] = w->second;
  }
  for (const auto& name : dirty_chains_) {
    auto w = desired_.chains.find(name);
    if (w == desired_.chains.end()) applied_.chains.erase(name);
    else applied_.chains[name] = w->second;
  }
  applied_.ingress4 = desired_.ingress4;
  applied_.egress4 = desired_.egress4;
  applied_.ingress6 = desired_.ingress6;
  applied_.egress6 = desired_.egress6;
  dirty_sets_.clear();
  dirty_chains_.clear();
  has_applied_ = true;
}

std::vector<std::string> Engine::Tightened() const {
  std::set<std::string> out;
  if (!has_applied_) return {};
  for (const auto& name : dirty_sets_) {
    if (name == "local4" || name == "local6") continue;
    auto h = applied_.sets.find(name);
    if (h == applied_.sets.end()) continue;
    auto w = desired_.sets.find(name);
    for (const auto& e : h->second.elements) {
      if (w != desired_.sets.end() && w->second.elements.count(e)) continue;
      if (!IsRange(e)) out.insert(ElementAddress(e));
    }
  }
  // Local pods whose chain changed or that became isolated.
  std::set<std::string> changed_chains;
  for (const auto& name : dirty_chains_) {
    auto h = applied_.chains.find(name);
    auto w = desired_.chains.find(name);
    if (w != desired_.chains.end() && (h == applied_.chains.end() || h->second != w->second))
      changed_chains.insert(name);
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
  return {out.begin(), out.end()};
}

}  // namespace weft::agent::netpol
