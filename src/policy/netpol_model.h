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
// chains and map entries changed since the last MarkApplied(): Delta()
// turns that into the transaction (netpol_nft.h, the nftables layer's
// objects) that moves the kernel from the last applied model to the
// desired one, and Full() builds the whole table. ClusterNetworkPolicies and Nodes (cnp_types.h) are compiled into
// the same chains, tier by tier.
//
// Thread-compatible: one thread drives it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "policy/cnp_types.h"
#include "policy/netpol_nft.h"
#include "policy/netpol_sets.h"
#include "policy/netpol_types.h"

namespace weft::policy::netpol {


// One nft set of the model.
struct Model {
  std::map<std::string, SetDef> sets;                     // by name
  std::map<std::string, std::vector<NftRule>> chains;  // per-pod chains: name -> rules (no chain name in them)
  // Dispatch maps: pod address -> chain name (rendered "jump <chain>").
  std::map<std::string, std::string> ingress4, egress4, ingress6, egress6;
  // The same for reply-direction packets of connections marked for a
  // recheck (kRecheckMark): pod address -> its chain with source and
  // destination swapped (rin-/reg-).
  std::map<std::string, std::string> ingress4r, egress4r, ingress6r, egress6r;
  // A local pod's traffic to its own node (the input hook: the node's
  // addresses, delivered locally, which the forward hook never sees): pod
  // address -> a node-<hash> chain (shared by the pods whose node rules are the same) with the Admin and Baseline tiers'
  // egress rules; the reply twins (rnode-<hash>) judge the node's replies in
  // the output hook for connections marked for a recheck. Only pods whose
  // tier rules can match a node address have an entry.
  std::map<std::string, std::string> node4, node6, node4r, node6r;
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
  std::vector<std::string> node_rules;        // its node-<hash> chain (to its own node; tiers only)
};

// GET /netpol's body: one object per local pod (weftctl policy reads it).
std::string PodPolicyViewsJson(const std::vector<PodPolicyView>& pods);

struct EngineOptions {
  std::string node_name;
  uint32_t pending_group = kDefaultPendingGroup;
};

class Engine {
 public:
  explicit Engine(EngineOptions opts);

  // Each upsert/remove updates the desired model incrementally.
  void UpsertPod(const Pod& pod);
  // The same pod object the informer's cache holds (shared, not copied:
  // at 10,000 pods a second copy was ~6 MB of weftd's heap).
  void UpsertPod(PodPtr pod);
  void RemovePod(const std::string& key);
  void UpsertNamespace(const Namespace& ns);
  void RemoveNamespace(const std::string& name);
  void UpsertPolicy(const Policy& policy);
  void RemovePolicy(const std::string& key);
  // ClusterNetworkPolicy (cnp_model.cc): the Admin tier before the
  // NetworkPolicies of a pod, the Baseline tier after them, in the same
  // per-pod chains (docs/clusternetworkpolicy.md).
  void UpsertClusterPolicy(const ClusterPolicy& policy);
  void RemoveClusterPolicy(const std::string& name);
  // Nodes: the addresses `nodes` peers stand for.
  void UpsertNode(const NodeInfo& node);
  void RemoveNode(const std::string& name);
  // Between BeginBatch() and EndBatch() the local pods a ClusterNetworkPolicy
  // or Node change touches are rebuilt once, at EndBatch(), not once per
  // change (1,000 policies at start would rebuild each pod's chain 1,000
  // times). REQUIRES: EndBatch() before desired(), Full() or Delta().
  void BeginBatch() { batching_ = true; }
  void EndBatch();

  const Model& desired() const { return desired_; }

  // The whole table as one transaction that replaces it atomically (never
  // a moment without rules).
  Result<sys::nft::Transaction> Full() const;
  // The transaction that moves the kernel from the last applied model to
  // the desired one, touching only what changed since then (empty when
  // nothing did): an event that moves remote pods is a few elements, a
  // local pod's its chains and dispatch entries.
  Result<sys::nft::Transaction> Delta() const;
  // Marks the desired model as applied after Delta()'s transaction (or,
  // with `full`, Full()'s) was committed.
  void MarkApplied(bool full);
  // Forgets what was applied (after a failed apply, or when the kernel may
  // have been changed under us): the next apply must be Full().
  void ForgetApplied() { has_applied_ = false; }
  bool has_applied() const { return has_applied_; }

