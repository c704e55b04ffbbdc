#include "services/proxy_explain.h"

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "sys/nft_render.h"

namespace weft::services {
namespace {

using nlohmann::json;

const char* TypeName(ServiceType t) {
  switch (t) {
    case ServiceType::kClusterIP: return "ClusterIP";
    case ServiceType::kNodePort: return "NodePort";
    case ServiceType::kLoadBalancer: return "LoadBalancer";
    case ServiceType::kExternalName: return "ExternalName";
  }
  return "?";
}
const char* PolicyName(TrafficPolicy p) { return p == TrafficPolicy::kLocal ? "Local" : "Cluster"; }
const char* DistributionName(TrafficDistribution d) {
  switch (d) {
    case TrafficDistribution::kNone: return "";
    case TrafficDistribution::kPreferClose: return "PreferClose";
    case TrafficDistribution::kPreferSameZone: return "PreferSameZone";
    case TrafficDistribution::kPreferSameNode: return "PreferSameNode";
  }
  return "";
}

std::string HostPort(const std::string& addr, uint16_t port) {
  const bool v6 = addr.find(':') != std::string::npos;
  return (v6 ? "[" + addr + "]" : addr) + ":" + std::to_string(port);
}

// The last verdict of a rule (its statement), if it has one.
const nft::Verdict* VerdictOf(const nft::Rule& r) {
  return r.exprs.empty() ? nullptr : std::get_if<nft::Verdict>(&r.exprs.back());
}
const nft::Lookup* LookupOf(const nft::Rule& r) {
  for (const auto& e : r.exprs)
    if (const auto* l = std::get_if<nft::Lookup>(&e)) return l;
  return nullptr;
}
std::string VerdictText(const nft::Verdict& v) {
  switch (v.code) {
    case NFT_GOTO: return "goto " + v.chain;
    case NFT_JUMP: return "jump " + v.chain;
    case NF_DROP: return "drop";
    case NF_ACCEPT: return "accept";
    case NFT_RETURN: return "return";
  }
  return "verdict " + std::to_string(v.code);
}

// A rule in nft's words; a numgen pick with its anonymous map written out.
std::string RuleText(const TableRule& tr) {
  if (tr.vmap.empty()) return nft::RenderRule(nft::Family::kInet, tr.rule);
  std::string out = "numgen random mod " + std::to_string(tr.vmap.size()) + " vmap { ";
  for (size_t i = 0; i < tr.vmap.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(i) + " : " + (tr.vmap[i].verdict ? VerdictText(*tr.vmap[i].verdict) : "?");
  }
  return out + " }";
}

class PathWalker {
 public:
  PathWalker(const Service& svc, const ServiceObjects& objs, const PortState& st, const Config& cfg,
             const std::map<std::string, std::string>& ep_of_chain)
      : svc_(svc), objs_(objs), st_(st), cfg_(cfg), ep_of_chain_(ep_of_chain) {}

