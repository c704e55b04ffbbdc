#include "policy/cnp_types.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "base/json_util.h"

namespace weft::policy::netpol {
namespace {

using nlohmann::json;


// A selector the API server would accept; `what` names it in problems.
std::optional<LabelSelector> Selector(const json& j, const std::string& what, std::vector<std::string>* problems) {
  if (!j.is_object()) {
    problems->push_back(what + ": not a label selector");
    return std::nullopt;
  }
  LabelSelector s = DecodeSelector(j);
  if (!s.valid) {
    problems->push_back(what + ": invalid label selector");
    return std::nullopt;
  }
  return s;
}

// Reads one entry of `protocols` into `out` (several PortRefs for a named
// port, one per protocol: the name resolves with the container port's own
// protocol). False when Weft cannot read it.
bool DecodeProtocol(const json& p, std::vector<PortRef>* out) {
  if (!p.is_object() || p.size() != 1) return false;
  const std::string named = JsonStr(p, "destinationNamedPort");
  if (!named.empty()) {
    for (Proto pr : {Proto::kTcp, Proto::kUdp, Proto::kSctp}) {
      PortRef r;
      r.proto = pr;
      r.name = named;
      out->push_back(r);
    }
    return true;
  }
  static const std::pair<const char*, Proto> kProtos[] = {{"tcp", Proto::kTcp}, {"udp", Proto::kUdp},
                                                          {"sctp", Proto::kSctp}};
  for (const auto& [key, pr] : kProtos) {
    const json& body = JsonMember(p, key);
    if (body.is_null()) continue;
    if (!body.is_object()) return false;
    PortRef r;
    r.proto = pr;
    const json& dp = JsonMember(body, "destinationPort");
    if (body.empty()) {
      out->push_back(r);  // every port of the protocol
      return true;
    }
    if (!dp.is_object() || body.size() != 1 || dp.size() != 1) return false;
    const json& num = JsonMember(dp, "number");
    const json& range = JsonMember(dp, "range");
    if (num.is_number_integer()) {
      int64_t n = num.get<int64_t>();
      if (n < 1 || n > 65535) return false;
      r.port = static_cast<uint16_t>(n);
    } else if (range.is_object()) {
      const json& s = JsonMember(range, "start");
      const json& e = JsonMember(range, "end");
      if (!s.is_number_integer() || !e.is_number_integer()) return false;
      int64_t a = s.get<int64_t>(), b = e.get<int64_t>();
      if (a < 1 || b > 65535 || a >= b) return false;
      r.port = static_cast<uint16_t>(a);
      r.end_port = static_cast<uint16_t>(b);
    } else {
      return false;
    }
    out->push_back(r);
    return true;
  }
  return false;
}

bool IsDomainName(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == '*'; });
}

// One entry of a rule's from/to list (`pw` names it), added to `rule`;
// `unreadable` is told what could not be read, and decides by the rule's
// action what that fails closed.
void DecodeTierPeer(const json& p, const std::string& pw, bool ingress, bool accept, TierRule& rule,
                    std::vector<std::string>* problems, const std::function<void(const std::string&)>& unreadable) {
  if (!p.is_object() || p.size() != 1) {
    unreadable(pw + ": exactly one peer field must be set, and Weft knows none here");
    return;
  }
  const std::string field = p.begin().key();
  const json& v = p.begin().value();
  if (field == "namespaces") {
    auto sel = Selector(v, pw + ".namespaces", problems);
    if (!sel) {
      unreadable(pw + ".namespaces");
      return;
    }
    Peer peer;
    peer.namespace_selector = *sel;
    rule.match.peers.push_back(std::move(peer));
  } else if (field == "pods") {
    const json& ns = JsonMember(v, "namespaceSelector");
    auto nsel = ns.is_null() ? std::optional<LabelSelector>(LabelSelector{})
                             : Selector(ns, pw + ".pods.namespaceSelector", problems);
    auto psel = Selector(JsonMember(v, "podSelector"), pw + ".pods.podSelector", problems);
    if (!nsel || !psel) {
      unreadable(pw + ".pods");
      return;
    }
    Peer peer;
    peer.namespace_selector = *nsel;
    peer.pod_selector = *psel;
    rule.match.peers.push_back(std::move(peer));
  } else if (!ingress && field == "networks" && v.is_array() && !v.empty()) {
    for (size_t k = 0; k < v.size(); ++k) {
      auto pre = v[k].is_string() ? IpPrefix::Parse(v[k].get<std::string>()) : std::nullopt;
      if (!pre) {
        unreadable(pw + ".networks[" + std::to_string(k) + "]: not a CIDR");
        continue;
      }
      Peer peer;
      peer.ip_block = IpBlock{pre->Masked(), {}};
      rule.match.peers.push_back(std::move(peer));
    }
  } else if (!ingress && field == "nodes") {
    auto sel = Selector(v, pw + ".nodes", problems);
    if (!sel) {
      unreadable(pw + ".nodes");
      return;
    }
    rule.nodes.push_back(*sel);
  } else if (!ingress && field == "domainNames" && v.is_array()) {
    bool ok = !v.empty();
    for (const auto& d : v) ok = ok && d.is_string() && IsDomainName(d.get<std::string>());
    if (accept && ok) {
      problems->push_back(pw + ".domainNames: not implemented by Weft: this peer matches nothing (fail closed)");
    } else {
      unreadable(pw + ".domainNames: only valid in an Accept rule");
    }
  } else {
    unreadable(pw + ": unknown peer \"" + field + "\"");
  }
}

