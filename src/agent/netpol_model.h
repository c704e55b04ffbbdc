#pragma once
// NetworkPolicy compiled to an nftables model: (policies, namespaces, pods)
// -> the sets, per-pod chains and dispatch maps of table inet weft-netpol
// (docs/networkpolicy.md has the layout). Pure: no I/O, unit-tested without
// root.
//
// The Engine keeps the cluster's objects and the desired model, and applies
// each change incrementally: a pod event touches that pod's memberships and,
// when the pod is local, its chains; a policy event touches its own sets and
// the chains of the local pods of its namespace; a namespace relabel touches
// the memberships of its pods for peers with a namespaceSelector. Nothing is
// recomputed per event for the whole cluster. The Engine records which sets,
// chains and map entries changed; Diff() turns that into the nft commands
// that move the kernel from the last applied model to the desired one.
//
// Thread-compatible: one thread drives it.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "agent/netpol_types.h"

namespace weft::agent::netpol {

inline constexpr char kTable[] = "weft-netpol";
inline constexpr uint32_t kDefaultPendingGroup = 22342;  // 0x5746

// One nft set of the model.
struct SetDef {
  std::string type;   // "ipv4_addr", "ipv6_addr", "ipv4_addr . inet_proto . inet_service", ...
  bool interval = false;
  std::set<std::string> elements;  // rendered nft elements
  bool operator==(const SetDef&) const = default;
};

struct Model {
  std::map<std::string, SetDef> sets;                     // by name
  std::map<std::string, std::vector<std::string>> chains;  // per-pod chains: name -> rules
  // Dispatch maps: pod address -> chain name (rendered "jump <chain>").
  std::map<std::string, std::string> ingress4, egress4, ingress6, egress6;
  bool operator==(const Model&) const = default;
};

// What a local pod's policies say, for `weftctl policy` and the metrics.
struct PodPolicyView {
  std::string pod;  // ns/name
  std::vector<std::string> ips;
  bool isolated_ingress = false;
  bool isolated_egress = false;
  std::vector<std::string> ingress_policies;  // ns/name of the policies selecting it for ingress
  std::vector<std::string> egress_policies;
  std::vector<std::string> ingress_rules;     // the nft rules of its chains
  std::vector<std::string> egress_rules;
};

struct EngineOptions {
  std::string node_name;
  uint32_t pending_group = kDefaultPendingGroup;
};

class Engine {
 public:
  explicit Engine(EngineOptions opts);

  // Each upsert/remove updates the desired model incrementally.
  void UpsertPod(const Pod& pod);
  void RemovePod(const std::string& key);
  void UpsertNamespace(const Namespace& ns);
  void RemoveNamespace(const std::string& name);
  void UpsertPolicy(const Policy& policy);
  void RemovePolicy(const std::string& key);

  const Model& desired() const { return desired_; }

  // The full ruleset as one nft script that replaces the table atomically:
  // "add table; delete table; table { ... }" (never a moment without rules).
  std::string RenderFull() const;
  // The nft commands that move the kernel from the last applied model to the
  // desired one, touching only what changed since then ("" when nothing
  // did). One transaction when fed to `nft -f`.
  std::string RenderDelta() const;
  // Marks the desired model as applied after RenderDelta()'s script (or,
  // with `full`, RenderFull()'s) was committed.
  void MarkApplied(bool full);
  // Forgets what was applied (after a failed apply, or when the kernel may
  // have been changed under us): the next apply must be RenderFull().
  void ForgetApplied() { has_applied_ = false; }
  bool has_applied() const { return has_applied_; }

  // Addresses whose allowed traffic may have shrunk between the applied and
  // the desired model (an element left a peer set, a local pod's chain
  // changed or it became isolated): their conntrack entries are flushed
  // after the apply so established flows are judged again. Call before
  // MarkApplied().
  std::vector<std::string> Tightened() const;

  // Namespaces that have at least one policy (sorted), for the plugin's
  // pending decision.
  std::vector<std::string> NamespacesWithPolicies() const;

  // Introspection for metrics, weftctl and doctor.
  size_t policy_count() const { return policies_.size(); }
  size_t pod_count() const { return pods_.size(); }
  size_t local_isolated(bool ingress) const;
  std::vector<PodPolicyView> LocalPods() const;

 private:
  // The sets of one rule that exist (their names are derived).
  struct RuleSets {
    bool pods = false;   // <id>-<d><r>-p4/-p6: pods matched by a selector peer
    bool blocks4 = false, blocks6 = false;  // -b4/-b6: ipBlock ranges
    bool named = false;  // egress only: -n4/-n6: pod address . proto . resolved named port
  };

  struct PolicyState {
    Policy policy;
    std::string id;
    std::vector<RuleSets> in, eg;
    std::vector<std::vector<std::string>> in_b4, in_b6, eg_b4, eg_b6;  // block elements per rule
    bool has_ns_selector = false;
    bool needs_all_pods = false;  // a named-port set over any peer / ipBlock peers

    std::string SetName(bool ingress, size_t r, const char* suffix) const {
      return id + (ingress ? "-i" : "-e") + std::to_string(r) + "-" + suffix;
    }
  };


  // Derived names.
  static std::string PolicyId(const std::string& key);
  static std::string PodChainId(const std::string& key);

  bool IsLocal(const Pod& p) const { return p.node == opts_.node_name && p.Addressable(); }
  const Labels& NamespaceLabels(const std::string& ns) const;
  bool PeerMatchesPod(const Policy& pol, const Peer& peer, const Pod& pod) const;
  // The elements pod `p` contributes to each set of `pol`'s rule.
  void PodElements(const PolicyState& ps, bool ingress, size_t rule, const Pod& p,
                   std::vector<std::pair<std::string, std::string>>* out) const;
  void AddPodToPolicySets(const PolicyState& ps, const Pod& p, bool add);
  void RebuildPolicySets(PolicyState& ps, bool create);
  void DropPolicySets(const PolicyState& ps);
  void RebuildLocalPod(const std::string& key);
  void RebuildLocalPodsOfNamespace(const std::string& ns);
  void SetDirty(const std::string& name) { dirty_sets_.insert(name); }
  void ElementDelta(const std::string& set, const std::string& elem, bool add);

  EngineOptions opts_;
  std::unordered_map<std::string, Pod> pods_;
  std::unordered_map<std::string, std::set<std::string>> pods_by_ns_;
  std::unordered_map<std::string, Namespace> namespaces_;
  std::map<std::string, PolicyState> policies_;  // by ns/name
  std::unordered_map<std::string, std::set<std::string>> policies_by_ns_;
  // Reference counts of set elements: two peers of one rule (or two pods
  // sharing an address in a race) may add the same element.
  std::unordered_map<std::string, std::unordered_map<std::string, int>> refs_;

  Model desired_;
  Model applied_;
  bool has_applied_ = false;
  std::set<std::string> dirty_sets_;
  std::set<std::string> dirty_chains_;
  // Map keys each local pod owns (its addresses), to withdraw them on change.
  std::unordered_map<std::string, std::vector<IpAddress>> local_ips_;
};

// ipBlock arithmetic: the union of (cidr minus except) over `blocks`, as
// non-overlapping nft interval elements ("a-b" or a single address), per
// family. Pure; exposed for tests.
std::vector<std::string> BlockElements(const std::vector<IpBlock>& blocks, bool v6);

}  // namespace weft::agent::netpol
