#include "policy/explain.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace weft::policy::netpol {
namespace {

Status Bad(const std::string& msg) { return Status::Error(Reason::kInvalidArgument, Domain::kConfig, msg); }

std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool IsPodName(const std::string& s) {
  size_t slash = s.find('/');
  return slash != std::string::npos && slash != 0 && slash + 1 != s.size() && s.find('/', slash + 1) == std::string::npos;
}

// One endpoint resolved against the engine's pods.
struct Resolved {
  ExplainEndpoint ep;
  const Pod* pod = nullptr;  // set for a pod (addressable or hostNetwork)
  std::optional<IpAddress> addr;
};

std::optional<IpAddress> AddressOf(const Pod& p, int family) {
  for (const auto& ip : p.ips)
    if ((family == 4) == ip.is_v4()) return ip;
  return std::nullopt;
}

// A pod by name, or the addressable pod holding an address (the engine's
// peer sets hold exactly those). Two pods claiming one address (a deletion
// not seen yet): the first by name, as good as any — both are in the sets.
Result<Resolved> Resolve(const Engine& engine, const std::string& what) {
  Resolved r;
  if (auto ip = IpAddress::Parse(what)) {
    r.addr = *ip;
    r.ep.ip = ip->ToString();
    if (const Pod* best = PodByAddress(engine, *ip)) {
      r.pod = best;
      r.ep.pod = best->key();
      r.ep.node = best->node;
    }
    return r;
  }
  if (!IsPodName(what))
    return Bad("\"" + what + "\" is neither namespace/name nor an IPv4 or IPv6 address");
  auto it = engine.pods().find(what);
  if (it == engine.pods().end())
    return Status::Error(Reason::kNotFound, Domain::kControlPlane, "pod " + what + " is not known to weftd");
  const Pod& p = *it->second;
  if (p.terminal)
    return Status::Error(Reason::kNotFound, Domain::kControlPlane,
                         "pod " + what + " has ended (Succeeded or Failed): its address may belong to another pod");
  if (p.ips.empty())
    return Status::Error(Reason::kNotFound, Domain::kControlPlane, "pod " + what + " has no address yet");
  r.pod = &p;
  r.ep.pod = p.key();
  r.ep.node = p.node;
  r.ep.host_network = p.host_network;
  return r;
}

}  // namespace

const Pod* PodByAddress(const Engine& engine, const IpAddress& ip) {
  const Pod* best = nullptr;
  for (const auto& [key, pod] : engine.pods()) {
    if (!pod->Addressable()) continue;
    for (const auto& a : pod->ips)
      if (a == ip && (!best || key < best->key())) best = pod.get();
  }
  return best;
}