  // Addresses whose allowed traffic may have shrunk between the applied and
  // the desired model (an element left a peer set, a local pod's chain
  // changed or it became isolated): their conntrack entries are flushed
  // after the apply so established flows are judged again. Call before
  // MarkApplied().
  std::vector<std::string> Tightened() const;

  // Namespaces that have at least one NetworkPolicy or that the subject of
  // a ClusterNetworkPolicy with rules selects (sorted), for the plugin's
  // pending decision.
  std::vector<std::string> NamespacesWithPolicies() const;

  // Introspection for metrics, weftctl and doctor.
  size_t policy_count() const { return policies_.size(); }
  size_t cluster_policy_count() const { return cnps_.size(); }
  size_t node_count() const { return nodes_.size(); }
  // The first Node by name ("" when none is known): its weftd writes the
  // ClusterNetworkPolicies' status.
  std::string FirstNodeName() const { return nodes_.empty() ? "" : nodes_.begin()->first; }
  // A Node by name (null when unknown).
  const NodeInfo* node(const std::string& name) const {
    auto it = nodes_.find(name);
    return it == nodes_.end() ? nullptr : &it->second;
  }
  size_t pod_count() const { return pods_.size(); }
  size_t local_isolated(bool ingress) const;
  std::vector<PodPolicyView> LocalPods() const;
  // The objects the model is compiled from, for explain (policy/explain.h).
  const std::unordered_map<std::string, PodPtr>& pods() const { return pods_; }
  const std::unordered_map<std::string, Namespace>& namespaces() const { return namespaces_; }
  // The policies of namespace `ns`, in key order.
  std::vector<const Policy*> PoliciesIn(const std::string& ns) const;
  // The enforced ClusterNetworkPolicies of `tier` in precedence order, each
  // with its rules as the chains match them (`rules`: nodes peers resolved).
  struct TierView {
    const ClusterPolicy* policy;
    const Policy* rules;
  };
  std::vector<TierView> TierPolicies(Tier tier) const {
    std::vector<TierView> out;
    for (const auto& [prio, name] : tier == Tier::kAdmin ? admin_order_ : baseline_order_) {
      const CnpState& st = cnps_.at(name);
      out.push_back({&st.policy, &st.sets.policy});
    }
    return out;
  }
  bool TierSelects(const ClusterPolicy& p, const Pod& pod) const { return SubjectSelects(p, pod); }

 private:
  // A set of peers, shared by every rule (of any policy) whose peers are the
  // same: policies in real clusters repeat their selectors, and a pod event
  // then touches each distinct selection once, not once per rule.
  struct PeerSet {
    enum class Kind { kPods, kNamed, kBlocks };
    Kind kind = Kind::kPods;
    std::string ns;              // the policies' namespace, when a peer is podSelector-only
    std::vector<Peer> peers;     // kPods: its one selector peer; kNamed: every peer of the rule
    bool any_peer = false;       // kNamed: the rule has no `to`
    std::vector<PortRef> named;  // kNamed: the rule's named ports
    bool cross_ns = false;       // may hold pods of namespaces other than `ns`
    bool ns_selector = false;    // membership depends on namespace labels
    int refs = 0;                // rules using it
  };
  // The sets one rule uses, by base name ("" = none). kPods and kNamed sets
  // exist per family as <base>-p4/-p6 and <base>-n4/-n6, blocks as <base>-b4/-b6.
  // `pods` has one set per distinct selector peer of the rule (a peer's set
  // is shared by every rule of any policy naming the same peer), so a pod
  // that several rules' peers select is one element of one set, not one of
  // each rule's union: at 100,000 pods the unions made 3.5 M elements, the
  // per-peer sets 0.23 M (docs/performance.md).
  struct RuleSets {
    std::vector<std::string> pods;
    std::string named, blocks4, blocks6;
  };
  struct PolicyState {
    Policy policy;
    std::vector<RuleSets> in, eg;
  };
  // A ClusterNetworkPolicy: its rules as a Policy (nodes peers resolved to
  // ipBlocks of the Nodes' addresses) whose sets the engine shares with
  // NetworkPolicy's.
  struct CnpState {
    ClusterPolicy policy;
    PolicyState sets;
  };
  static std::string PodChainId(const std::string& key);