// One rule; `where` is "spec.ingress[i]" or "spec.egress[i]".
TierRule DecodeTierRule(const json& r, bool ingress, const std::string& where, std::vector<std::string>* problems) {
  TierRule rule;
  rule.name = JsonStr(r, "name");
  const std::string action = JsonStr(r, "action");
  bool fail_closed_all = false;  // Deny/Pass that met something unreadable: deny all
  if (action == "Accept") {
    rule.action = Action::kAccept;
  } else if (action == "Deny") {
    rule.action = Action::kDeny;
  } else if (action == "Pass") {
    rule.action = Action::kPass;
  } else {
    problems->push_back(where + ".action: unknown action \"" + action + "\": the rule denies all traffic");
    rule.action = Action::kDeny;
    fail_closed_all = true;
  }
  const bool accept = rule.action == Action::kAccept;
  // Something unreadable: an Accept loses that part, Deny and Pass deny all.
  auto unreadable = [&](const std::string& what) {
    if (accept) {
      problems->push_back(what + ": the Accept rule's part matches nothing (fail closed)");
    } else {
      problems->push_back(what + ": the " + std::string(ActionName(rule.action)) +
                          " rule denies all traffic (fail closed)");
      fail_closed_all = true;
    }
  };
  const char* peers_key = ingress ? "from" : "to";
  const json& peers = JsonMember(r, peers_key);
  rule.match.any_peer = false;
  if (!peers.is_array() || peers.empty()) {
    unreadable(where + "." + peers_key + ": missing or empty");
  } else {
    for (size_t i = 0; i < peers.size(); ++i) {
      DecodeTierPeer(peers[i], where + "." + peers_key + "[" + std::to_string(i) + "]", ingress, accept, rule,
                     problems, unreadable);
    }
  }
  const json& protos = JsonMember(r, "protocols");
  if (!protos.is_null()) {
    rule.match.any_port = false;
    if (!protos.is_array() || protos.empty()) {
      unreadable(where + ".protocols: not a non-empty list");
    } else {
      for (size_t i = 0; i < protos.size(); ++i) {
        if (!DecodeProtocol(protos[i], &rule.match.ports))
          unreadable(where + ".protocols[" + std::to_string(i) + "]: unknown or malformed");
      }
    }
  }
  if (fail_closed_all) {
    rule.action = Action::kDeny;
    rule.match = Rule{};  // any peer, any port
    rule.nodes.clear();
  }
  return rule;
}

}  // namespace

const char* TierName(Tier t) { return t == Tier::kAdmin ? "Admin" : "Baseline"; }

const char* ActionName(Action a) {
  switch (a) {
    case Action::kAccept:
      return "Accept";
    case Action::kDeny:
      return "Deny";
    case Action::kPass:
      return "Pass";
  }
  return "?";
}

bool ClusterPolicy::SameSpec(const ClusterPolicy& o) const {
  ClusterPolicy a = *this, b = o;
  a.seen = {};
  b.seen = {};
  a.generation = b.generation = 0;
  return a == b;
}

