#pragma once
// ClusterNetworkPolicy's vocabulary (policy.networking.k8s.io/v1alpha2,
// sigs.k8s.io/network-policy-api v0.3.0) as plain values, the decoding of the
// API server's JSON into them, and the Nodes whose addresses `nodes` peers
// name. Pure: no I/O (docs/clusternetworkpolicy.md).
//
// Decoding is strict and fails closed exactly as the API prescribes for what
// Weft does not understand (a peer with no field it knows, e.g. from a newer
// CRD): in an Accept rule that peer matches nothing; a Deny or Pass rule with
// such a peer denies all traffic. The same holds for a protocol entry or a
// port Weft cannot read. `domainNames` peers are not implemented: they are
// Accept-only in the API, and Weft treats them as matching nothing (the
// lower-precedence deny that the API tells administrators to pair them with
// then applies). Every such finding is reported in `problems`, which the
// controller writes to status.conditions.
//
// The rules reuse NetworkPolicy's Rule (peers and ports), so the engine's
// peer sets, named ports and ipBlock arithmetic serve both APIs.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/ip.h"
#include "policy/netpol_types.h"

namespace weft::policy::netpol {

enum class Tier : uint8_t { kAdmin, kBaseline };
enum class Action : uint8_t { kAccept, kDeny, kPass };
const char* TierName(Tier t);      // "Admin" "Baseline"
const char* ActionName(Action a);  // "Accept" "Deny" "Pass"

// One ingress or egress rule of a ClusterNetworkPolicy.
struct TierRule {
  std::string name;  // spec.*[i].name ("" when unset)
  Action action = Action::kDeny;
  // The peers and ports. `namespaces` and `pods` peers are Peers with a
  // namespace selector (and a pod selector); `networks` are ipBlocks without
  // excepts. any_peer is true only for a fail-closed deny-all rule.
  Rule match;
  // `nodes` peers (egress): the addresses in status.addresses of the Nodes
  // each selector matches, resolved by the engine.
  std::vector<LabelSelector> nodes;
  bool operator==(const TierRule&) const = default;
};

struct ClusterPolicy {
  std::string name;
  int64_t generation = 0;  // metadata.generation (status' observedGeneration)
  Tier tier = Tier::kAdmin;
  int32_t priority = 0;
  // The subject: pods whose namespace matches subject_ns and, when set,
  // whose labels match subject_pods. Host-network pods never.
  LabelSelector subject_ns;
  std::optional<LabelSelector> subject_pods;
  std::vector<TierRule> ingress, egress;
  // False when the policy cannot be enforced at all (no tier, priority out
  // of range, no subject Weft understands): the engine ignores it and the
  // status says why. A policy with `enforced` true may still carry problems
  // (parts enforced fail-closed).
  bool enforced = true;
  std::vector<std::string> problems;  // "spec.egress[0].to[1]: ..."
  // What status.conditions holds now: our condition (observedGeneration
  // -1 when absent) and the others' conditions (a JSON array, kept as they
  // are when ours is written).
  struct SeenStatus {
    std::string status, reason, message;
    int64_t observed_generation = -1;
    std::string others = "[]";
    bool operator==(const SeenStatus&) const = default;
  } seen;
  bool operator==(const ClusterPolicy&) const = default;
  // Equal but for `seen`: the same enforcement.
  bool SameSpec(const ClusterPolicy& o) const;
  // Precedence within a tier: lower priority first, then name (byte order).
  // The API leaves same-priority order to the implementation; this is Weft's.
  bool Before(const ClusterPolicy& o) const {
    return priority != o.priority ? priority < o.priority : name < o.name;
  }
};

// A Node as `nodes` peers see it: labels and status.addresses that are IPs.
struct NodeInfo {
  std::string name;
  Labels labels;
  std::vector<IpAddress> ips;  // sorted, unique
  bool operator==(const NodeInfo&) const = default;
};

// nullopt for an object without a name.
std::optional<ClusterPolicy> DecodeClusterPolicy(const nlohmann::json& obj);
std::optional<NodeInfo> DecodeNodeInfo(const nlohmann::json& obj);

// The API group, version and resource weftd follows.
inline constexpr char kCnpPath[] = "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies";

// The condition weftd writes to status.conditions: type "Accepted"; status
// "True" with reason "Accepted" when every field is enforced as written,
// "False" with reason "FailedClosed" (enforced, but parts fail closed: the
// message lists them) or "Invalid" (not enforced). Pure.
struct CnpCondition {
  std::string status;  // "True" / "False"
  std::string reason;
  std::string message;
  bool operator==(const CnpCondition&) const = default;
};
CnpCondition ConditionFor(const ClusterPolicy& p);
inline constexpr char kCnpConditionType[] = "Accepted";

// The JSON merge patch for .../clusternetworkpolicies/NAME/status that puts
// ConditionFor(p) (observedGeneration p.generation, lastTransitionTime
// `now_rfc3339`) beside the others' conditions. "" when p.seen already
// says the same (status, reason, message, observedGeneration): nothing to
// write, so the weftd of every node computing the same condition writes it
// at most once per change.
std::string ConditionPatch(const ClusterPolicy& p, const std::string& now_rfc3339);

}  // namespace weft::policy::netpol
