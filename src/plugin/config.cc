#include "plugin/config.h"

#include "base/strings.h"

namespace weft::plugin {

using nlohmann::json;

namespace {

Status Invalid(const std::string& field, const std::string& why) {
  return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "invalid config: \"" + field + "\" " + why);
}

Result<std::vector<IpPrefix>> PrefixList(const json& j, const std::string& field) {
  if (!j.is_array()) return Invalid(field, "must be an array of CIDR strings");
  std::vector<IpPrefix> out;
  for (const auto& e : j) {
    if (!e.is_string()) return Invalid(field, "must be an array of CIDR strings");
    std::string s = e.get<std::string>();
    auto p = IpPrefix::Parse(s);
    if (!p) return Invalid(field, "has \"" + s + "\", which is not a CIDR (e.g. 10.244.2.0/24)");
    if (p->Masked() != *p)
      return Invalid(field, "has \"" + s + "\" with host bits set; did you mean " + p->Masked().ToString() + "?");
    out.push_back(*p);
  }
  return out;
}

// host-local's shapes: "ranges": [[{"subnet": ...}, ...], ...] and the older
// top-level "subnet". Anything else contributes nothing (other IPAM plugins).
Result<std::vector<IpPrefix>> IpamSubnets(const json& ipam) {
  std::vector<IpPrefix> out;
  auto add = [&](const json& s) -> Status {
    if (!s.is_string()) return Invalid("ipam", "has a non-string subnet");
    auto p = IpPrefix::Parse(s.get<std::string>());
    if (!p) return Invalid("ipam", "has subnet \"" + s.get<std::string>() + "\", which is not a CIDR");
    out.push_back(p->Masked());
    return Status::Ok();
  };
  if (ipam.contains("subnet")) WEFT_RETURN_IF_ERROR(add(ipam["subnet"]));
  if (ipam.contains("ranges") && ipam["ranges"].is_array())
    for (const auto& set : ipam["ranges"])
      if (set.is_array())
        for (const auto& r : set)
          if (r.is_object() && r.contains("subnet")) WEFT_RETURN_IF_ERROR(add(r["subnet"]));
  return out;
}

// An absolute path without "..".
Status AbsolutePath(const std::string& field, const std::string& path) {
  if (path.empty() || path[0] != '/') return Invalid(field, "must be an absolute path");
  for (auto part : Split(path, '/'))
    if (part == "..") return Invalid(field, "may not contain \"..\"");
  return Status::Ok();
}

Result<NetworkPolicyConfig> NetworkPolicy(const json& j) {
  constexpr const char* kKey = "networkPolicy";
  if (!j.is_object())
    return Invalid(kKey, "must be an object such as {\"namespacesFile\": \"/var/lib/weftd/netpol-namespaces\"}");
  NetworkPolicyConfig np;
  if (!j.contains("namespacesFile") || !j["namespacesFile"].is_string())
    return Invalid("networkPolicy.namespacesFile", "is required: the absolute path of the file weftd writes");
  np.namespaces_file = j["namespacesFile"].get<std::string>();
  WEFT_RETURN_IF_ERROR(AbsolutePath("networkPolicy.namespacesFile", np.namespaces_file));
  if (j.contains("pendingGroup") && !j["pendingGroup"].is_null()) {
    const json& g = j["pendingGroup"];
    constexpr const char* kRange = "must be an integer from 1 to 4294967295";
    // nlohmann keeps non-negative integers unsigned and negative ones signed.
    if (g.is_number_unsigned()) {
      uint64_t v = g.get<uint64_t>();
      if (v < 1 || v > UINT32_MAX) return Invalid("networkPolicy.pendingGroup", kRange);
      np.pending_group = static_cast<uint32_t>(v);
    } else {
      return Invalid("networkPolicy.pendingGroup", kRange);
    }
  }
  return np;
}

// "mode" and "bridge" (a bridge name without a mode means bridge mode).
Status ParseMode(const json& j, Config* c) {
  if (j.contains("mode") && !j["mode"].is_null()) {
    if (!j["mode"].is_string()) return Invalid("mode", "must be a string");
    std::string m = j["mode"].get<std::string>();
    if (m == "routed") {
      c->mode = Mode::kRouted;
    } else if (m == "bridge") {
      c->mode = Mode::kBridge;
    } else {
      return Invalid("mode", "is \"" + m + "\"; expected \"routed\" or \"bridge\"");
    }
  }
  if (j.contains("bridge") && !j["bridge"].is_null()) {
    if (!j["bridge"].is_string()) return Invalid("bridge", "must be a string");
    c->bridge = j["bridge"].get<std::string>();
    if (auto why = InterfaceNameProblem(c->bridge); !why.empty())
      return Invalid("bridge", "is not a valid interface name: it " + why);
    if (!j.contains("mode") || j["mode"].is_null()) c->mode = Mode::kBridge;
  }
  return Status::Ok();
}

Status ParseMtu(const json& j, Config* c) {
  if (!j.contains("mtu") || j["mtu"].is_null()) return Status::Ok();
  if (!j["mtu"].is_number_integer()) return Invalid("mtu", "must be an integer");
  long long m = j["mtu"].get<long long>();
  if (m < kMinMtu || m > kMaxMtu)
    return Invalid("mtu", "is " + std::to_string(m) + "; it must be between " + std::to_string(kMinMtu) + " and " +
                              std::to_string(kMaxMtu));
  c->mtu = static_cast<int>(m);
  return Status::Ok();
}

// "masquerade" and "masqueradeBackend".
Status ParseMasquerade(const json& j, Config* c) {
  if (j.contains("masquerade") && !j["masquerade"].is_null()) {
    if (!j["masquerade"].is_boolean()) return Invalid("masquerade", "must be true or false");
    c->masquerade = j["masquerade"].get<bool>();
  }
  if (j.contains("masqueradeBackend") && !j["masqueradeBackend"].is_null()) {
    if (!j["masqueradeBackend"].is_string()) return Invalid("masqueradeBackend", "must be a string");
    std::string b = j["masqueradeBackend"].get<std::string>();
    if (b == "nftables") c->masquerade_backend = FwBackend::kNftables;
    else if (b == "iptables") c->masquerade_backend = FwBackend::kIptables;
    else return Invalid("masqueradeBackend", "is \"" + b + "\"; expected \"nftables\" or \"iptables\"");
  }
  return Status::Ok();
}

Status ParseDataDir(const json& j, Config* c) {
  if (!j.contains("dataDir") || j["dataDir"].is_null()) return Status::Ok();
  if (!j["dataDir"].is_string()) return Invalid("dataDir", "must be a string");
  c->data_dir = j["dataDir"].get<std::string>();
  return AbsolutePath("dataDir", c->data_dir);
}

// The "ipam" section: Weft's own ("type": "weft") or a plugin to delegate
// to, whose subnets are noted when they are host-local's.
Status ParseIpam(const json& ipam, Config* c) {
  if (ipam.is_null()) return Status::Ok();
  if (!ipam.contains("type") || !ipam["type"].is_string() || ipam["type"].get<std::string>().empty())
    return Invalid("ipam", "needs a string \"type\" (an IPAM plugin in CNI_PATH, or \"weft\")");
  std::string t = ipam["type"].get<std::string>();
  if (t == kBuiltinIpamType) return Status::Ok();
  if (t.find('/') != std::string::npos || t == "." || t == "..")
    return Invalid("ipam", "has type \"" + t + "\", which is not a plugin name");
  c->delegated_ipam = t;
  WEFT_ASSIGN_OR_RETURN(c->ipam_subnets, IpamSubnets(ipam));
  return Status::Ok();
}

// Addresses no pod range may overlap: the kernel or the routed datapath
// gives them a meaning of their own.
struct ReservedBlock {
  const char* prefix;
  const char* why;
};
constexpr ReservedBlock kReservedBlocks[] = {
    {"127.0.0.0/8", "loopback"},
    {"169.254.0.0/16", "link-local (the routed gateway 169.254.1.1 is in it)"},
    {"224.0.0.0/4", "multicast"},
    {"::1/128", "loopback"},
    {"fe80::/10", "link-local (the routed gateway fe80::1 is in it)"},
    {"ff00::/8", "multicast"},
    // A pod with ::ffff:10.0.0.5 would be 10.0.0.5 to every IPv4 socket: an
    // overlap across families that comparing same-family ranges misses.
    {"::ffff:0:0/96", "IPv4-mapped; write the IPv4 range itself"},
};

// "ranges": required with the built-in IPAM, never overlapping one another
// or a reserved block. REQUIRES: the mtu is parsed.
Status ParseRanges(const json& j, Config* c) {
  if (j.contains("ranges") && !j["ranges"].is_null()) {
    WEFT_ASSIGN_OR_RETURN(c->ranges, PrefixList(j["ranges"], "ranges"));
  }
  if (c->ranges.empty() && c->delegated_ipam.empty())
    return Invalid("ranges", "must list at least one pod CIDR, e.g. [\"10.244.2.0/24\"]");
  for (const IpPrefix& r : c->ranges) {
    for (const ReservedBlock& b : kReservedBlocks) {
      const IpPrefix block = *IpPrefix::Parse(b.prefix);
      if (r.Overlaps(block))
        return Invalid("ranges", "has " + r.ToString() + ", which overlaps " + b.prefix + " (" + b.why + ")");
    }
    if (!r.is_v4() && c->mtu != 0 && c->mtu < kMinIpv6Mtu)
      return Invalid("ranges", "has the IPv6 range " + r.ToString() + " but \"mtu\" is " + std::to_string(c->mtu) +
                                   ", below IPv6's minimum of " + std::to_string(kMinIpv6Mtu));
  }
  for (size_t a = 0; a < c->ranges.size(); ++a)
    for (size_t b = a + 1; b < c->ranges.size(); ++b)
      if (c->ranges[a].Overlaps(c->ranges[b]))
        return Invalid("ranges", "has overlapping ranges " + c->ranges[a].ToString() + " and " +
                                     c->ranges[b].ToString());
  return Status::Ok();
}

// "gateways": at most one per family, each inside "ranges" (when given).
Status ParseGateways(const json& j, Config* c) {
  if (!j.contains("gateways") || j["gateways"].is_null()) return Status::Ok();
  if (!j["gateways"].is_array()) return Invalid("gateways", "must be an array of IP addresses");
  for (const auto& g : j["gateways"]) {
    auto a = g.is_string() ? IpAddress::Parse(g.get<std::string>()) : std::nullopt;
    if (!a) return Invalid("gateways", "must be an array of IP addresses");
    bool inside = c->ranges.empty();
    for (const auto& r : c->ranges)
      if (r.Contains(*a)) inside = true;
    if (!inside) return Invalid("gateways", "has " + a->ToString() + ", which is in none of \"ranges\"");
    for (const auto& o : c->gateways)
      if (o.is_v4() == a->is_v4()) return Invalid("gateways", "may hold one address per family");
    c->gateways.push_back(*a);
  }
  return Status::Ok();
}

// "ipsToRouteViaHost" (addresses or CIDRs) and "clusterCIDRs".
Status ParseHostRoutes(const json& j, Config* c) {
  if (j.contains("ipsToRouteViaHost") && !j["ipsToRouteViaHost"].is_null()) {
    const json& v = j["ipsToRouteViaHost"];
    if (!v.is_array()) return Invalid("ipsToRouteViaHost", "must be an array of IP addresses");
    for (const auto& e : v) {
      std::string s = e.is_string() ? e.get<std::string>() : std::string();
      std::optional<IpPrefix> p;
      if (auto a = IpAddress::Parse(s)) p = IpPrefix(*a, a->family_bits());
      else p = IpPrefix::Parse(s);
      if (!p) return Invalid("ipsToRouteViaHost", "has \"" + s + "\", which is not an IP address or CIDR");
      c->route_via_host.push_back(p->Masked());
    }
  }
  if (j.contains("clusterCIDRs") && !j["clusterCIDRs"].is_null()) {
    WEFT_ASSIGN_OR_RETURN(c->cluster_cidrs, PrefixList(j["clusterCIDRs"], "clusterCIDRs"));
  }
  return Status::Ok();
}

// "logFile" and "logLevel".
Status ParseLogging(const json& j, Config* c) {
  if (j.contains("logFile") && !j["logFile"].is_null()) {
    if (!j["logFile"].is_string()) return Invalid("logFile", "must be a string");
    c->log_file = j["logFile"].get<std::string>();
    if (!c->log_file.empty()) WEFT_RETURN_IF_ERROR(AbsolutePath("logFile", c->log_file));
  }
  if (j.contains("logLevel") && !j["logLevel"].is_null()) {
    if (!j["logLevel"].is_string() || !log::ParseLevel(j["logLevel"].get<std::string>(), &c->log_level))
      return Invalid("logLevel", "must be one of debug, info, warn, error, off");
  }
  return Status::Ok();
}

// REQUIRES: the mode is parsed.
Status ParseNetworkPolicy(const json& j, Config* c) {
  if (!j.contains("networkPolicy") || j["networkPolicy"].is_null()) return Status::Ok();
  WEFT_ASSIGN_OR_RETURN(c->network_policy, NetworkPolicy(j["networkPolicy"]));
  // Bridged pods of one node talk through the bridge without ever reaching
  // the inet forward hook weftd filters in: their policies could not hold.
  if (c->mode == Mode::kBridge)
    return Invalid("networkPolicy", "is not supported in bridge mode: traffic between pods on the same "
                                    "bridge never reaches the forward hook where policies are enforced; "
                                    "use \"mode\": \"routed\"");
  return Status::Ok();
}

}  // namespace

