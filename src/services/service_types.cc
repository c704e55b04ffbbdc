#include "services/service_types.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "base/json_util.h"

namespace weft::services {
namespace {

using nlohmann::json;

// Errors of one object: "<Kind> ns/name: <field>: <what>".
class Errors {
 public:
  Errors(const char* kind, const json& obj) : what_(std::string(kind) + " ") {
    const json& meta = JsonMember(obj, "metadata");
    what_ += JsonStr(meta, "namespace") + "/" + JsonStr(meta, "name");
  }
  Status Bad(const std::string& field, const std::string& why) const {
    return Status::Error(Reason::kMalformed, Domain::kControlPlane, what_ + ": " + field + ": " + why);
  }

 private:
  std::string what_;
};

std::string Dump(const json& j) { return j.dump(); }

// A string member: "" when absent, an error when it is something else.
Result<std::string> Str(const Errors& err, const json& j, const char* key, const std::string& field) {
  const json& v = JsonMember(j, key);
  if (v.is_null()) return std::string();
  if (!v.is_string()) return err.Bad(field, "not a string: " + Dump(v));
  return v.get<std::string>();
}

// An integer member in [lo, hi]; `def` when absent.
Result<int64_t> Int(const Errors& err, const json& j, const char* key, const std::string& field, int64_t def,
                    int64_t lo, int64_t hi) {
  auto v = JsonIntIn(j, key, def, lo, hi);
  if (!v) return err.Bad(field, Dump(JsonMember(j, key)) + " is not an integer in [" + std::to_string(lo) + ", " +
                                    std::to_string(hi) + "]");
  return *v;
}

Result<Proto> ProtoOf(const Errors& err, const json& j, const std::string& field) {
  WEFT_ASSIGN_OR_RETURN(std::string p, Str(err, j, "protocol", field + ".protocol"));
  if (p.empty() || p == "TCP") return Proto::kTcp;  // the API's default
  if (p == "UDP") return Proto::kUdp;
  if (p == "SCTP") return Proto::kSctp;
  return err.Bad(field + ".protocol", "unknown protocol \"" + p + "\"");
}

Result<IpAddress> Ip(const Errors& err, const std::string& text, const std::string& field) {
  auto ip = IpAddress::Parse(text);
  if (!ip) return err.Bad(field, "\"" + text + "\" is not an IP address");
  return *ip;
}

// A list of strings (absent: empty).
Result<std::vector<std::string>> Strings(const Errors& err, const json& j, const char* key, const std::string& field) {
  std::vector<std::string> out;
  const json& v = JsonMember(j, key);
  if (v.is_null()) return out;
  if (!v.is_array()) return err.Bad(field, "not a list: " + Dump(v));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) return err.Bad(field + "[" + std::to_string(i) + "]", "not a string: " + Dump(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

const json& List(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const json& v = JsonMember(j, key);
  return v.is_array() ? v : kEmpty;
}

Result<TrafficPolicy> Policy(const Errors& err, const json& spec, const char* key) {
  WEFT_ASSIGN_OR_RETURN(std::string p, Str(err, spec, key, std::string("spec.") + key));
  if (p.empty() || p == "Cluster") return TrafficPolicy::kCluster;
  if (p == "Local") return TrafficPolicy::kLocal;
  return err.Bad(std::string("spec.") + key, "unknown policy \"" + p + "\"");
}

// The label's value, or nullopt when the label is absent.
std::optional<std::string> Label(const json& obj, const char* key) {
  const json& labels = JsonMember(JsonMember(obj, "metadata"), "labels");
  const json& v = JsonMember(labels, key);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

// Why a default proxy leaves this object alone ("" when it does not): the
// label selector kube-proxy lists both resources with.
std::string SkippedByLabels(const json& obj) {
  if (Label(obj, kProxyNameLabel)) return std::string("label ") + kProxyNameLabel;
  if (Label(obj, kHeadlessLabel)) return std::string("label ") + kHeadlessLabel;
  return "";
}

}  // namespace

bool HasServiceNameLabel(const json& slice) {
  auto l = Label(slice, kServiceNameLabel);
  return l && !l->empty();
}

namespace {

Status CheckName(const Errors& err, const json& obj) {
  const json& meta = JsonMember(obj, "metadata");
  if (JsonStr(meta, "name").empty()) return err.Bad("metadata.name", "missing");
  if (JsonStr(meta, "namespace").empty()) return err.Bad("metadata.namespace", "missing");
  return Status::Ok();
}

}  // namespace

const char* ProtoName(Proto p) {
  switch (p) {
    case Proto::kTcp: return "tcp";
    case Proto::kUdp: return "udp";
    case Proto::kSctp: return "sctp";
  }
  return "?";
}

bool Service::ExternallyAccessible() const {
  return type == ServiceType::kNodePort || type == ServiceType::kLoadBalancer || !external_ips.empty();
}

Result<Service> DecodeService(const json& obj) {
  const Errors err("Service", obj);
  WEFT_RETURN_IF_ERROR(CheckName(err, obj));
  Service s;
  const json& meta = JsonMember(obj, "metadata");
  s.ns = JsonStr(meta, "namespace");
  s.name = JsonStr(meta, "name");
  const json& spec = JsonMember(obj, "spec");
  if (!spec.is_object()) return err.Bad("spec", "missing");

  WEFT_ASSIGN_OR_RETURN(std::string type, Str(err, spec, "type", "spec.type"));
  if (type.empty() || type == "ClusterIP") s.type = ServiceType::kClusterIP;
  else if (type == "NodePort") s.type = ServiceType::kNodePort;
  else if (type == "LoadBalancer") s.type = ServiceType::kLoadBalancer;
  else if (type == "ExternalName") s.type = ServiceType::kExternalName;
  else return err.Bad("spec.type", "unknown type \"" + type + "\"");

  // clusterIPs, or clusterIP alone (an object written before dual-stack).
  WEFT_ASSIGN_OR_RETURN(auto ips, Strings(err, spec, "clusterIPs", "spec.clusterIPs"));
  if (ips.empty()) {
    WEFT_ASSIGN_OR_RETURN(std::string one, Str(err, spec, "clusterIP", "spec.clusterIP"));
    if (!one.empty()) ips.push_back(one);
  }
  bool headless = false;
  for (size_t i = 0; i < ips.size(); ++i) {
    if (ips[i] == "None") {
      headless = true;
      continue;
    }
    if (ips[i].empty()) continue;
    WEFT_ASSIGN_OR_RETURN(IpAddress ip, Ip(err, ips[i], "spec.clusterIPs[" + std::to_string(i) + "]"));
    for (const auto& have : s.cluster_ips)
      if (have.is_v4() == ip.is_v4())
        return err.Bad("spec.clusterIPs", "two addresses of one family: " + have.ToString() + ", " + ip.ToString());
    s.cluster_ips.push_back(ip);
  }

  const json& ports = JsonMember(spec, "ports");
  if (!ports.is_null() && !ports.is_array()) return err.Bad("spec.ports", "not a list");
  for (size_t i = 0; i < List(spec, "ports").size(); ++i) {
    const json& p = ports[i];
    const std::string f = "spec.ports[" + std::to_string(i) + "]";
    ServicePort sp;
    WEFT_ASSIGN_OR_RETURN(sp.name, Str(err, p, "name", f + ".name"));
    WEFT_ASSIGN_OR_RETURN(sp.proto, ProtoOf(err, p, f));
    WEFT_ASSIGN_OR_RETURN(int64_t port, Int(err, p, "port", f + ".port", 0, 1, 65535));
    sp.port = static_cast<uint16_t>(port);
    WEFT_ASSIGN_OR_RETURN(int64_t node_port, Int(err, p, "nodePort", f + ".nodePort", 0, 0, 65535));
    sp.node_port = static_cast<uint16_t>(node_port);
    const json& target = JsonMember(p, "targetPort");
    if (target.is_string()) {
      sp.target_port_name = target.get<std::string>();
    } else {
      // Unset: the port itself (the API's default).
      WEFT_ASSIGN_OR_RETURN(int64_t t, Int(err, p, "targetPort", f + ".targetPort", port, 1, 65535));
      sp.target_port = static_cast<uint16_t>(t);
    }
    for (const auto& other : s.ports)
      if (other.name == sp.name) return err.Bad(f + ".name", "\"" + sp.name + "\" names two ports");
    s.ports.push_back(std::move(sp));
  }

  WEFT_ASSIGN_OR_RETURN(auto ext, Strings(err, spec, "externalIPs", "spec.externalIPs"));
  for (size_t i = 0; i < ext.size(); ++i) {
    WEFT_ASSIGN_OR_RETURN(IpAddress ip, Ip(err, ext[i], "spec.externalIPs[" + std::to_string(i) + "]"));
    s.external_ips.push_back(ip);
  }
  const json& ingress = JsonMember(JsonMember(JsonMember(obj, "status"), "loadBalancer"), "ingress");
  if (ingress.is_array())
    for (size_t i = 0; i < ingress.size(); ++i) {
      WEFT_ASSIGN_OR_RETURN(std::string ip, Str(err, ingress[i], "ip", "status.loadBalancer.ingress[" + std::to_string(i) + "].ip"));
      if (ip.empty()) continue;  // a hostname-only ingress: nothing for a proxy to capture
      WEFT_ASSIGN_OR_RETURN(IpAddress a, Ip(err, ip, "status.loadBalancer.ingress[" + std::to_string(i) + "].ip"));
      s.lb_ips.push_back(a);
    }

  WEFT_ASSIGN_OR_RETURN(std::string affinity, Str(err, spec, "sessionAffinity", "spec.sessionAffinity"));
  if (affinity == "ClientIP") s.affinity_client_ip = true;
  else if (!affinity.empty() && affinity != "None")
    return err.Bad("spec.sessionAffinity", "unknown affinity \"" + affinity + "\"");
  const json& client_ip = JsonMember(JsonMember(spec, "sessionAffinityConfig"), "clientIP");
  WEFT_ASSIGN_OR_RETURN(int64_t timeout, Int(err, client_ip, "timeoutSeconds",
                                             "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                                             kDefaultAffinityTimeout, 1, 86400));
  s.affinity_timeout = static_cast<uint32_t>(timeout);

  WEFT_ASSIGN_OR_RETURN(s.internal_policy, Policy(err, spec, "internalTrafficPolicy"));
  WEFT_ASSIGN_OR_RETURN(s.external_policy, Policy(err, spec, "externalTrafficPolicy"));
  WEFT_ASSIGN_OR_RETURN(int64_t hc, Int(err, spec, "healthCheckNodePort", "spec.healthCheckNodePort", 0, 0, 65535));
  s.health_check_node_port = static_cast<uint16_t>(hc);
  WEFT_ASSIGN_OR_RETURN(std::string td, Str(err, spec, "trafficDistribution", "spec.trafficDistribution"));
  // A value this version does not know (the API adds them) is no distribution: the hints still rule.
  if (td == "PreferClose") s.traffic_distribution = TrafficDistribution::kPreferClose;
  else if (td == "PreferSameZone") s.traffic_distribution = TrafficDistribution::kPreferSameZone;
  else if (td == "PreferSameNode") s.traffic_distribution = TrafficDistribution::kPreferSameNode;

  if (s.type == ServiceType::kExternalName) s.skip = "type ExternalName";
  else if (std::string l = SkippedByLabels(obj); !l.empty()) s.skip = l;
  else if (headless) s.skip = "headless (clusterIP None)";
  else if (s.cluster_ips.empty()) s.skip = "no clusterIP";
  return s;
}

Result<EndpointSlice> DecodeEndpointSlice(const json& obj) {
  const Errors err("EndpointSlice", obj);
  WEFT_RETURN_IF_ERROR(CheckName(err, obj));
  EndpointSlice s;
  const json& meta = JsonMember(obj, "metadata");
  s.ns = JsonStr(meta, "namespace");
  s.name = JsonStr(meta, "name");
  s.service = Label(obj, kServiceNameLabel).value_or("");
  if (s.service.empty()) return err.Bad(std::string("metadata.labels.") + kServiceNameLabel, "missing");

  WEFT_ASSIGN_OR_RETURN(std::string type, Str(err, obj, "addressType", "addressType"));
  if (type == "IPv4") s.address_type = AddressType::kIpv4;
  else if (type == "IPv6") s.address_type = AddressType::kIpv6;
  else if (type == "FQDN") s.address_type = AddressType::kFqdn;
  else return err.Bad("addressType", type.empty() ? "missing" : "unknown type \"" + type + "\"");

  if (s.address_type == AddressType::kFqdn) s.skip = "addressType FQDN";
  else s.skip = SkippedByLabels(obj);
  if (!s.skip.empty()) return s;  // nothing of it is used: its contents are not judged

  const json& eps = JsonMember(obj, "endpoints");
  if (!eps.is_null() && !eps.is_array()) return err.Bad("endpoints", "not a list");
  for (size_t i = 0; i < List(obj, "endpoints").size(); ++i) {
    const json& e = eps[i];
    const std::string f = "endpoints[" + std::to_string(i) + "]";
    WEFT_ASSIGN_OR_RETURN(auto addrs, Strings(err, e, "addresses", f + ".addresses"));
    if (addrs.empty()) continue;
    Endpoint ep;
    WEFT_ASSIGN_OR_RETURN(ep.addr, Ip(err, addrs[0], f + ".addresses[0]"));
    if (ep.addr.is_v4() != (s.address_type == AddressType::kIpv4))
      return err.Bad(f + ".addresses[0]", addrs[0] + " is not of the slice's addressType " + type);
    const json& cond = JsonMember(e, "conditions");
    for (auto [key, out, def] : {std::tuple{"ready", &ep.ready, true}, std::tuple{"serving", &ep.serving, true},
                                 std::tuple{"terminating", &ep.terminating, false}}) {
      const json& v = JsonMember(cond, key);
      if (v.is_null()) *out = def;
      else if (v.is_boolean()) *out = v.get<bool>();
      else return err.Bad(f + ".conditions." + key, "not a boolean: " + Dump(v));
    }
    WEFT_ASSIGN_OR_RETURN(ep.node_name, Str(err, e, "nodeName", f + ".nodeName"));
    WEFT_ASSIGN_OR_RETURN(ep.zone, Str(err, e, "zone", f + ".zone"));
    const json& hints = JsonMember(e, "hints");
    for (auto [key, out] : {std::pair{"forZones", &ep.zone_hints}, std::pair{"forNodes", &ep.node_hints}}) {
      const json& list = JsonMember(hints, key);
      if (list.is_null()) continue;
      if (!list.is_array()) return err.Bad(f + ".hints." + key, "not a list");
      for (size_t k = 0; k < list.size(); ++k) {
        WEFT_ASSIGN_OR_RETURN(std::string n, Str(err, list[k], "name", f + ".hints." + key + "[" + std::to_string(k) + "].name"));
        if (!n.empty()) out->push_back(std::move(n));
      }
    }
    s.endpoints.push_back(std::move(ep));
  }

  const json& ports = JsonMember(obj, "ports");
  if (!ports.is_null() && !ports.is_array()) return err.Bad("ports", "not a list");
  for (size_t i = 0; i < List(obj, "ports").size(); ++i) {
    const json& p = ports[i];
    const std::string f = "ports[" + std::to_string(i) + "]";
    SlicePort sp;
    WEFT_ASSIGN_OR_RETURN(sp.name, Str(err, p, "name", f + ".name"));
    WEFT_ASSIGN_OR_RETURN(sp.proto, ProtoOf(err, p, f));
    WEFT_ASSIGN_OR_RETURN(int64_t port, Int(err, p, "port", f + ".port", 0, 0, 65535));
    if (port == 0) continue;  // "every port": nothing a proxy can DNAT to (kube-proxy skips it too)
    sp.port = static_cast<uint16_t>(port);
    s.ports.push_back(std::move(sp));
  }
  return s;
}

Result<Service> ParseService(std::string_view text) {
  return ParseJsonObject<Service>(text, "Service", [](const json& j) { return DecodeService(j); });
}

Result<EndpointSlice> ParseEndpointSlice(std::string_view text) {
  return ParseJsonObject<EndpointSlice>(text, "EndpointSlice", [](const json& j) { return DecodeEndpointSlice(j); });
}

}  // namespace weft::services
