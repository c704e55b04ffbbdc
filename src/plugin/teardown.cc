#include "plugin/teardown.h"

#include <algorithm>
#include <map>

#include "base/crash_point.h"
#include "sys/netns.h"

namespace weft::plugin {

Result<std::vector<fw::HostPortRule>> DesiredHostPorts(ipam::Store& store) {
  WEFT_ASSIGN_OR_RETURN(auto maps, store.ListPortMappings());
  std::vector<fw::HostPortRule> out;
  if (maps.empty()) return out;
  WEFT_ASSIGN_OR_RETURN(auto pods, store.ListPods(""));
  std::map<std::pair<std::string, std::string>, const ipam::PodRecord*> by_key;
  for (const auto& p : pods) by_key[{p.container_id, p.ifname}] = &p;
  for (const auto& m : maps) {
    auto it = by_key.find({m.container_id, m.ifname});
    if (it == by_key.end()) continue;
    std::optional<IpAddress> hip;
    if (!m.host_ip.empty()) hip = IpAddress::Parse(m.host_ip);
    for (const auto& addr : {it->second->ip_v4, it->second->ip_v6}) {
      if (!addr || (hip && hip->is_v4() != addr->is_v4())) continue;
      out.push_back({m.host_ip, m.host_port, m.protocol, *addr, m.container_port});
    }
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

namespace {

Result<bool> HasPortMappings(ipam::Store& store, const std::string& cid, const std::string& ifname) {
  WEFT_ASSIGN_OR_RETURN(auto maps, store.ListPortMappings());
  return std::any_of(maps.begin(), maps.end(),
                     [&](const ipam::PortMapping& m) { return m.container_id == cid && m.ifname == ifname; });
}

}  // namespace

Status Teardown(sys::Netlink& host, ipam::Store& store, FwBackend backend, const std::string& data_dir,
                const DelegatedIpam* delegated, const DelegateCall& call, const TeardownTarget& t) {
  if (t.row) {
    // Attachments without mappings (the common case) do no firewall work.
    bool resync = t.row->state == ipam::kStateDeleting;
    if (!resync) {
      WEFT_ASSIGN_OR_RETURN(resync, HasPortMappings(store, t.container_id, t.ifname));
    }
    if (resync) {
      Status st = store.BeginDelete(t.container_id, t.ifname);
      if (!st.ok()) return st.Prefix("mark attachment deleting");
      WEFT_CRASH_POINT("del-after-unmap");
      WEFT_RETURN_IF_ERROR(SyncHostPorts(backend, data_dir, store));
      WEFT_CRASH_POINT("del-after-hostports");
    }
  }
  if (t.delete_link) {
    // The kernel takes ~15 ms to unregister a veth (RCU grace periods):
    // copy the WAL into the database meanwhile, so the Release below
    // restarts it and the next plugin process opens a short one.
    ipam::BackgroundCheckpoint checkpoint(store.db().path());
    Status st = host.DeleteLink(t.host_ifname);
    if (!st.ok()) return st.Prefix("delete " + t.host_ifname);
  }
  WEFT_CRASH_POINT("del-after-link-delete");
  if (delegated) WEFT_RETURN_IF_ERROR(delegated->Del(call));
  WEFT_CRASH_POINT("del-before-release");
  Status st = store.Release(t.container_id, t.ifname);
  if (!st.ok()) return st.Prefix("release address");
  WEFT_CRASH_POINT("del-after-release");
  return Status::Ok();
}

bool AttachmentVanished(sys::Netlink& host, const ipam::PodRecord& row) {
  if (!row.netns.empty()) {
    auto ns = sys::Netns::Open(row.netns);
    if (ns.ok()) return false;
    // kUnknownContainer: no such path; kInvalidEnv from a failed ioctl or a
    // non-netns file. EACCES and the like are not proof of absence.
    const int err = ns.status().sys_errno();
    const bool gone = ns.status().code() == Code::kUnknownContainer ||
                      (ns.status().code() == Code::kInvalidEnv && err == 0);
    if (!gone) return false;
  }
  auto link = host.GetLink(row.host_ifname);
  return link.ok() && !link->has_value();
}

}  // namespace weft::plugin
