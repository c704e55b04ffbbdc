#include "plugin/config.h"

#include "base/strings.h"

namespace weft::plugin {

using nlohmann::json;

namespace {

Status Invalid(const std::string& field, const std::string& why) {
  return Status::Error(Code::kInvalidConfig, "invalid config: \"" + field + "\" " + why);
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

}  // namespace

Result<Config> ParseConfig(const cni::NetConf& net) {
  Config c;
  c.net = net;
  const json& j = net.raw;
  if (j.contains("mode") && !j["mode"].is_null()) {
    if (!j["mode"].is_string()) return Invalid("mode", "must be a string");
    std::string m = j["mode"].get<std::string>();
    if (m == "routed") {
      c.mode = Mode::kRouted;
    } else if (m == "bridge") {
      return Invalid("mode", "is \"bridge\", which this build does not support yet; use \"routed\"");
    } else {
      return Invalid("mode", "is \"" + m + "\"; expected \"routed\" or \"bridge\"");
    }
  }
  if (j.contains("mtu") && !j["mtu"].is_null()) {
    if (!j["mtu"].is_number_integer()) return Invalid("mtu", "must be an integer");
    long long m = j["mtu"].get<long long>();
    if (m < kMinMtu || m > kMaxMtu)
      return Invalid("mtu", "is " + std::to_string(m) + "; it must be between " + std::to_string(kMinMtu) +
                                " and " + std::to_string(kMaxMtu));
    c.mtu = static_cast<int>(m);
  }
  if (j.contains("masquerade") && !j["masquerade"].is_null()) {
    if (!j["masquerade"].is_boolean()) return Invalid("masquerade", "must be true or false");
    c.masquerade = j["masquerade"].get<bool>();
  }
  if (j.contains("masqueradeBackend") && !j["masqueradeBackend"].is_null()) {
    if (!j["masqueradeBackend"].is_string()) return Invalid("masqueradeBackend", "must be a string");
    std::string b = j["masqueradeBackend"].get<std::string>();
    if (b == "nftables") c.masquerade_backend = FwBackend::kNftables;
    else if (b == "iptables") c.masquerade_backend = FwBackend::kIptables;
    else return Invalid("masqueradeBackend", "is \"" + b + "\"; expected \"nftables\" or \"iptables\"");
  }
  if (j.contains("dataDir") && !j["dataDir"].is_null()) {
    if (!j["dataDir"].is_string()) return Invalid("dataDir", "must be a string");
    c.data_dir = j["dataDir"].get<std::string>();
    if (c.data_dir.empty() || c.data_dir[0] != '/') return Invalid("dataDir", "must be an absolute path");
    bool dotdot = false;
    for (auto part : Split(c.data_dir, '/'))
      if (part == "..") dotdot = true;
    if (dotdot)
      return Invalid("dataDir", "may not contain \"..\"");
  }
  if (j.contains("ranges") && !j["ranges"].is_null()) {
    WEFT_ASSIGN_OR_RETURN(c.ranges, PrefixList(j["ranges"], "ranges"));
  }
  if (c.ranges.empty()) return Invalid("ranges", "must list at least one pod CIDR, e.g. [\"10.244.2.0/24\"]");
  for (size_t a = 0; a < c.ranges.size(); ++a)
    for (size_t b = a + 1; b < c.ranges.size(); ++b)
      if (c.ranges[a].Overlaps(c.ranges[b]))
        return Invalid("ranges", "has overlapping ranges " + c.ranges[a].ToString() + " and " +
                                     c.ranges[b].ToString());
  if (j.contains("clusterCIDRs") && !j["clusterCIDRs"].is_null()) {
    WEFT_ASSIGN_OR_RETURN(c.cluster_cidrs, PrefixList(j["clusterCIDRs"], "clusterCIDRs"));
  }
  if (j.contains("logFile") && !j["logFile"].is_null()) {
    if (!j["logFile"].is_string()) return Invalid("logFile", "must be a string");
    c.log_file = j["logFile"].get<std::string>();
    if (!c.log_file.empty() && c.log_file[0] != '/') return Invalid("logFile", "must be an absolute path");
  }
  if (j.contains("logLevel") && !j["logLevel"].is_null()) {
    if (!j["logLevel"].is_string() || !log::ParseLevel(j["logLevel"].get<std::string>(), &c.log_level))
      return Invalid("logLevel", "must be one of debug, info, warn, error, off");
  }
  return c;
}

std::string HostVethName(const std::string& container_id, const std::string& ifname) {
  return "wft" + Hex(Fnv1a64(container_id + "/" + ifname), 12);
}

}  // namespace weft::plugin