  bool IsLocal(const Pod& p) const { return p.node == opts_.node_name && p.Addressable(); }
  bool PeerMatchesPod(const std::string& policy_ns, const Peer& peer, const Pod& pod) const;
  bool NamespaceMatches(const LabelSelector& sel, const std::string& ns) const;
  // The elements pod `p` contributes to peer set `base`.
  void PodElements(const std::string& base, const PeerSet& ps, const Pod& p,
                   std::vector<std::pair<std::string, std::string>>* out) const;
  void AddPodToSet(const std::string& base, const PeerSet& ps, const Pod& p, bool add);
  // Calls `fn` for every peer set that can hold a pod of `ns`.
  void ForSetsSeeing(const std::string& ns, const std::function<void(const std::string&, const PeerSet&)>& fn) const;
  // Takes a reference on the set `proto` describes (creating and filling it
  // when it is new) and returns its base name.
  std::string AcquireSet(PeerSet proto, const std::string& key);
  std::string AcquireBlocks(const std::vector<std::string>& elements, bool v6);
  void ReleaseSet(const std::string& base);
  void CreateSetDef(const std::string& name, SetDef def);
  void DeleteSetDef(const std::string& name);
  void AcquirePolicySets(PolicyState& ps);
  void ReleasePolicySets(const PolicyState& ps);
  void RebuildLocalPod(const std::string& key);
  void RebuildLocalPodsOfNamespace(const std::string& ns);
  // RebuildLocalPod's steps. The rules the policies selecting a local pod
  // give its chains, and whether it is isolated in each direction:
  struct PodRules {
    std::vector<NftRule> in, eg;
    bool isolated_in = false, isolated_eg = false;
  };
  PodRules LocalPodRules(const Pod& pod) const;
  // A local pod's chain in one direction with the tiers around its
  // NetworkPolicy rules: `head` (the in-/eg-/node- chain) and, when an Admin
  // rule passes, `tail` (the NetworkPolicy and Baseline part, "t"-prefixed
  // chain the Pass rules go to). isolated false: no chain at all.
  struct TierChain {
    bool isolated = false;
    std::vector<NftRule> head, tail;
  };
  // kIngress/kEgress: the forward hook's in-/eg- chains. kNode: the input
  // hook's node- chain (the pod to its own node): the tiers' egress rules
  // that can match a node address (networks, nodes, fail-closed deny-all;
  // never pod peers), NetworkPolicy standing for "allow" (Weft's
  // NetworkPolicy never restricts a pod's traffic to its own node), allow =
  // accept; no chain unless a tier rule is in it.
  enum class ChainKind { kIngress, kEgress, kNode };
  // The tier policies (with rules) whose subject selects a pod, in
  // precedence order: computed once per pod rebuild for its three chains.
  struct TierSelection {
    std::vector<const CnpState*> admin, baseline;
  };
  TierSelection SelectTiers(const Pod& pod) const;
  TierChain ComposeChain(const Pod& pod, const TierSelection& tiers, ChainKind kind, const std::string& name,
                         bool np_isolated, std::vector<NftRule> np_rules) const;
  bool SubjectSelects(const ClusterPolicy& p, const Pod& pod) const;
  // The nft rules of a rule with `verdict` (accept, return, goto X) and
  // comment `what`: one per peer set and port. Pure.
  // v6: whether the pod and named-port sets of IPv6 exist (v6_).
  static std::vector<NftRule> MatchStatements(const std::string& what, const Rule& rule, const RuleSets& sets,
                                              bool ingress, const Pod& pod, const sys::nft::Verdict& verdict,
                                              bool v6);
  // The Policy a ClusterNetworkPolicy's rules stand for now.
  Policy CnpRules(const ClusterPolicy& p) const;
  void RebuildCnpSubjects(const ClusterPolicy& a, const ClusterPolicy* b);
  void CnpDenySets(const PolicyState& ps, const ClusterPolicy& p, int delta);
  // The nft rules of rule `index` of policy `policy_key` in a chain of
  // `pod`. Pure.
  static std::vector<NftRule> RuleStatements(const std::string& policy_key, const Rule& rule, size_t index,
                                                 const RuleSets& sets, bool ingress, const Pod& pod, bool v6);
  // The IPv6 halves of the pod and named-port sets exist only while some
  // pod of the cluster has an IPv6 address: an IPv4-only cluster's table
  // has neither those sets (empty) nor the rules matching them (never true).
  // The first IPv6 pod address creates and fills them and rebuilds the
  // local pods' chains; the last one leaving deletes them.
  void CountV6(const Pod& p, int delta);
  void SetV6(bool on);
  // Removes the dispatch-map entries and local-set elements of the pod's
  // last addresses.
  void WithdrawLocalPod(const std::string& key);
  // Installs chain `name` (in-, eg- or node-) and its reply twin "r<name>"
  // with the dispatch entries of the pod's addresses, or drops both when
  // not isolated.
  void SetPodChain(const Pod& pod, const std::string& name, TierChain chain);
  // The pod's chain to its own node (ComposeChain kNode with the name
  // "node-@"), shared with every pod whose node rules are the same; null
  // pod or not isolated: the pod has none.
  void SetNodeChain(const std::string& key, const Pod* pod, TierChain chain);
  void PutChain(const std::string& name, std::vector<NftRule> rules);
  // The desired model as Full() and Delta() read it.
  TableView View() const;
  void DropChain(const std::string& name);
  void ElementDelta(const std::string& set, const std::string& elem, bool add);