// Fields in a fixed order: the first invalid one is the error.
Result<Config> ParseConfig(const cni::NetConf& net) {
  Config c;
  c.net = net;
  const json& j = net.raw;
  WEFT_RETURN_IF_ERROR(ParseMode(j, &c));
  WEFT_RETURN_IF_ERROR(ParseMtu(j, &c));
  WEFT_RETURN_IF_ERROR(ParseMasquerade(j, &c));
  WEFT_RETURN_IF_ERROR(ParseDataDir(j, &c));
  WEFT_RETURN_IF_ERROR(ParseIpam(net.ipam, &c));
  WEFT_RETURN_IF_ERROR(ParseRanges(j, &c));
  WEFT_RETURN_IF_ERROR(ParseGateways(j, &c));
  WEFT_RETURN_IF_ERROR(ParseHostRoutes(j, &c));
  WEFT_RETURN_IF_ERROR(ParseLogging(j, &c));
  WEFT_RETURN_IF_ERROR(ParseNetworkPolicy(j, &c));
  return c;
}

std::string HostVethName(const std::string& container_id, const std::string& ifname) {
  return "wft" + Hex(Fnv1a64(container_id + "/" + ifname), 12);
}

std::string PodMac(const std::string& host_ifname) {
  const uint64_t h = Fnv1a64("mac/" + host_ifname);
  std::string mac(6, '\0');
  mac[0] = 0x0a;  // locally administered (bit 1), unicast (bit 0 clear)
  for (int i = 1; i < 6; ++i) mac[static_cast<size_t>(i)] = static_cast<char>((h >> (8 * (i - 1))) & 0xff);
  return mac;
}

std::string MacString(const std::string& mac) {
  std::string s;
  for (unsigned char c : mac) s += (s.empty() ? "" : ":") + Hex(c, 2);
  return s;
}

}  // namespace weft::plugin
