#pragma once
// `weftctl policy explain`'s engine: why a connection from one endpoint to
// another is allowed or denied by NetworkPolicy, read from the objects the
// Engine compiled its model from (docs/networkpolicy.md, "Explain"). Pure:
// no I/O, unit-tested without root; weftd answers GET /netpol/explain with
// it under the engine's lock, so the answer is weftd's current model.
//
// A connection needs the source's egress and the destination's ingress to
// allow it. For each side: is the pod isolated for that direction, by which
// policies, and which rules of those policies admit the connection (named
// "ns/name ingress N" exactly as the nft rules' comments name them). The
// semantics are the engine's (netpol_model.h): the e2e suite checks every
// verdict against the probed datapath. ClusterNetworkPolicy's tiers are
// evaluated as the chains order them: Admin (priority, then name; first
// matching rule: Accept, Deny, or Pass to NetworkPolicy), the pod's
// NetworkPolicies, Baseline when no NetworkPolicy isolates the pod, then
// allow.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "policy/netpol_model.h"

namespace weft::policy::netpol {

struct ExplainQuery {
  std::string src;  // "namespace/name" or an IPv4/IPv6 address
  std::string dst;
  std::optional<uint16_t> port;  // none: every port (allowed only if every port is)
  Proto proto = Proto::kTcp;
  int family = 0;  // 4 or 6; 0: the addresses' family, IPv4 when both sides are pods with one
};

// Parses the command line's (and GET /netpol/explain's) strings: `port` is
// "", "80", "80/tcp", "53/UDP", "sctp" is not a port; `family` "", "4", "6".
// Errors: kInvalidArgument naming the bad value.
Result<ExplainQuery> ParseExplainQuery(const std::string& src, const std::string& dst, const std::string& port,
                                       const std::string& family);

// One side of the connection as the engine sees it.
struct ExplainEndpoint {
  std::string pod;   // "ns/name", "" for an address that is no pod's
  std::string ip;    // the address the connection uses
  std::string node;  // the pod's node ("" for an address)
  bool host_network = false;
};

// A rule that admits the connection (or, for a query without a port, some
// of its ports).
struct AdmittingRule {
  std::string policy;     // ns/name
  size_t index = 0;       // its place in spec.ingress / spec.egress
  std::string what;       // "x/allow-b ingress 0", the nft rules' comment
  std::string ports;      // "any port", "TCP 80", "TCP 80-85, UDP serve-53=53"
  bool all_ports = false; // admits every port and protocol
};

// What one direction says: the source's egress or the destination's ingress.
struct ExplainSide {
  std::string direction;  // "egress" or "ingress"
  std::string pod;        // the pod whose policies judge it ("" when none does)
  bool judged = false;    // false: not a pod with policies of its own (an address, hostNetwork, itself)
  std::string note;       // why not judged
  bool isolated = false;
  std::vector<std::string> policies;   // ns/name of the policies isolating the pod in this direction
  std::vector<AdmittingRule> admitted_by;
  // ClusterNetworkPolicy (the Admin tier before NetworkPolicy, Baseline
  // after it): the tier policies selecting the pod ("Admin:name"), and the
  // tier rule that decided, named as its nft comment names it
  // ("Admin:deny-y ingress 0 Deny"); "" when NetworkPolicy or the default did.
  std::vector<std::string> tier_policies;
  std::string decided_by;
  bool allowed = true;
};

struct Explanation {
  ExplainEndpoint src, dst;
  int family = 4;
  Proto proto = Proto::kTcp;
  std::optional<uint16_t> port;
  ExplainSide egress;   // the source's
  ExplainSide ingress;  // the destination's
  bool allowed = true;
  std::string reason;   // one sentence: why
};

// Explains `q` against the engine's current objects. Errors:
// kInvalidArgument (an endpoint that is neither ns/name nor an address, two
// addresses of different families), kNotFound (a pod the engine does not
// know, or without an address of the family asked for).
Result<Explanation> Explain(const Engine& engine, const ExplainQuery& q);

// The addressable pod holding `ip` (the first by name if two claim it), or
// null: what the engine's peer sets would hold for that address.
const Pod* PodByAddress(const Engine& engine, const IpAddress& ip);

// GET /netpol/explain's body (weftctl decodes and renders it).
std::string ExplanationJson(const Explanation& e);

// "TCP 80", "UDP 53", "SCTP any port" (every port of the protocol: "TCP").
std::string PortText(Proto proto, std::optional<uint16_t> port);

}  // namespace weft::policy::netpol