  ExplainPath Walk(std::string kind, const std::optional<IpAddress>& addr, uint16_t port) {
    ExplainPath p;
    p.kind = std::move(kind);
    p.address = addr ? addr->ToString() : "";
    p.port = port;
    const std::string key = MapKeyBytes(addr, st_.proto, port);
    const std::string key_text = (addr ? p.address + " . " : std::string()) + ProtoName(st_.proto) + " . " +
                                 std::to_string(port);
    const std::string dnat_map = addr ? ServiceIpsMap(st_.v6) : NodePortsMap(st_.v6);
    const std::string none_map = addr ? NoEndpointServicesMap(st_.v6) : NoEndpointNodePortsMap(st_.v6);
    bool dnat = false;
    if (const nft::Verdict* v = Entry(dnat_map, key)) {
      p.steps.push_back({"map " + dnat_map,
                         "nat prerouting/output, chain services: " + key_text + " : " + VerdictText(*v), {}});
      if (v->code == NFT_GOTO) dnat = FollowChain(v->chain, p, 0);
    }
    if (const nft::Verdict* v = Entry(none_map, key)) {
      const bool reject = v->code == NFT_GOTO && v->chain == kRejectChain;
      const std::string what =
          reject ? "reject (TCP reset, ICMP port unreachable otherwise): no endpoint anywhere"
                 : "drop: endpoints exist, but none this traffic's Local policy may use on this node";
      p.steps.push_back({"map " + none_map,
                         std::string("filter hooks (priority -110), new connections not DNATed above, chain ") +
                             (addr ? kEndpointsCheckChain : kNodePortEndpointsCheckChain) + ": " + key_text + " : " +
                             VerdictText(*v) + " — " + what,
                         {}});
      if (!dnat) p.verdict = reject ? "reject" : "drop";
    }
    if (dnat) p.verdict = "dnat";
    if (p.verdict.empty()) {
      p.verdict = "none";
      p.steps.push_back({"map " + dnat_map, "no entry for " + key_text +
                                                " in this Service's objects (another Service holds the key, or it "
                                                "is not served): the packet passes untranslated",
                         {}});
    }
    std::sort(p.endpoints.begin(), p.endpoints.end());
    p.endpoints.erase(std::unique(p.endpoints.begin(), p.endpoints.end()), p.endpoints.end());
    return p;
  }

 private:
  const nft::Verdict* Entry(const std::string& map, const std::string& key) const {
    auto it = objs_.entries.find(MapKey{map, key});
    return it == objs_.entries.end() ? nullptr : &it->second;
  }

  // The Service's chain `name` as a step, then the chains it goes to (depth
  // bound: ext -> policy -> endpoint). True when some rule DNATs.
  bool FollowChain(const std::string& name, ExplainPath& p, int depth) {
    auto it = objs_.chains.find(name);
    if (it == objs_.chains.end() || depth > 3) {
      p.steps.push_back({"chain " + name, "not among this Service's chains (the table is inconsistent)", {}});
      return false;
    }
    if (auto ep = ep_of_chain_.find(name); ep != ep_of_chain_.end()) {
      p.endpoints.push_back(ep->second);
      return true;  // endpoint chains are listed with the endpoints, not walked per path
    }
    ExplainStep step{"chain " + name, "", {}};
    std::vector<std::string> does;
    std::vector<std::string> next;  // chains it goes to that are not endpoint chains
    size_t affinity = 0;
    bool dnat = false;
    for (const TableRule& tr : it->second) {
      step.rules.push_back(RuleText(tr));
      const nft::Verdict* v = VerdictOf(tr.rule);
      const nft::Lookup* l = LookupOf(tr.rule);
      if (!tr.vmap.empty()) {
        std::vector<std::string> eps;
        for (const auto& el : tr.vmap)
          if (el.verdict)
            if (auto ep = ep_of_chain_.find(el.verdict->chain); ep != ep_of_chain_.end()) eps.push_back(ep->second);
        for (const auto& e : eps) p.endpoints.push_back(e);
        dnat = dnat || !eps.empty();
        does.push_back("one of " + std::to_string(tr.vmap.size()) + " endpoint(s) at random");
      } else if (l && l->set.rfind("aff", 0) == 0 && v && v->code == NFT_GOTO) {
        ++affinity;
        if (auto ep = ep_of_chain_.find(v->chain); ep != ep_of_chain_.end()) p.endpoints.push_back(ep->second);
        dnat = true;
      } else if (v && v->code == NFT_JUMP && v->chain == kMarkMasqChain) {
        if (!tr.rule.comment.empty()) does.push_back(tr.rule.comment + " (masquerade)");
        else if (tr.rule.exprs.size() == 1) does.push_back("mark for masquerade");
        else does.push_back(cfg_.masquerade_all ? "mark ClusterIP traffic for masquerade (masquerade_all)"
                                                : "mark ClusterIP traffic from outside the cluster CIDR for masquerade");
      } else if (v && v->code == NFT_GOTO) {
        does.push_back((tr.rule.comment.empty() ? std::string("then") : tr.rule.comment + ":") + " goto " + v->chain);
        next.push_back(v->chain);
      }
    }
    if (affinity)
      does.insert(does.end() - (does.empty() ? 0 : 1),
                  "a client in an endpoint's affinity set (timeout " + std::to_string(svc_.affinity_timeout) +
                      " s) goes to that endpoint again");
    for (size_t i = 0; i < does.size(); ++i) step.does += (i ? "; " : "") + does[i];
    p.steps.push_back(std::move(step));
    for (const auto& n : next) dnat = FollowChain(n, p, depth + 1) || dnat;
    return dnat;
  }

