#include "plugin/runtime_config.h"

#include <algorithm>
#include <cctype>

#include "base/ip.h"

namespace weft::plugin {

using nlohmann::json;

namespace {

Status Invalid(const std::string& field, const std::string& why) {
  return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "invalid config: \"" + field + "\" " + why);
}

bool Declared(const cni::NetConf& net, const char* cap) {
  return net.capabilities.is_object() && net.capabilities.contains(cap) && net.capabilities[cap].is_boolean() &&
         net.capabilities[cap].get<bool>();
}

// The value of `lower` or its capitalised spelling; null when neither.
const json* Field(const json& o, const char* lower, const char* upper) {
  if (o.contains(lower) && !o[lower].is_null()) return &o[lower];
  if (o.contains(upper) && !o[upper].is_null()) return &o[upper];
  return nullptr;
}

Result<int> Port(const json& o, const char* lower, const char* upper, int index, bool allow_zero) {
  const std::string field = std::string("runtimeConfig.portMappings[") + std::to_string(index) + "]." + lower;
  const json* v = Field(o, lower, upper);
  if (!v) {
    if (allow_zero) return 0;
    return Invalid(field, "is required");
  }
  if (!v->is_number_integer()) return Invalid(field, "must be an integer");
  long long p = v->get<long long>();
  if (p < (allow_zero ? 0 : 1) || p > 65535) return Invalid(field, "is " + std::to_string(p) + "; it must be 1-65535");
  return static_cast<int>(p);
}

Result<std::vector<std::string>> Strings(const json& o, const char* key) {
  std::vector<std::string> out;
  if (!o.contains(key) || o[key].is_null()) return out;
  if (!o[key].is_array()) return Invalid(std::string("runtimeConfig.dns.") + key, "must be an array of strings");
  for (const auto& e : o[key]) {
    if (!e.is_string()) return Invalid(std::string("runtimeConfig.dns.") + key, "must be an array of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

Result<RuntimeOptions> ParseRuntimeConfig(const cni::NetConf& net) {
  RuntimeOptions out;
  const json& rc = net.runtime_config;
  if (!rc.is_object()) return out;
  if (Declared(net, "portMappings") && rc.contains("portMappings") && !rc["portMappings"].is_null()) {
    const json& pm = rc["portMappings"];
    if (!pm.is_array()) return Invalid("runtimeConfig.portMappings", "must be an array");
    int i = 0;
    for (const auto& e : pm) {
      const std::string at = "runtimeConfig.portMappings[" + std::to_string(i) + "]";
      if (!e.is_object()) return Invalid(at, "must be an object");
      PortMap m;
      WEFT_ASSIGN_OR_RETURN(m.host_port, Port(e, "hostPort", "HostPort", i, /*allow_zero=*/true));
      WEFT_ASSIGN_OR_RETURN(m.container_port, Port(e, "containerPort", "ContainerPort", i, false));
      m.protocol = "tcp";
      if (const json* p = Field(e, "protocol", "Protocol")) {
        if (!p->is_string()) return Invalid(at + ".protocol", "must be a string");
        m.protocol = p->get<std::string>();
        std::transform(m.protocol.begin(), m.protocol.end(), m.protocol.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (m.protocol.empty()) m.protocol = "tcp";
        if (m.protocol != "tcp" && m.protocol != "udp" && m.protocol != "sctp")
          return Invalid(at + ".protocol", "is \"" + p->get<std::string>() + "\"; expected tcp, udp or sctp");
      }
      if (const json* h = Field(e, "hostIP", "HostIP")) {
        if (!h->is_string()) return Invalid(at + ".hostIP", "must be a string");
        std::string s = h->get<std::string>();
        if (!s.empty()) {
          auto a = IpAddress::Parse(s);
          if (!a) return Invalid(at + ".hostIP", "is \"" + s + "\", which is not an IP address");
          m.host_ip = a->is_unspecified() ? "" : a->ToString();
        }
      }
      ++i;
      if (m.host_port == 0) continue;
      if (std::find(out.port_mappings.begin(), out.port_mappings.end(), m) == out.port_mappings.end())
        out.port_mappings.push_back(m);
    }
  }
  if (Declared(net, "dns") && rc.contains("dns") && !rc["dns"].is_null()) {
    const json& d = rc["dns"];
    if (!d.is_object()) return Invalid("runtimeConfig.dns", "must be an object");
    cni::Dns dns;
    WEFT_ASSIGN_OR_RETURN(dns.nameservers, Strings(d, "servers"));
    WEFT_ASSIGN_OR_RETURN(dns.search, Strings(d, "searches"));
    WEFT_ASSIGN_OR_RETURN(dns.options, Strings(d, "options"));
    if (d.contains("domain") && d["domain"].is_string()) dns.domain = d["domain"].get<std::string>();
    if (!dns.empty()) out.dns = dns;
  }
  return out;
}

cni::Dns EffectiveDns(const cni::Dns& config, const std::optional<cni::Dns>& runtime, const cni::Dns& ipam) {
  if (runtime && !runtime->empty()) return *runtime;
  if (!config.empty()) return config;
  return ipam;
}

}  // namespace weft::plugin
