#pragma once
// `weftctl policy`'s pure part: weftd's /netpol answer (one object per
// local pod) decoded and rendered for people. weftd's JSON is the contract
// between the two programs, so it is decoded here on its own terms (a
// weftctl may meet an older or newer weftd); unknown keys are ignored and
// kept for --json. Unit-tested without root or weftd.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "doctor/nft_table.h"

namespace weft::doctor {

struct PolicyPod {
  std::string pod;  // namespace/name
  std::vector<std::string> ips;
  bool isolated_ingress = false;
  bool isolated_egress = false;
  std::vector<std::string> ingress_policies, egress_policies;  // namespace/name
  std::vector<std::string> ingress_rules, egress_rules;        // nft rules of its chains, in order
  std::vector<std::string> node_rules;  // its chain to its own node (ClusterNetworkPolicy tiers; may be empty)
  nlohmann::json raw;                                          // weftd's object as it came
};

// Decodes GET /netpol's body (a JSON array). Errors (malformed): not JSON, not
// an array, an entry without a string "pod".
Result<std::vector<PolicyPod>> ParsePolicyPods(const std::string& body);

// The `@name` sets a rule refers to, in order of appearance.
std::vector<std::string> RuleSetRefs(const std::string& rule);

// One rule of a pod's chain in plain words. `ingress`: an ingress chain
// ("accept" allows); egress chains "return" when they allow.
struct RuleLine {
  std::string verdict;  // "allow", "deny", or the nft verdict when neither
  std::string match;    // what it matches, in nft syntax ("" = everything)
  std::string note;     // the rule's comment: "itself", "x/allow-b ingress 0"
};
RuleLine DescribeRule(const std::string& rule, bool ingress);

// The text `weftctl policy` prints for `pods`. `ruleset` (weftd's desired
// table, may be null) resolves the sets the rules name: each set's
// elements are printed under the first rule that uses it, at most
// `max_elements` of them.
std::string RenderPolicyText(const std::vector<PolicyPod>& pods, const NftTable* ruleset, size_t max_elements = 16);

// `weft_netpol_ready` from weftd's /metrics text: nullopt when absent.
std::optional<bool> NetpolReadyMetric(const std::string& metrics);

}  // namespace weft::doctor
