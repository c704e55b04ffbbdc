#include "agent/keeper.h"

#include <linux/netfilter.h>
#include <sys/socket.h>

#include "fw/source_guard.h"
#include "overlay/filter.h"
#include "services/proxy_table.h"
#include "sys/netlink.h"

namespace weft::agent {

WakeFor Classify(const sys::KernelEvent& e, const KeptNames& n) {
  using Kind = sys::KernelEvent::Kind;
  WakeFor w;
  switch (e.kind) {
    case Kind::kLink:
      // The VXLAN device deleted or set down.
      if (!n.vxlan_device.empty() && e.name == n.vxlan_device && (e.deleted || !e.up)) w.node = true;
      break;
    case Kind::kRoute:
      // Weft's routes: a peer's (with a gateway) or a pod's host route.
      if (e.deleted && e.protocol == sys::kRouteProtoWeft) (e.gateway ? w.node : w.pods) = true;
      break;
    case Kind::kAddress:
      // A VTEP address deleted; an IPv6 address on a link (a port whose
      // IPv6 was turned back on gets its link-local one).
      if (e.deleted && n.vxlan_index != 0 && e.index == n.vxlan_index) w.node = true;
      if (!e.deleted && e.family == AF_INET6 && e.index != n.vxlan_index) w.pods = true;
      break;
    case Kind::kNetconf:
      if (e.index > 0 && e.proxy_arp == 0) w.pods = true;
      break;
    case Kind::kNftTable:
    case Kind::kNftChain:
    case Kind::kNftRule:
      if (!e.deleted) break;
      if (e.family == NFPROTO_NETDEV && (e.table == fw::kGuardTable || e.table == fw::kBridgeGuardTable)) w.pods = true;
      if (e.family == NFPROTO_INET && e.table == "weft-netpol" &&
          !(n.own_netpol_commit && n.own_netpol_commit(e.portid)))
        w.netpol = true;
      if (e.family == NFPROTO_INET && e.table == services::kTable &&
          !(n.own_services_commit && n.own_services_commit(e.portid)))
        w.services = true;
      if (e.family == NFPROTO_INET && (e.table == overlay::kOverlayTable || e.table == n.masquerade_table))
        w.node = true;
      break;
  }
  return w;
}

void RepairCounter::Add(const std::string& object, uint64_t n) {
  std::lock_guard lock(mu_);
  counts_[object] += n;
}

std::string RepairCounter::Render(const std::map<std::string, uint64_t>& extra) const {
  std::map<std::string, uint64_t> all;
  // Every object weftd keeps is listed from the start, at 0.
  for (const char* o : {"pod-route", "pod-proxy-arp", "pod-ipv6-off", "guard-table", "guard-chain", "overlay-filter"})
    all[o] = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& [k, v] : counts_) all[k] += v;
  }
  for (const auto& [k, v] : extra) all[k] += v;
  std::string out =
      "# HELP weft_repairs_total Kernel objects of Weft that weftd found missing on this node and put back.\n"
      "# TYPE weft_repairs_total counter\n";
  for (const auto& [k, v] : all) out += "weft_repairs_total{object=\"" + k + "\"} " + std::to_string(v) + "\n";
  return out;
}

}  // namespace weft::agent