  EngineOptions opts_;
  std::unordered_map<std::string, PodPtr> pods_;
  // The pods of each namespace by key, pointing at the objects of pods_:
  // the hot loops (a set filled, a namespace relabelled) walk
  // these without hashing every key again.
  std::unordered_map<std::string, std::map<std::string, const Pod*>> pods_by_ns_;
  std::unordered_map<std::string, Namespace> namespaces_;
  std::map<std::string, PolicyState> policies_;  // by ns/name
  std::unordered_map<std::string, std::set<std::string>> policies_by_ns_;
  std::map<std::string, PeerSet> peer_sets_;     // by base name
  std::unordered_map<std::string, std::set<std::string>> sets_by_ns_;  // own-namespace kPods/kNamed sets
  std::set<std::string> cross_ns_sets_;
  Model desired_;
  // desired_'s sets: their elements' references and what changed in each
  // since the last MarkApplied() (what the kernel has of them: set names;
  // elements are tracked as changes).
  SetLedger sets_{&desired_.sets};
  // What the kernel has of the chains and maps, in full (they are small).
  Model applied_;
  bool has_applied_ = false;
  std::set<std::string> dirty_chains_;
  // Map keys each local pod owns (its addresses), to withdraw them on change.
  std::unordered_map<std::string, std::vector<IpAddress>> local_ips_;
  // ClusterNetworkPolicies by name, and their order per tier.
  std::map<std::string, CnpState> cnps_;
  std::set<std::pair<int32_t, std::string>> admin_order_, baseline_order_;
  std::map<std::string, NodeInfo> nodes_;
  // Peer-set bases a Deny or Pass rule uses (reference counts): an element
  // added to one of them narrows what its pods may do (Tightened()).
  std::map<std::string, int> deny_bases_;
  // Shared node chains: the chain of each local pod that has one, and how
  // many pods use each.
  std::unordered_map<std::string, std::string> pod_node_chain_;
  std::map<std::string, int> node_chain_refs_;
  size_t v6_addrs_ = 0;  // IPv6 addresses of the cluster's pods
  bool v6_ = false;      // the IPv6 pod and named-port sets exist
  bool batching_ = false;
  std::set<std::string> deferred_;  // local pods to rebuild at EndBatch()
};

// ipBlock arithmetic: the union of (cidr minus except) over `blocks`, as
// non-overlapping nft interval elements ("a-b" or a single address), per
// family. Pure; exposed for tests.
std::vector<std::string> BlockElements(const std::vector<IpBlock>& blocks, bool v6);

}  // namespace weft::policy::netpol
