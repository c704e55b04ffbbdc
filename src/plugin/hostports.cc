#include "plugin/hostports.h"

#include <map>
#include <optional>
#include <utility>

namespace weft::plugin {

std::vector<fw::HostPortRule> HostPortRulesOf(const ipam::PodRecord& pod, const std::vector<ipam::PortMapping>& maps) {
  std::vector<fw::HostPortRule> out;
  for (const auto& m : maps) {
    std::optional<IpAddress> hip;
    if (!m.host_ip.empty()) hip = IpAddress::Parse(m.host_ip);
    for (const auto& addr : {pod.ip_v4, pod.ip_v6}) {
      if (!addr || (hip && hip->is_v4() != addr->is_v4())) continue;
      out.push_back({m.host_ip, m.host_port, m.protocol, *addr, m.container_port});
    }
  }
  return out;
}

Result<std::vector<fw::HostPortRule>> DesiredHostPorts(ipam::Store& store) {
  WEFT_ASSIGN_OR_RETURN(auto maps, store.ListPortMappings());
  std::vector<fw::HostPortRule> out;
  if (maps.empty()) return out;
  WEFT_ASSIGN_OR_RETURN(auto pods, store.ListPods(""));
  std::map<std::pair<std::string, std::string>, const ipam::PodRecord*> by_key;
  for (const auto& p : pods)
    if (p.state != ipam::kStateDeleting) by_key[{p.container_id, p.ifname}] = &p;
  for (const auto& m : maps) {
    auto it = by_key.find({m.container_id, m.ifname});
    if (it == by_key.end()) continue;
    auto rules = HostPortRulesOf(*it->second, {m});
    out.insert(out.end(), rules.begin(), rules.end());
  }
  return out;
}

std::unique_ptr<fw::HostPortFirewall> HostPortsFor(FwBackend backend, const std::string& data_dir) {
  return backend == FwBackend::kIptables ? fw::NewIptablesHostPorts(data_dir) : fw::NewNftHostPorts(data_dir);
}

Status SyncHostPorts(FwBackend backend, const std::string& data_dir, ipam::Store& store) {
  auto fw = HostPortsFor(backend, data_dir);
  Status st = fw->Sync([&] { return DesiredHostPorts(store); });
  return st.Prefix("hostPorts");
}

Status AddHostPorts(FwBackend backend, const std::string& data_dir, ipam::Store& store, const ipam::PodRecord& pod) {
  WEFT_ASSIGN_OR_RETURN(auto maps, store.PortMappingsOf(pod.container_id, pod.ifname));
  const auto mine = HostPortRulesOf(pod, maps);
  auto fw = HostPortsFor(backend, data_dir);
  Status st = fw->Add(mine, [&] { return DesiredHostPorts(store); });
  return st.Prefix("hostPorts");
}

Status VerifyHostPorts(FwBackend backend, const std::string& data_dir, ipam::Store& store,
                       const ipam::PodRecord& pod) {
  WEFT_ASSIGN_OR_RETURN(auto maps, store.PortMappingsOf(pod.container_id, pod.ifname));
  if (maps.empty()) return Status::Ok();
  auto fw = HostPortsFor(backend, data_dir);
  WEFT_ASSIGN_OR_RETURN(std::string missing, fw->Verify(HostPortRulesOf(pod, maps)));
  if (missing.empty()) return Status::Ok();
  return Status::Error(Reason::kMismatch, Domain::kFirewall,
                       "hostPorts of " + pod.container_id + "/" + pod.ifname + " not in place: " + missing);
}

}  // namespace weft::plugin