std::optional<ClusterPolicy> DecodeClusterPolicy(const json& obj) {
  const json& meta = JsonMember(obj, "metadata");
  ClusterPolicy p;
  p.name = JsonStr(meta, "name");
  if (p.name.empty()) return std::nullopt;
  const json& gen = JsonMember(meta, "generation");
  if (gen.is_number_integer()) p.generation = gen.get<int64_t>();
  const json& spec = JsonMember(obj, "spec");
  std::vector<std::string>& problems = p.problems;

  const std::string tier = JsonStr(spec, "tier");
  if (tier == "Admin") {
    p.tier = Tier::kAdmin;
  } else if (tier == "Baseline") {
    p.tier = Tier::kBaseline;
  } else {
    problems.push_back("spec.tier: unknown tier \"" + tier + "\"");
    p.enforced = false;
  }
  const json& prio = JsonMember(spec, "priority");
  if (!prio.is_number_integer() || prio.get<int64_t>() < 0 || prio.get<int64_t>() > 1000) {
    problems.push_back("spec.priority: must be an integer from 0 to 1000");
    p.enforced = false;
  } else {
    p.priority = static_cast<int32_t>(prio.get<int64_t>());
  }
  const json& subject = JsonMember(spec, "subject");
  if (!subject.is_object() || subject.size() != 1) {
    problems.push_back("spec.subject: exactly one of namespaces, pods must be set");
    p.enforced = false;
  } else if (subject.contains("namespaces")) {
    auto s = Selector(subject["namespaces"], "spec.subject.namespaces", &problems);
    if (s) p.subject_ns = *s;
    else p.enforced = false;
  } else if (subject.contains("pods")) {
    const json& v = subject["pods"];
    const json& ns = JsonMember(v, "namespaceSelector");
    auto nsel = ns.is_null() ? std::optional<LabelSelector>(LabelSelector{})
                             : Selector(ns, "spec.subject.pods.namespaceSelector", &problems);
    auto psel = Selector(JsonMember(v, "podSelector"), "spec.subject.pods.podSelector", &problems);
    if (nsel && psel) {
      p.subject_ns = *nsel;
      p.subject_pods = *psel;
    } else {
      p.enforced = false;
    }
  } else {
    problems.push_back("spec.subject: unknown subject \"" + subject.begin().key() + "\"");
    p.enforced = false;
  }
  for (int dir = 0; dir < 2; ++dir) {
    bool ingress = dir == 0;
    const char* key = ingress ? "ingress" : "egress";
    const json& rules = JsonMember(spec, key);
    if (rules.is_null()) continue;
    if (!rules.is_array()) {
      problems.push_back(std::string("spec.") + key + ": not a list");
      p.enforced = false;
      continue;
    }
    for (size_t i = 0; i < rules.size(); ++i) {
      TierRule r = DecodeTierRule(rules[i], ingress, std::string("spec.") + key + "[" + std::to_string(i) + "]",
                                  &problems);
      (ingress ? p.ingress : p.egress).push_back(std::move(r));
    }
  }
  if (!p.enforced) {
    p.ingress.clear();
    p.egress.clear();
  }

  // What status says now.
  json others = json::array();
  const json& conds = JsonMember(JsonMember(obj, "status"), "conditions");
  if (conds.is_array()) {
    for (const auto& c : conds) {
      if (JsonStr(c, "type") != kCnpConditionType) {
        others.push_back(c);
        continue;
      }
      p.seen.status = JsonStr(c, "status");
      p.seen.reason = JsonStr(c, "reason");
      p.seen.message = JsonStr(c, "message");
      const json& og = JsonMember(c, "observedGeneration");
      p.seen.observed_generation = og.is_number_integer() ? og.get<int64_t>() : 0;
    }
  }
  p.seen.others = others.dump();
  return p;
}

std::optional<NodeInfo> DecodeNodeInfo(const json& obj) {
  const json& meta = JsonMember(obj, "metadata");
  NodeInfo n;
  n.name = JsonStr(meta, "name");
  if (n.name.empty()) return std::nullopt;
  const json& labels = JsonMember(meta, "labels");
  if (labels.is_object())
    for (const auto& [k, v] : labels.items())
      if (v.is_string()) n.labels[k] = v.get<std::string>();
  const json& addrs = JsonMember(JsonMember(obj, "status"), "addresses");
  if (addrs.is_array())
    for (const auto& a : addrs)
      if (auto ip = IpAddress::Parse(JsonStr(a, "address"))) n.ips.push_back(*ip);  // Hostname entries do not parse
  std::sort(n.ips.begin(), n.ips.end());
  n.ips.erase(std::unique(n.ips.begin(), n.ips.end()), n.ips.end());
  return n;
}

CnpCondition ConditionFor(const ClusterPolicy& p) {
  CnpCondition c;
  std::string msg;
  for (const auto& pr : p.problems) msg += (msg.empty() ? "" : "; ") + pr;
  if (!p.enforced) {
    c.status = "False";
    c.reason = "Invalid";
    c.message = "not enforced: " + msg;
  } else if (!p.problems.empty()) {
    c.status = "False";
    c.reason = "FailedClosed";
    c.message = "enforced, parts fail closed: " + msg;
  } else {
    c.status = "True";
    c.reason = "Accepted";
    c.message = "enforced by weft";
  }
  if (c.message.size() > 1024) c.message = c.message.substr(0, 1021) + "...";
  return c;
}

std::string ConditionPatch(const ClusterPolicy& p, const std::string& now_rfc3339) {
  CnpCondition c = ConditionFor(p);
  if (p.seen.status == c.status && p.seen.reason == c.reason && p.seen.message == c.message &&
      p.seen.observed_generation == p.generation)
    return "";
  json conds = json::parse(p.seen.others, nullptr, false);
  if (!conds.is_array()) conds = json::array();
  conds.push_back({{"type", kCnpConditionType},
                   {"status", c.status},
                   {"reason", c.reason},
                   {"message", c.message},
                   {"observedGeneration", p.generation},
                   {"lastTransitionTime", now_rfc3339}});
  json patch = {{"status", {{"conditions", conds}}}};
  return patch.dump();
}

}  // namespace weft::policy::netpol
