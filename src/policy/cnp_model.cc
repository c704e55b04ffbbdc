// The Engine's ClusterNetworkPolicy half (netpol_model.h): the tiers' rules
// share NetworkPolicy's peer sets and per-pod chains; ComposeChain (in
// netpol_model.cc, beside the chain's other parts) orders them. Pure.

#include <algorithm>

#include "policy/netpol_model.h"

namespace weft::policy::netpol {

Policy Engine::CnpRules(const ClusterPolicy& p) const {
  Policy out;
  out.name = p.name;  // ns stays "": every CNP peer names its namespaces
  for (int dir = 0; dir < 2; ++dir) {
    bool ingress = dir == 0;
    for (const TierRule& tr : ingress ? p.ingress : p.egress) {
      Rule r = tr.match;
      // nodes peers: the addresses of the Nodes they select, now.
      for (const auto& sel : tr.nodes)
        for (const auto& [name, node] : nodes_) {
          if (!sel.Matches(node.labels)) continue;
          for (const auto& ip : node.ips) {
            Peer peer;
            peer.ip_block = IpBlock{IpPrefix(ip, ip.is_v4() ? 32 : 128), {}};
            r.peers.push_back(std::move(peer));
          }
        }
      (ingress ? out.ingress : out.egress).push_back(std::move(r));
    }
  }
  return out;
}

void Engine::CnpDenySets(const PolicyState& ps, const ClusterPolicy& p, int delta) {
  for (int dir = 0; dir < 2; ++dir) {
    const auto& rules = dir == 0 ? p.ingress : p.egress;
    const auto& sets = dir == 0 ? ps.in : ps.eg;
    for (size_t r = 0; r < rules.size() && r < sets.size(); ++r) {
      if (rules[r].action == Action::kAccept) continue;
      std::vector<std::string> bases = sets[r].pods;
      for (const auto* b : {&sets[r].named, &sets[r].blocks4, &sets[r].blocks6})
        if (!b->empty()) bases.push_back(*b);
      for (const auto& b : bases) {
        int& n = deny_bases_[b];
        n += delta;
        if (n <= 0) deny_bases_.erase(b);
      }
    }
  }
}

// Rebuilds the local pods that `a` (and `b`, the other version) selects.
void Engine::RebuildCnpSubjects(const ClusterPolicy& a, const ClusterPolicy* b) {
  std::vector<std::string> keys;
  for (const auto& [key, ips] : local_ips_) {
    const Pod& pod = *pods_.at(key);
    if (SubjectSelects(a, pod) || (b && SubjectSelects(*b, pod))) keys.push_back(key);
  }
  for (const auto& k : keys) {
    if (batching_) deferred_.insert(k);
    else RebuildLocalPod(k);
  }
}

void Engine::EndBatch() {
  batching_ = false;
  for (const auto& k : deferred_) RebuildLocalPod(k);
  deferred_.clear();
}

void Engine::UpsertClusterPolicy(const ClusterPolicy& policy) {
  auto it = cnps_.find(policy.name);
  std::optional<CnpState> old;
  if (it != cnps_.end()) {
    if (it->second.policy.SameSpec(policy) && CnpRules(policy) == it->second.sets.policy) {
      it->second.policy.seen = policy.seen;
      it->second.policy.generation = policy.generation;
      return;
    }
    old = std::move(it->second);
    (old->policy.tier == Tier::kAdmin ? admin_order_ : baseline_order_)
        .erase({old->policy.priority, old->policy.name});
  }
  CnpState& st = cnps_[policy.name];
  st = CnpState{};
  st.policy = policy;
  st.sets.policy = CnpRules(policy);
  // The new sets first: a set both versions use keeps its elements.
  AcquirePolicySets(st.sets);
  CnpDenySets(st.sets, st.policy, +1);
  if (old) {
    CnpDenySets(old->sets, old->policy, -1);
    ReleasePolicySets(old->sets);
  }
  if (policy.enforced) (policy.tier == Tier::kAdmin ? admin_order_ : baseline_order_).insert({policy.priority, policy.name});
  RebuildCnpSubjects(st.policy, old ? &old->policy : nullptr);
}

void Engine::RemoveClusterPolicy(const std::string& name) {
  auto it = cnps_.find(name);
  if (it == cnps_.end()) return;
  CnpState old = std::move(it->second);
  cnps_.erase(it);
  (old.policy.tier == Tier::kAdmin ? admin_order_ : baseline_order_).erase({old.policy.priority, old.policy.name});
  CnpDenySets(old.sets, old.policy, -1);
  ReleasePolicySets(old.sets);
  RebuildCnpSubjects(old.policy, nullptr);
}

void Engine::UpsertNode(const NodeInfo& node) {
  auto it = nodes_.find(node.name);
  if (it != nodes_.end() && it->second == node) return;
  nodes_[node.name] = node;
  // Policies with nodes peers whose addresses changed take their new sets.
  std::vector<std::string> changed;
  for (const auto& [name, st] : cnps_) {
    bool has_nodes = false;
    for (const auto* rules : {&st.policy.ingress, &st.policy.egress})
      for (const auto& r : *rules) has_nodes = has_nodes || !r.nodes.empty();
    if (has_nodes && !(CnpRules(st.policy) == st.sets.policy)) changed.push_back(name);
  }
  for (const auto& name : changed) {
    ClusterPolicy p = cnps_.at(name).policy;
    UpsertClusterPolicy(p);  // its nodes peers resolve anew
  }
}

void Engine::RemoveNode(const std::string& name) {
  if (!nodes_.count(name)) return;
  NodeInfo gone;
  gone.name = name;
  UpsertNode(gone);  // no addresses: out of every nodes peer
  nodes_.erase(name);
}

}  // namespace weft::policy::netpol
