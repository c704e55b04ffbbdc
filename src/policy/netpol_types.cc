#include "policy/netpol_types.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/json_util.h"

namespace weft::policy::netpol {
namespace {

using nlohmann::json;


Labels DecodeLabels(const json& j) {
  Labels out;
  if (!j.is_object()) return out;
  for (const auto& [k, v] : j.items())
    if (v.is_string()) out[k] = v.get<std::string>();
  return out;
}

std::optional<IpBlock> DecodeIpBlock(const json& j) {
  auto cidr = IpPrefix::Parse(JsonStr(j, "cidr"));
  if (!cidr) return std::nullopt;
  IpBlock b;
  b.cidr = cidr->Masked();
  const json& ex = JsonMember(j, "except");
  if (ex.is_array())
    for (const auto& e : ex)
      if (e.is_string())
        if (auto p = IpPrefix::Parse(e.get<std::string>()); p && p->is_v4() == b.cidr.is_v4())
          b.except.push_back(p->Masked());
  return b;
}

std::vector<Rule> DecodeRules(const json& list, const char* peers_key) {
  std::vector<Rule> out;
  if (!list.is_array()) return out;
  for (const auto& r : list) {
    Rule rule;
    const json& peers = JsonMember(r, peers_key);
    if (peers.is_array() && !peers.empty()) {
      rule.any_peer = false;
      for (const auto& p : peers) {
        Peer peer;
        const json& ps = JsonMember(p, "podSelector");
        const json& ns = JsonMember(p, "namespaceSelector");
        const json& ib = JsonMember(p, "ipBlock");
        if (ps.is_object()) peer.pod_selector = DecodeSelector(ps);
        if (ns.is_object()) peer.namespace_selector = DecodeSelector(ns);
        if (ib.is_object()) {
          peer.ip_block = DecodeIpBlock(ib);
          // A malformed ipBlock admits nothing (the API server rejects it;
          // an invalid selector stands in for "nothing").
          if (!peer.ip_block) {
            LabelSelector none;
            none.valid = false;
            peer.pod_selector = none;
          }
        }
        // A peer with nothing set is rejected by the API server; treat it as
        // matching nothing rather than everything.
        if (!peer.pod_selector && !peer.namespace_selector && !peer.ip_block) {
          LabelSelector none;
          none.valid = false;
          peer.pod_selector = none;
        }
        rule.peers.push_back(std::move(peer));
      }
    }
    const json& ports = JsonMember(r, "ports");
    if (ports.is_array() && !ports.empty()) {
      rule.any_port = false;
      for (const auto& p : ports) {
        PortRef ref;
        std::string proto = JsonStr(p, "protocol");
        if (proto.empty()) proto = "TCP";
        auto pr = ParseProto(proto);
        ref.proto_valid = pr.has_value();
        if (pr) ref.proto = *pr;
        const json& port = JsonMember(p, "port");
        if (port.is_number_integer()) {
          int64_t n = port.get<int64_t>();
          if (n < 1 || n > 65535) ref.proto_valid = false;
          else ref.port = static_cast<uint16_t>(n);
          const json& end = JsonMember(p, "endPort");
          if (end.is_number_integer()) {
            int64_t e = end.get<int64_t>();
            if (e < n || e > 65535) ref.proto_valid = false;
            else ref.end_port = static_cast<uint16_t>(e);
          }
        } else if (port.is_string()) {
          // IntOrString: a number in a string is a number.
          const std::string s = port.get<std::string>();
          if (!s.empty() && std::all_of(s.begin(), s.end(), ::isdigit) && s.size() <= 5) {
            int n = std::stoi(s);
            if (n < 1 || n > 65535) ref.proto_valid = false;
            else ref.port = static_cast<uint16_t>(n);
          } else if (s.empty()) {
            ref.proto_valid = false;
          } else {
            ref.name = s;
          }
        }
        rule.ports.push_back(std::move(ref));
      }
    }
    out.push_back(std::move(rule));
  }
  return out;
}

}  // namespace

std::optional<Proto> ParseProto(const std::string& s) {
  if (s == "TCP") return Proto::kTcp;
  if (s == "UDP") return Proto::kUdp;
  if (s == "SCTP") return Proto::kSctp;
  return std::nullopt;
}

const char* NftProtoName(Proto p) {
  switch (p) {
    case Proto::kTcp: return "tcp";
    case Proto::kUdp: return "udp";
    case Proto::kSctp: return "sctp";
  }
  return "tcp";
}

bool LabelSelector::Matches(const Labels& labels) const {
  if (!valid) return false;
  for (const auto& [k, v] : match_labels) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  for (const auto& r : expressions) {
    auto it = labels.find(r.key);
    bool has = it != labels.end();
    switch (r.op) {
      case LabelRequirement::Op::kIn:
        if (!has || std::find(r.values.begin(), r.values.end(), it->second) == r.values.end()) return false;
        break;
      case LabelRequirement::Op::kNotIn:
        // NotIn matches a pod without the label (as Kubernetes' selectors do).
        if (has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end()) return false;
        break;
      case LabelRequirement::Op::kExists:
        if (!has) return false;
        break;
      case LabelRequirement::Op::kDoesNotExist:
        if (has) return false;
        break;
    }
  }
  return true;
}

LabelSelector DecodeSelector(const json& obj) {
  LabelSelector s;
  const json& ml = JsonMember(obj, "matchLabels");
  if (ml.is_object())
    for (const auto& [k, v] : ml.items()) {
      if (v.is_string()) s.match_labels[k] = v.get<std::string>();
      else s.valid = false;
    }
  const json& me = JsonMember(obj, "matchExpressions");
  if (me.is_array()) {
    for (const auto& e : me) {
      LabelRequirement r;
      r.key = JsonStr(e, "key");
      std::string op = JsonStr(e, "operator");
      const json& vals = JsonMember(e, "values");
      if (vals.is_array())
        for (const auto& v : vals)
          if (v.is_string()) r.values.push_back(v.get<std::string>());
      if (op == "In") r.op = LabelRequirement::Op::kIn;
      else if (op == "NotIn") r.op = LabelRequirement::Op::kNotIn;
      else if (op == "Exists") r.op = LabelRequirement::Op::kExists;
      else if (op == "DoesNotExist") r.op = LabelRequirement::Op::kDoesNotExist;
      else s.valid = false;
      bool needs_values = r.op == LabelRequirement::Op::kIn || r.op == LabelRequirement::Op::kNotIn;
      if (r.key.empty() || needs_values == r.values.empty()) s.valid = false;
      s.expressions.push_back(std::move(r));
    }
  }
  return s;
}

uint16_t Pod::ResolvePort(const std::string& port_name, Proto proto) const {
  for (const auto& p : ports)
    if (p.name == port_name && p.proto == proto) return p.port;
  return 0;
}

std::optional<Policy> DecodePolicy(const json& obj) {
  const json& meta = JsonMember(obj, "metadata");
  Policy p;
  p.ns = JsonStr(meta, "namespace");
  p.name = JsonStr(meta, "name");
  if (p.name.empty()) return std::nullopt;
  if (p.ns.empty()) p.ns = "default";
  const json& spec = JsonMember(obj, "spec");
  const json& ps = JsonMember(spec, "podSelector");
  // A policy whose selector cannot be read selects every pod of its
  // namespace: isolation fails closed.
  p.pod_selector = ps.is_object() ? DecodeSelector(ps) : LabelSelector{};
  if (!p.pod_selector.valid) p.pod_selector = LabelSelector{};
  p.ingress = DecodeRules(JsonMember(spec, "ingress"), "from");
  p.egress = DecodeRules(JsonMember(spec, "egress"), "to");
  const json& types = JsonMember(spec, "policyTypes");
  if (types.is_array() && !types.empty()) {
    p.isolates_ingress = false;
    p.isolates_egress = false;
    for (const auto& t : types) {
      if (t == "Ingress") p.isolates_ingress = true;
      if (t == "Egress") p.isolates_egress = true;
    }
  } else {
    // The API server's default: Ingress always, Egress when egress rules exist.
    p.isolates_ingress = true;
    p.isolates_egress = !p.egress.empty();
  }
  return p;
}

std::optional<Pod> DecodePod(const json& obj) {
  const json& meta = JsonMember(obj, "metadata");
  Pod p;
  p.ns = JsonStr(meta, "namespace");
  p.name = JsonStr(meta, "name");
  if (p.name.empty()) return std::nullopt;
  if (p.ns.empty()) p.ns = "default";
  p.labels = DecodeLabels(JsonMember(meta, "labels"));
  const json& spec = JsonMember(obj, "spec");
  p.node = JsonStr(spec, "nodeName");
  const json& hn = JsonMember(spec, "hostNetwork");
  p.host_network = hn.is_boolean() && hn.get<bool>();
  for (const char* list : {"containers", "initContainers"}) {
    const json& cs = JsonMember(spec, list);
    if (!cs.is_array()) continue;
    for (const auto& c : cs) {
      const json& ports = JsonMember(c, "ports");
      if (!ports.is_array()) continue;
      for (const auto& port : ports) {
        ContainerPort cp;
        cp.name = JsonStr(port, "name");
        const json& n = JsonMember(port, "containerPort");
        if (cp.name.empty() || !n.is_number_integer()) continue;
        int64_t v = n.get<int64_t>();
        if (v < 1 || v > 65535) continue;
        cp.port = static_cast<uint16_t>(v);
        std::string proto = JsonStr(port, "protocol");
        auto pr = ParseProto(proto.empty() ? "TCP" : proto);
        if (!pr) continue;
        cp.proto = *pr;
        p.ports.push_back(std::move(cp));
      }
    }
  }
  const json& status = JsonMember(obj, "status");
  std::string phase = JsonStr(status, "phase");
  p.terminal = phase == "Succeeded" || phase == "Failed";
  const json& ips = JsonMember(status, "podIPs");
  if (ips.is_array())
    for (const auto& e : ips)
      if (auto a = IpAddress::Parse(JsonStr(e, "ip"))) p.ips.push_back(*a);
  if (p.ips.empty())
    if (auto a = IpAddress::Parse(JsonStr(status, "podIP"))) p.ips.push_back(*a);
  std::sort(p.ips.begin(), p.ips.end());
  p.ips.erase(std::unique(p.ips.begin(), p.ips.end()), p.ips.end());
  return p;
}

std::optional<SharedPod> DecodeSharedPod(const json& obj) {
  auto p = DecodePod(obj);
  if (!p) return std::nullopt;
  return SharedPod{std::make_shared<const Pod>(std::move(*p))};
}

std::optional<Namespace> DecodeNamespace(const json& obj) {
  const json& meta = JsonMember(obj, "metadata");
  Namespace n;
  n.name = JsonStr(meta, "name");
  if (n.name.empty()) return std::nullopt;
  n.labels = DecodeLabels(JsonMember(meta, "labels"));
  n.labels.emplace(kNamespaceNameLabel, n.name);
  return n;
}

}  // namespace weft::policy::netpol
