#include "plugin/add.h"

#include "base/log.h"
#include "plugin/pending.h"
#include "sys/crash_point.h"

namespace weft::plugin {

ipam::PodRecord AddRequest::Record() const {
  ipam::PodRecord rec;
  rec.container_id = container_id;
  rec.ifname = ifname;
  rec.network = cfg.net.name;
  rec.netns = netns;
  rec.host_ifname = host_ifname;
  rec.pod_name = pod_name;
  rec.pod_namespace = pod_namespace;
  rec.pod_uid = pod_uid;
  rec.mtu = mtu;
  return rec;
}

std::vector<ipam::PortMapping> PortMappingsFor(const AddRequest& req, const ipam::PodRecord& rec) {
  std::vector<ipam::PortMapping> maps;
  const auto& to = rec.ip_v4 ? rec.ip_v4 : rec.ip_v6;
  if (!to) return maps;
  for (const auto& m : req.rt.port_mappings)
    maps.push_back({m.host_ip, m.host_port, m.protocol, to->addr().ToString(), m.container_port, req.container_id,
                    req.ifname});
  return maps;
}

Result<cni::CniResult> RunAdd(const AddRequest& req, const AddSteps& steps, PhaseTimer& timer) {
  const Config& cfg = req.cfg;
  WEFT_ASSIGN_OR_RETURN(Allocation alloc, steps.ipam.Allocate(req.Record()));
  const ipam::PodRecord& rec = alloc.rec;
  timer.Mark("ipam");
  // From here on the row exists: any failure (or a crash, finished later by
  // DEL or GC) undoes everything through the same ordered teardown.
  bool link_created = false;
  ScopeGuard teardown([&] { steps.teardown(link_created); });
  alloc.undo.Dismiss();
  WEFT_CRASH_POINT("add-after-reserve");

  // hostPorts: claimed in the database before any kernel work, so a conflict
  // fails the ADD with nothing else changed.
  const std::vector<ipam::PortMapping> maps = PortMappingsFor(req, rec);
  WEFT_RETURN_IF_ERROR(steps.ipam.ClaimPorts(rec, maps));
  WEFT_CRASH_POINT("add-after-portmaps");

  // NetworkPolicy (routed mode only): the namespaces file is read as late as
  // possible, and the group is part of the link's creation, so there is no
  // moment (nor a crash point) where the pod's veth exists outside it.
  const uint32_t host_group = HostVethGroup(cfg.network_policy, rec.pod_namespace);
  // The source guard is in force before the interface exists (one netlink
  // read when it is, as it nearly always is).
  WEFT_RETURN_IF_ERROR(steps.firewall.EnsureSourceGuard());
  WEFT_RETURN_IF_ERROR(steps.datapath.CreateLinks(host_group));
  link_created = true;
  WEFT_RETURN_IF_ERROR(steps.firewall.BindSources(rec));
  timer.Mark("veth");
  WEFT_CRASH_POINT("add-after-veth");
  WEFT_RETURN_IF_ERROR(steps.datapath.Attach(rec, alloc.routes));
  timer.Mark("interfaces");

  if (cfg.masquerade) WEFT_RETURN_IF_ERROR(steps.firewall.EnsureMasquerade(rec));
  WEFT_CRASH_POINT("add-after-masquerade");
  // Pods without mappings do no firewall work at all here.
  if (!maps.empty()) {
    WEFT_RETURN_IF_ERROR(steps.firewall.SyncHostPorts(rec, steps.datapath.LocalnetDevice()));
    WEFT_CRASH_POINT("add-after-hostports");
    WEFT_RETURN_IF_ERROR(steps.firewall.FlushUdpConntrack(rec));
  }
  timer.Mark("firewall");
  WEFT_CRASH_POINT("add-before-ready");
  WEFT_RETURN_IF_ERROR(steps.ipam.MarkReady(rec));
  teardown.Dismiss();
  timer.Mark("ready");
  WEFT_CRASH_POINT("add-after-ready");

  cni::CniResult result = steps.datapath.Result();
  result.dns = EffectiveDns(cfg.net.dns, req.rt.dns, alloc.dns);
  WEFT_LOG(kInfo, "attached", {"ip", rec.ip_v4 ? rec.ip_v4->ToString() : std::string()},
           {"ip6", rec.ip_v6 ? rec.ip_v6->ToString() : std::string()}, {"host_if", req.host_ifname},
           {"pending_group", host_group});
  return result;
}

}  // namespace weft::plugin