  const Service& svc_;
  const ServiceObjects& objs_;
  const PortState& st_;
  const Config& cfg_;
  const std::map<std::string, std::string>& ep_of_chain_;  // ep chain -> "ip:port"
};

bool IsNameChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'; }

}  // namespace

Result<std::string> ParseServiceKey(std::string_view key) {
  auto bad = [&](const std::string& why) {
    return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                         "service must be NAMESPACE/NAME, not \"" + std::string(key.substr(0, 300)) + "\": " + why);
  };
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos) return bad("no '/'");
  const std::string_view ns = key.substr(0, slash), name = key.substr(slash + 1);
  if (ns.empty() || name.empty()) return bad("an empty namespace or name");
  if (ns.size() > 63 || name.size() > 253) return bad("too long");
  for (std::string_view part : {ns, name})
    for (char c : part)
      if (!IsNameChar(c)) return bad("names are lower-case letters, digits, '-' and '.'");
  return std::string(key);
}

Result<Explanation> Explain(const Model& model, const std::string& key) {
  const Service* svc = model.FindService(key);
  if (!svc)
    return Status::Error(Reason::kNotFound, Domain::kControlPlane,
                         "Service " + key + " is not known to weftd's proxy (no such Service, or its object did not "
                                            "decode: see weft_services_decode_errors_total)");
  Explanation e;
  e.service = key;
  e.type = TypeName(svc->type);
  e.skip = svc->skip;
  for (const auto& ip : svc->cluster_ips) e.cluster_ips.push_back(ip.ToString());
  for (const auto& ip : svc->external_ips) e.external_ips.push_back(ip.ToString());
  for (const auto& ip : svc->lb_ips) e.lb_ips.push_back(ip.ToString());
  e.affinity_client_ip = svc->affinity_client_ip;
  e.affinity_timeout = svc->affinity_client_ip ? svc->affinity_timeout : 0;
  e.internal_traffic_policy = PolicyName(svc->internal_policy);
  e.external_traffic_policy = PolicyName(svc->external_policy);
  e.external_policy_applies = svc->ExternallyAccessible();
  e.traffic_distribution = DistributionName(svc->traffic_distribution);
  e.node = model.config().node.node_name;
  const ServiceObjects* objs = model.Objects(key);
  if (!objs) return e;

  for (const PortState& st : objs->ports) {
    ExplainPort out;
    out.port_name = st.port_name;
    out.name = st.port_name.substr(st.port_name.rfind('/') + 1);
    out.v6 = st.v6;
    out.proto = st.proto;
    out.port = st.port;
    out.node_port = st.node_port;
    out.has_endpoints = st.has_endpoints;
    for (const auto& ip : st.vips) out.vips.push_back(ip.ToString());
    const std::string svc_chain = ChainName("svc", st.v6, st.port_name),
                      local_chain = ChainName("local", st.v6, st.port_name);
    // The endpoint chains a policy chain's numgen map picks from.
    auto picks = [&](const std::string& chain) {
      std::set<std::string> eps;
      if (auto it = objs->chains.find(chain); it != objs->chains.end())
        for (const auto& tr : it->second)
          for (const auto& el : tr.vmap)
            if (el.verdict) eps.insert(el.verdict->chain);
      return eps;
    };
    const std::set<std::string> cluster = picks(svc_chain), local = picks(local_chain);
    std::map<std::string, std::string> ep_of_chain;
    for (const PortEndpoint& pe : st.endpoints) {
      ExplainEndpoint x;
      x.addr = pe.ip.ToString();
      x.port = pe.port;
      x.local = pe.local;
      x.ready = pe.ready;
      x.serving = pe.serving;
      x.terminating = pe.terminating;
      x.chain = ChainName("ep", st.v6, st.port_name, EndpointPart(pe));
      x.cluster = cluster.count(x.chain) > 0;
      x.local_policy = local.count(x.chain) > 0;
      if (svc->affinity_client_ip) x.affinity_set = ChainName("aff", st.v6, st.port_name, EndpointPart(pe));
      ep_of_chain[x.chain] = HostPort(x.addr, x.port);
      out.endpoints.push_back(std::move(x));
    }
    // This port's chains and sets, by the names BuildService gives them.
    for (const char* kind : {"svc", "local", "ext"})
      if (const std::string n = ChainName(kind, st.v6, st.port_name); objs->chains.count(n)) out.chains.push_back(n);
    for (const auto& x : out.endpoints) {
      if (objs->chains.count(x.chain)) out.chains.push_back(x.chain);
      if (!x.affinity_set.empty() && objs->sets.count(x.affinity_set)) out.sets.push_back(x.affinity_set);
    }

    PathWalker walker(*svc, *objs, st, model.config(), ep_of_chain);
    // vips: the ClusterIP first, then externalIPs, then LB IPs (BuildService's order).
    for (size_t i = 0; i < st.vips.size(); ++i) {
      const IpAddress& ip = st.vips[i];
      std::string kind = "ClusterIP";
      if (i > 0) {
        kind = "LoadBalancer";
        for (const auto& x : svc->external_ips)
          if (x == ip) kind = "externalIP";
      }
      out.paths.push_back(walker.Walk(kind, ip, st.port));
    }
    if (st.node_port) out.paths.push_back(walker.Walk("NodePort", std::nullopt, st.node_port));
    e.ports.push_back(std::move(out));
  }
  return e;
}

