#include "agent/conflist.h"

#include <nlohmann/json.hpp>

#include "sys/files.h"

namespace weft::agent {

std::string RenderConflist(const ConflistSpec& spec) {
  using nlohmann::json;
  json weft{{"type", "weft"}};
  json ranges = json::array();
  for (const auto& r : spec.ranges) ranges.push_back(r.ToString());
  weft["ranges"] = ranges;
  if (spec.mtu > 0) weft["mtu"] = spec.mtu;
  // The agent owns the node-wide masquerade; the plugin adds none per pod.
  weft["masquerade"] = false;
  if (!spec.cluster_cidrs.empty()) {
    json c = json::array();
    for (const auto& r : spec.cluster_cidrs) c.push_back(r.ToString());
    weft["clusterCIDRs"] = c;
  }
  if (!spec.data_dir.empty()) weft["dataDir"] = spec.data_dir;
  if (!spec.log_file.empty()) weft["logFile"] = spec.log_file;
  if (!spec.log_level.empty()) weft["logLevel"] = spec.log_level;
  // hostPorts are weft's own (one node-wide ruleset derived from its
  // database), so the capability is declared on weft and no portmap plugin
  // is chained: pods without mappings do no firewall work at all.
  if (spec.port_mappings) weft["capabilities"] = {{"portMappings", true}};
  if (spec.network_policy)
    weft["networkPolicy"] = {{"namespacesFile", spec.netpol_namespaces_file},
                             {"pendingGroup", spec.netpol_pending_group}};
  json plugins = json::array({weft});
  json conf{{"cniVersion", spec.cni_version}, {"name", spec.network_name}, {"plugins", plugins}};
  return conf.dump(2) + "\n";
}

Status WriteConflist(const std::string& dir, const std::string& name, const std::string& content, bool* changed) {
  if (changed) *changed = false;
  std::string path = dir + "/" + name;
  if (auto cur = sys::ReadFile(path, 1 << 20); cur.ok() && *cur == content) return Status::Ok();
  WEFT_RETURN_IF_ERROR(sys::MkdirAll(dir, 0755));
  WEFT_RETURN_IF_ERROR(sys::WriteFileAtomic(path, content, 0644));
  if (changed) *changed = true;
  return Status::Ok();
}

Status InstallPlugin(const std::string& src, const std::string& bin_dir, const std::string& name, bool* changed) {
  if (changed) *changed = false;
  WEFT_ASSIGN_OR_RETURN(std::string data, sys::ReadFile(src, 256u << 20));
  std::string path = bin_dir + "/" + name;
  if (auto cur = sys::ReadFile(path, 256u << 20); cur.ok() && *cur == data) return Status::Ok();
  WEFT_RETURN_IF_ERROR(sys::MkdirAll(bin_dir, 0755));
  WEFT_RETURN_IF_ERROR(sys::WriteFileAtomic(path, data, 0755));
  if (changed) *changed = true;
  return Status::Ok();
}

}  // namespace weft::agent