namespace {

bool NamespaceMatches(const Engine& engine, const LabelSelector& sel, const std::string& ns) {
  auto it = engine.namespaces().find(ns);
  if (it != engine.namespaces().end()) return sel.Matches(it->second.labels);
  return sel.Matches(Labels{{kNamespaceNameLabel, ns}});
}

// Whether `peer` of a policy of `policy_ns` matches the other endpoint (the
// engine's Engine::PeerMatchesPod, plus ipBlock on the address).
bool PeerMatches(const Engine& engine, const std::string& policy_ns, const Peer& peer, const Resolved& other) {
  if (peer.ip_block) {
    const IpBlock& b = *peer.ip_block;
    if (!other.addr || b.cidr.is_v4() != other.addr->is_v4() || !b.cidr.Contains(*other.addr)) return false;
    for (const auto& e : b.except)
      if (e.Contains(*other.addr)) return false;
    return true;
  }
  // hostNetwork pods are their node: never selected as peers.
  if (!other.pod || !other.pod->Addressable()) return false;
  const Pod& pod = *other.pod;
  if (peer.namespace_selector) {
    if (!NamespaceMatches(engine, *peer.namespace_selector, pod.ns)) return false;
  } else if (pod.ns != policy_ns) {
    return false;
  }
  return !peer.pod_selector || peer.pod_selector->Matches(pod.labels);
}

std::string RefText(const PortRef& ref, const Pod* dst) {
  std::string proto = Upper(NftProtoName(ref.proto));
  if (!ref.name.empty()) {
    uint16_t n = dst ? dst->ResolvePort(ref.name, ref.proto) : 0;
    return proto + " " + ref.name + (n ? "=" + std::to_string(n) : " (not a port of the destination)");
  }
  if (ref.port == 0) return proto + " any port";
  if (ref.end_port > ref.port) return proto + " " + std::to_string(ref.port) + "-" + std::to_string(ref.end_port);
  return proto + " " + std::to_string(ref.port);
}

// Whether `ref` admits (proto, port) towards `dst` (named ports resolve on
// the destination pod, as the engine does for both directions).
bool RefAdmits(const PortRef& ref, Proto proto, uint16_t port, const Pod* dst) {
  if (!ref.proto_valid || ref.proto != proto) return false;
  if (!ref.name.empty()) return dst && dst->Addressable() && dst->ResolvePort(ref.name, proto) == port && port != 0;
  if (ref.port == 0) return true;
  uint16_t end = ref.end_port > ref.port ? ref.end_port : ref.port;
  return port >= ref.port && port <= end;
}

// Whether `rule` (of a policy of `policy_ns`) matches the connection; the
// match with the ports it covers. `covers`: it answers the question (the
// port asked, or every port when none was).
struct Hit {
  std::string ports;
  bool all_ports = false;
  bool covers = false;
};
std::optional<Hit> RuleMatches(const Engine& engine, const std::string& policy_ns, const Rule& rule,
                               const Resolved& other, const Pod* dst_pod, const ExplainQuery& q) {
  bool peer_ok = rule.any_peer;
  for (const auto& peer : rule.peers)
    if (!peer_ok) peer_ok = PeerMatches(engine, policy_ns, peer, other);
  if (!peer_ok) return std::nullopt;
  Hit h;
  if (rule.any_port) {
    h.ports = "any port";
    h.all_ports = h.covers = true;
    return h;
  }
  if (q.port) {
    for (const auto& ref : rule.ports)
      if (RefAdmits(ref, q.proto, *q.port, dst_pod)) {
        h.ports = RefText(ref, dst_pod);
        h.covers = true;
        return h;
      }
    return std::nullopt;
  }
  // Without a port: the rule matches some ports, never all of them.
  for (const auto& ref : rule.ports)
    if (ref.proto_valid && (ref.name.empty() || (dst_pod && dst_pod->ResolvePort(ref.name, ref.proto))))
      h.ports += (h.ports.empty() ? "" : ", ") + RefText(ref, dst_pod);
  if (h.ports.empty()) return std::nullopt;
  return h;
}

// The first matching rule of the tier's policies selecting `pod`, as the
// chain evaluates them. Returns the action taken (nullopt: none matched);
// `what` names the rule.
std::optional<Action> TierDecides(const Engine& engine, Tier tier, bool ingress, const Pod& pod, const Resolved& other,
                                  const Pod* dst_pod, const ExplainQuery& q, ExplainSide* side, std::string* what) {
  std::optional<Action> decided;
  for (const auto& tv : engine.TierPolicies(tier)) {
    if (!engine.TierSelects(*tv.policy, pod)) continue;
    const auto& rules = ingress ? tv.policy->ingress : tv.policy->egress;
    const auto& match = ingress ? tv.rules->ingress : tv.rules->egress;
    if (rules.empty()) continue;  // no chain rules in this direction
    side->tier_policies.push_back(std::string(TierName(tier)) + ":" + tv.policy->name);
    for (size_t r = 0; r < rules.size() && r < match.size() && !decided; ++r) {
      auto hit = RuleMatches(engine, "", match[r], other, dst_pod, q);
      if (!hit) continue;
      std::string name = std::string(TierName(tier)) + ":" + tv.policy->name.substr(0, 80) +
                         (ingress ? " ingress " : " egress ") + std::to_string(r) + " " + ActionName(rules[r].action);
      if (!hit->covers) {
        // Some ports only (a question about every port): a Deny means not
        // every port passes; an Accept or Pass leaves the rest to what follows.
        if (rules[r].action != Action::kDeny) continue;
      }
      decided = rules[r].action;
      *what = name + (hit->all_ports ? "" : " (" + hit->ports + ")");
    }
  }
  return decided;
}

// One direction judged by the policies of `self` (source for egress,
// destination for ingress); `other` is the peer, `dst` the destination.
ExplainSide Judge(const Engine& engine, bool ingress, const Resolved& self, const Resolved& other,
                  const Resolved& dst, const ExplainQuery& q) {
  ExplainSide side;
  side.direction = ingress ? "ingress" : "egress";
  side.pod = self.ep.pod;
  if (!self.pod) {
    side.note = "not a pod: no NetworkPolicy applies to " + self.ep.ip;
    return side;
  }
  if (self.pod->host_network) {
    side.note = "hostNetwork pod: it is its node, which policy never filters";
    return side;
  }
  side.judged = true;
  const Pod& pod = *self.pod;
  const Pod* dst_pod = dst.pod && dst.pod->Addressable() ? dst.pod : nullptr;
  // A pod's traffic to its own node (an address in its Node's
  // status.addresses) is judged in the input hook, by the tiers only.
  bool own_node = false;
  if (!ingress && other.addr && !(other.pod && other.pod->Addressable()))
    if (const NodeInfo* n = engine.node(pod.node))
      own_node = std::find(n->ips.begin(), n->ips.end(), *other.addr) != n->ips.end();
  for (const Policy* pol : engine.PoliciesIn(pod.ns)) {
    if (!pol->pod_selector.Matches(pod.labels)) continue;
    if (ingress ? !pol->isolates_ingress : !pol->isolates_egress) continue;
    side.isolated = true;
    side.policies.push_back(pol->key());
    const auto& rules = ingress ? pol->ingress : pol->egress;
    for (size_t i = 0; i < rules.size(); ++i) {
      auto hit = RuleMatches(engine, pol->ns, rules[i], other, dst_pod, q);
      if (!hit) continue;
      AdmittingRule a;
      a.policy = pol->key();
      a.index = i;
      a.what = pol->key() + (ingress ? " ingress " : " egress ") + std::to_string(i);
      a.ports = hit->ports;
      a.all_ports = hit->all_ports;
      side.admitted_by.push_back(std::move(a));
    }
  }
  // The Admin tier first.
  std::string what;
  auto admin = TierDecides(engine, Tier::kAdmin, ingress, pod, other, dst_pod, q, &side, &what);
  if (admin && *admin != Action::kPass) {
    side.decided_by = what;
    side.allowed = *admin == Action::kAccept;
    return side;
  }
  if (side.isolated && own_node) {
    side.allowed = true;
    side.note = "NetworkPolicy never restricts a pod's traffic to its own node (" + other.ep.ip + " is " + pod.node +
                "'s address)";
    if (admin) side.decided_by = what;  // the Pass that led here
    return side;
  }
  if (side.isolated) {
    side.allowed = false;
    for (const auto& a : side.admitted_by)
      if (q.port || a.all_ports) side.allowed = true;
    if (admin) side.decided_by = what;  // the Pass that led here
    // Listed for the record: Baseline never applies to a pod NetworkPolicy isolates.
    for (const auto& tv : engine.TierPolicies(Tier::kBaseline))
      if (engine.TierSelects(*tv.policy, pod) && !(ingress ? tv.policy->ingress : tv.policy->egress).empty())
        side.tier_policies.push_back(std::string("Baseline:") + tv.policy->name + " (not reached)");
    return side;
  }
  std::string bwhat;
  auto base = TierDecides(engine, Tier::kBaseline, ingress, pod, other, dst_pod, q, &side, &bwhat);
  if (base) {
    side.decided_by = bwhat;
    side.allowed = *base != Action::kDeny;
  } else if (admin) {
    side.decided_by = what;
  }
  return side;
}

std::string JoinComma(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string Name(const ExplainEndpoint& e) { return e.pod.empty() ? e.ip : e.pod; }

}  // namespace

std::string PortText(Proto proto, std::optional<uint16_t> port) {
  std::string p = Upper(NftProtoName(proto));
  return port ? p + " " + std::to_string(*port) : p;
}

Result<ExplainQuery> ParseExplainQuery(const std::string& src, const std::string& dst, const std::string& port,
                                       const std::string& family) {
  ExplainQuery q;
  if (src.empty() || dst.empty()) return Bad("SRC and DST are required");
  q.src = src;
  q.dst = dst;
  if (!port.empty()) {
    std::string num = port, proto;
    if (auto slash = port.find('/'); slash != std::string::npos) {
      num = port.substr(0, slash);
      proto = port.substr(slash + 1);
    }
    if (!proto.empty()) {
      auto p = ParseProto(Upper(proto));
      if (!p) return Bad("protocol \"" + proto + "\" is not tcp, udp or sctp");
      q.proto = *p;
    }
    if (num.empty() || num.size() > 5 || !std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return Bad("port \"" + port + "\" is not PORT or PORT/PROTO with PORT 1-65535");
    unsigned long n = std::stoul(num);
    if (n < 1 || n > 65535) return Bad("port " + num + " is out of range (1-65535)");
    q.port = static_cast<uint16_t>(n);
  }
  if (family == "4") q.family = 4;
  else if (family == "6") q.family = 6;
  else if (!family.empty()) return Bad("family \"" + family + "\" is not 4 or 6");
  return q;
}

Result<Explanation> Explain(const Engine& engine, const ExplainQuery& q) {
  WEFT_ASSIGN_OR_RETURN(Resolved src, Resolve(engine, q.src));
  WEFT_ASSIGN_OR_RETURN(Resolved dst, Resolve(engine, q.dst));
  // The family: the addresses', else the one asked for, else IPv4 when both
  // have it.
  int family = q.family;
  for (const Resolved* r : {&src, &dst}) {
    if (!r->addr) continue;
    int f = r->addr->is_v4() ? 4 : 6;
    if (family != 0 && family != f)
      return Bad(r->ep.ip + " is an IPv" + std::to_string(f) + " address, the connection is IPv" +
                 std::to_string(family));
    family = f;
  }
  if (family == 0) family = AddressOf(*src.pod, 4) && AddressOf(*dst.pod, 4) ? 4 : 6;
  for (Resolved* r : {&src, &dst}) {
    if (r->addr) continue;
    r->addr = AddressOf(*r->pod, family);
    if (!r->addr)
      return Status::Error(Reason::kNotFound, Domain::kControlPlane,
                           "pod " + r->ep.pod + " has no IPv" + std::to_string(family) + " address");
    r->ep.ip = r->addr->ToString();
  }

  Explanation e;
  e.src = src.ep;
  e.dst = dst.ep;
  e.family = family;
  e.proto = q.proto;
  e.port = q.port;
  std::string what = PortText(q.proto, q.port) + (q.port ? "" : " (every port)");
  if (src.pod && dst.pod && src.pod == dst.pod && !src.pod->host_network) {
    e.egress = ExplainSide{"egress", src.ep.pod, false, "a pod to itself is always allowed"};
    e.ingress = ExplainSide{"ingress", dst.ep.pod, false, "a pod to itself is always allowed"};
    e.reason = "a pod to itself is always allowed";
    return e;
  }
  e.egress = Judge(engine, false, src, dst, dst, q);
  e.ingress = Judge(engine, true, dst, src, dst, q);
  // The node itself (a hostNetwork pod) to its own pods passes hooks weft
  // never filters.
  if (src.pod && src.pod->host_network && dst.pod && dst.pod->node == src.pod->node) {
    e.ingress.allowed = true;
    e.ingress.note = "the node to its own pods is always allowed";
  }
  e.allowed = e.egress.allowed && e.ingress.allowed;
  auto why = [&](const ExplainSide& s, const std::string& who) {
    std::string dir = (s.direction == "egress" ? "the egress of " : "the ingress of ") + who;
    if (!s.decided_by.empty() && s.decided_by.find(" Deny") != std::string::npos) return dir + " is denied by " + s.decided_by;
    return dir + " is isolated by " + JoinComma(s.policies) + " and no rule of " +
           (s.policies.size() == 1 ? "it" : "them") + " admits " + (q.port ? what : "every port");
  };
  if (!e.egress.allowed) e.reason = why(e.egress, Name(e.src));
  if (!e.ingress.allowed) e.reason += (e.reason.empty() ? "" : "; ") + why(e.ingress, Name(e.dst));
  if (e.allowed) {
    std::vector<std::string> by;
    for (const auto* s : {&e.egress, &e.ingress}) {
      if (!s->decided_by.empty() && s->decided_by.find(" Pass") == std::string::npos) {
        by.push_back(s->decided_by);
        continue;
      }
      for (const auto& a : s->admitted_by)
        if (s->isolated && (q.port || a.all_ports)) {
          by.push_back(a.what);
          break;
        }
    }
    bool tiers = !e.egress.tier_policies.empty() || !e.ingress.tier_policies.empty();
    if (by.empty() && e.egress.judged && e.egress.isolated && !e.egress.note.empty()) {
      e.reason = e.egress.note;  // to its own node
      return e;
    }
    e.reason = !by.empty() ? "admitted by " + JoinComma(by)
               : tiers     ? "no rule of the cluster policies selecting the pods denies it"
                           : "neither side is isolated";
    if (!e.egress.isolated && e.ingress.isolated) e.reason += " (the source is not isolated for egress)";
    if (e.egress.isolated && !e.ingress.isolated) e.reason += " (the destination is not isolated for ingress)";
  }
  return e;
}

std::string ExplanationJson(const Explanation& e) {
  using nlohmann::json;
  auto ep = [](const ExplainEndpoint& p) {
    json o = {{"ip", p.ip}};
    if (!p.pod.empty()) o["pod"] = p.pod;
    if (!p.node.empty()) o["node"] = p.node;
    if (p.host_network) o["hostNetwork"] = true;
    return o;
  };
  auto side = [](const ExplainSide& s) {
    json rules = json::array();
    for (const auto& a : s.admitted_by)
      rules.push_back({{"policy", a.policy}, {"rule", a.index}, {"what", a.what}, {"ports", a.ports},
                       {"allPorts", a.all_ports}});
    json o = {{"direction", s.direction}, {"judged", s.judged}, {"isolated", s.isolated},
              {"policies", s.policies}, {"admittedBy", rules}, {"allowed", s.allowed}};
    if (!s.pod.empty()) o["pod"] = s.pod;
    if (!s.tier_policies.empty()) o["tierPolicies"] = s.tier_policies;
    if (!s.decided_by.empty()) o["decidedBy"] = s.decided_by;
    if (!s.note.empty()) o["note"] = s.note;
    return o;
  };
  json out = {{"src", ep(e.src)},
              {"dst", ep(e.dst)},
              {"family", e.family},
              {"protocol", Upper(NftProtoName(e.proto))},
              {"port", e.port ? json(*e.port) : json(nullptr)},
              {"allowed", e.allowed},
              {"verdict", e.allowed ? "allowed" : "denied"},
              {"reason", e.reason},
              {"egress", side(e.egress)},
              {"ingress", side(e.ingress)}};
  return out.dump(2) + "\n";
}

}  // namespace weft::policy::netpol
