#include "cni/result.h"

#include "cni/version.h"

namespace weft::cni {

using nlohmann::json;

namespace {

bool IsLegacy(const std::string& v) { return v == "0.1.0" || v == "0.2.0"; }
bool HasIpVersionField(const std::string& v) { return v == "0.3.0" || v == "0.3.1" || v == "0.4.0"; }
bool Is11(const std::string& v) { return AtLeast(v, "1.1.0"); }

json EncodeRoute(const Route& r, bool v11) {
  json j = {{"dst", r.dst.ToString()}};
  if (r.gw) j["gw"] = r.gw->ToString();
  if (v11) {
    if (r.mtu) j["mtu"] = *r.mtu;
    if (r.advmss) j["advmss"] = *r.advmss;
    if (r.priority) j["priority"] = *r.priority;
    if (r.table) j["table"] = *r.table;
    if (r.scope) j["scope"] = *r.scope;
  }
  return j;
}

}  // namespace

json EncodeDns(const Dns& d) {
  json j = json::object();
  if (!d.nameservers.empty()) j["nameservers"] = d.nameservers;
  if (!d.domain.empty()) j["domain"] = d.domain;
  if (!d.search.empty()) j["search"] = d.search;
  if (!d.options.empty()) j["options"] = d.options;
  return j;
}

Result<json> EncodeResult(const CniResult& r, const std::string& version) {
  if (!IsSupported(version))
    return Status::Error(Reason::kUnsupported, Domain::kNone,
                         "cannot print a result for cniVersion \"" + version + "\"");
  json j = {{"cniVersion", version}};
  if (IsLegacy(version)) {
    // 0.1.0/0.2.0: one ip4 and one ip6 block; routes grouped by family.
    for (bool v6 : {false, true}) {
      const IpConfig* ip = nullptr;
      for (const auto& c : r.ips)
        if (c.address.addr().is_v6() == v6) {
          ip = &c;
          break;
        }
      if (!ip) continue;
      json b = {{"ip", ip->address.ToString()}};
      if (ip->gateway) b["gateway"] = ip->gateway->ToString();
      json routes = json::array();
      for (const auto& rt : r.routes)
        if (rt.dst.addr().is_v6() == v6) routes.push_back(EncodeRoute(rt, false));
      if (!routes.empty()) b["routes"] = routes;
      j[v6 ? "ip6" : "ip4"] = b;
    }
    if (!r.dns.empty()) j["dns"] = EncodeDns(r.dns);
    return j;
  }
  bool v11 = Is11(version);
  if (!r.interfaces.empty()) {
    json ifs = json::array();
    for (const auto& i : r.interfaces) {
      json o = {{"name", i.name}};
      if (!i.mac.empty()) o["mac"] = i.mac;
      if (v11 && i.mtu) o["mtu"] = *i.mtu;
      if (!i.sandbox.empty()) o["sandbox"] = i.sandbox;
      if (v11 && !i.socket_path.empty()) o["socketPath"] = i.socket_path;
      if (v11 && !i.pci_id.empty()) o["pciID"] = i.pci_id;
      ifs.push_back(o);
    }
    j["interfaces"] = ifs;
  }
  if (!r.ips.empty()) {
    json ips = json::array();
    for (const auto& c : r.ips) {
      json o;
      if (HasIpVersionField(version)) o["version"] = c.address.addr().is_v6() ? "6" : "4";
      o["address"] = c.address.ToString();
      if (c.gateway) o["gateway"] = c.gateway->ToString();
      if (c.interface) o["interface"] = *c.interface;
      ips.push_back(o);
    }
    j["ips"] = ips;
  }
  if (!r.routes.empty()) {
    json routes = json::array();
    for (const auto& rt : r.routes) routes.push_back(EncodeRoute(rt, v11));
    j["routes"] = routes;
  }
  j["dns"] = EncodeDns(r.dns);
  return j;
}

namespace {

Status Bad(const std::string& what) {
  return Status::Error(Reason::kMalformed, Domain::kNone, "decode result: " + what);
}

Result<IpPrefix> Prefix(const json& j, const std::string& field) {
  if (!j.is_string()) return Bad(field + " must be a string");
  auto p = IpPrefix::Parse(j.get<std::string>());
  if (!p) return Bad(field + " \"" + j.get<std::string>() + "\" is not an address/prefix");
  return *p;
}

Result<IpAddress> Addr(const json& j, const std::string& field) {
  if (!j.is_string()) return Bad(field + " must be a string");
  auto a = IpAddress::Parse(j.get<std::string>());
  if (!a) return Bad(field + " \"" + j.get<std::string>() + "\" is not an IP address");
  return *a;
}

Result<std::optional<int>> OptInt(const json& o, const char* k) {
  if (!o.contains(k) || o[k].is_null()) return std::optional<int>();
  if (!o[k].is_number_integer()) return Bad(std::string(k) + " must be an integer");
  return std::optional<int>(o[k].get<int>());
}

Result<Route> DecodeRoute(const json& j) {
  if (!j.is_object()) return Bad("route must be an object");
  if (!j.contains("dst")) return Bad("route without dst");
  Route r;
  WEFT_ASSIGN_OR_RETURN(r.dst, Prefix(j["dst"], "route dst"));
  if (j.contains("gw") && !j["gw"].is_null()) {
    WEFT_ASSIGN_OR_RETURN(IpAddress gw, Addr(j["gw"], "route gw"));
    r.gw = gw;
  }
  WEFT_ASSIGN_OR_RETURN(r.mtu, OptInt(j, "mtu"));
  WEFT_ASSIGN_OR_RETURN(r.advmss, OptInt(j, "advmss"));
  WEFT_ASSIGN_OR_RETURN(r.priority, OptInt(j, "priority"));
  WEFT_ASSIGN_OR_RETURN(r.table, OptInt(j, "table"));
  WEFT_ASSIGN_OR_RETURN(r.scope, OptInt(j, "scope"));
  return r;
}

Result<std::vector<std::string>> StringList(const json& j, const std::string& field) {
  std::vector<std::string> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return Bad(field + " must be an array of strings");
  for (const auto& e : j) {
    if (!e.is_string()) return Bad(field + " must be an array of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

Result<Dns> DecodeDns(const json& j) {
  Dns d;
  if (j.is_null()) return d;
  if (!j.is_object()) return Bad("dns must be an object");
  if (j.contains("nameservers")) { WEFT_ASSIGN_OR_RETURN(d.nameservers, StringList(j["nameservers"], "dns.nameservers")); }
  if (j.contains("search")) { WEFT_ASSIGN_OR_RETURN(d.search, StringList(j["search"], "dns.search")); }
  if (j.contains("options")) { WEFT_ASSIGN_OR_RETURN(d.options, StringList(j["options"], "dns.options")); }
  if (j.contains("domain")) {
    if (!j["domain"].is_string()) return Bad("dns.domain must be a string");
    d.domain = j["domain"].get<std::string>();
  }
  return d;
}

namespace {

// The result's cniVersion: its own, else the caller's, else 0.1.0 (which
// had none).
Result<std::string> DecodeVersion(const json& j, const std::string& fallback_version) {
  std::string version = fallback_version;
  if (j.contains("cniVersion")) {
    if (!j["cniVersion"].is_string()) return Bad("cniVersion must be a string");
    version = j["cniVersion"].get<std::string>();
  }
  if (version.empty()) version = "0.1.0";
  return version;
}

// A routes array (null: none), appended to `out`; `field` names it in errors.
Status DecodeRoutes(const json& routes, const std::string& field, std::vector<Route>* out) {
  if (routes.is_null()) return Status::Ok();
  if (!routes.is_array()) return Bad(field + " must be an array");
  for (const auto& rt : routes) {
    WEFT_ASSIGN_OR_RETURN(Route route, DecodeRoute(rt));
    out->push_back(route);
  }
  return Status::Ok();
}

// 0.1.0/0.2.0: one "ip4" and one "ip6" block, each with its own routes.
Status DecodeLegacyBlocks(const json& j, CniResult* r) {
  for (const char* k : {"ip4", "ip6"}) {
    if (!j.contains(k) || j[k].is_null()) continue;
    const json& b = j[k];
    if (!b.is_object()) return Bad(std::string(k) + " must be an object");
    if (!b.contains("ip")) return Bad(std::string(k) + " without ip");
    IpConfig c;
    WEFT_ASSIGN_OR_RETURN(c.address, Prefix(b["ip"], std::string(k) + ".ip"));
    if (b.contains("gateway") && !b["gateway"].is_null()) {
      WEFT_ASSIGN_OR_RETURN(IpAddress gw, Addr(b["gateway"], std::string(k) + ".gateway"));
      c.gateway = gw;
    }
    r->ips.push_back(c);
    if (b.contains("routes")) WEFT_RETURN_IF_ERROR(DecodeRoutes(b["routes"], std::string(k) + ".routes", &r->routes));
  }
  return Status::Ok();
}

// An optional string field of an interface.
Status InterfaceString(const json& o, const char* k, std::string* into) {
  if (!o.contains(k) || o[k].is_null()) return Status::Ok();
  if (!o[k].is_string()) return Bad(std::string("interface ") + k + " must be a string");
  *into = o[k].get<std::string>();
  return Status::Ok();
}

Result<Interface> DecodeInterface(const json& o) {
  if (!o.is_object() || !o.contains("name") || !o["name"].is_string())
    return Bad("each interface needs a string name");
  Interface i;
  i.name = o["name"].get<std::string>();
  WEFT_RETURN_IF_ERROR(InterfaceString(o, "mac", &i.mac));
  WEFT_RETURN_IF_ERROR(InterfaceString(o, "sandbox", &i.sandbox));
  WEFT_RETURN_IF_ERROR(InterfaceString(o, "socketPath", &i.socket_path));
  WEFT_RETURN_IF_ERROR(InterfaceString(o, "pciID", &i.pci_id));
  WEFT_ASSIGN_OR_RETURN(i.mtu, OptInt(o, "mtu"));
  return i;
}

// One entry of "ips"; its interface index must name one of the
// `interfaces` decoded before it.
Result<IpConfig> DecodeIp(const json& o, size_t interfaces) {
  if (!o.is_object() || !o.contains("address")) return Bad("each ip needs an address");
  IpConfig c;
  WEFT_ASSIGN_OR_RETURN(c.address, Prefix(o["address"], "ips.address"));
  if (o.contains("version") && o["version"].is_string()) {
    std::string v = o["version"].get<std::string>();
    if (v != "4" && v != "6") return Bad("ips.version must be \"4\" or \"6\"");
    if ((v == "6") != c.address.addr().is_v6()) return Bad("ips.version does not match the address");
  }
  if (o.contains("gateway") && !o["gateway"].is_null()) {
    WEFT_ASSIGN_OR_RETURN(IpAddress gw, Addr(o["gateway"], "ips.gateway"));
    c.gateway = gw;
  }
  WEFT_ASSIGN_OR_RETURN(c.interface, OptInt(o, "interface"));
  if (c.interface && (*c.interface < 0 || *c.interface >= static_cast<int>(interfaces)))
    return Bad("ips.interface " + std::to_string(*c.interface) + " is out of range");
  return c;
}

// 0.3.0 and later: interfaces, then ips (which refer to them), then routes.
Status DecodeCurrent(const json& j, CniResult* r) {
  if (j.contains("interfaces") && !j["interfaces"].is_null()) {
    if (!j["interfaces"].is_array()) return Bad("interfaces must be an array");
    for (const auto& o : j["interfaces"]) {
      WEFT_ASSIGN_OR_RETURN(Interface i, DecodeInterface(o));
      r->interfaces.push_back(i);
    }
  }
  if (j.contains("ips") && !j["ips"].is_null()) {
    if (!j["ips"].is_array()) return Bad("ips must be an array");
    for (const auto& o : j["ips"]) {
      WEFT_ASSIGN_OR_RETURN(IpConfig c, DecodeIp(o, r->interfaces.size()));
      r->ips.push_back(c);
    }
  }
  if (j.contains("routes")) return DecodeRoutes(j["routes"], "routes", &r->routes);
  return Status::Ok();
}

}  // namespace

Result<CniResult> DecodeResult(const json& j, const std::string& fallback_version) {
  if (!j.is_object()) return Bad("result must be a JSON object");
  CniResult r;
  WEFT_ASSIGN_OR_RETURN(std::string version, DecodeVersion(j, fallback_version));
  if (!IsSupported(version))
    return Status::Error(Reason::kUnsupported, Domain::kNone, "result has unsupported cniVersion \"" + version + "\"");
  r.cni_version = version;
  if (j.contains("dns")) { WEFT_ASSIGN_OR_RETURN(r.dns, DecodeDns(j["dns"])); }
  WEFT_RETURN_IF_ERROR(IsLegacy(version) ? DecodeLegacyBlocks(j, &r) : DecodeCurrent(j, &r));
  return r;
}

}  // namespace weft::cni