std::string ExplanationJson(const Explanation& e) {
  json ports = json::array();
  for (const auto& p : e.ports) {
    json eps = json::array();
    for (const auto& x : p.endpoints)
      eps.push_back({{"address", x.addr},
                     {"port", x.port},
                     {"local", x.local},
                     {"ready", x.ready},
                     {"serving", x.serving},
                     {"terminating", x.terminating},
                     {"clusterPolicy", x.cluster},
                     {"localPolicy", x.local_policy},
                     {"chain", x.chain},
                     {"affinitySet", x.affinity_set}});
    json paths = json::array();
    for (const auto& path : p.paths) {
      json steps = json::array();
      for (const auto& s : path.steps) steps.push_back({{"at", s.at}, {"does", s.does}, {"rules", s.rules}});
      paths.push_back({{"kind", path.kind},
                       {"address", path.address},
                       {"port", path.port},
                       {"steps", steps},
                       {"verdict", path.verdict},
                       {"endpoints", path.endpoints}});
    }
    ports.push_back({{"portName", p.port_name},
                     {"name", p.name},
                     {"family", p.v6 ? "IPv6" : "IPv4"},
                     {"protocol", ProtoName(p.proto)},
                     {"port", p.port},
                     {"nodePort", p.node_port},
                     {"vips", p.vips},
                     {"hasEndpoints", p.has_endpoints},
                     {"endpoints", eps},
                     {"paths", paths},
                     {"chains", p.chains},
                     {"sets", p.sets}});
  }
  json j = {{"service", e.service},
            {"type", e.type},
            {"skip", e.skip},
            {"node", e.node},
            {"clusterIPs", e.cluster_ips},
            {"externalIPs", e.external_ips},
            {"loadBalancerIPs", e.lb_ips},
            {"sessionAffinity", e.affinity_client_ip ? "ClientIP" : "None"},
            {"affinityTimeoutSeconds", e.affinity_timeout},
            {"internalTrafficPolicy", e.internal_traffic_policy},
            {"externalTrafficPolicy", e.external_traffic_policy},
            {"externalTrafficPolicyApplies", e.external_policy_applies},
            {"trafficDistribution", e.traffic_distribution},
            {"ports", ports}};
  return j.dump(2) + "\n";
}

}  // namespace weft::services
