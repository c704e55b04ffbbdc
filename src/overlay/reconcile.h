#pragma once
// The level-triggered core: from the peers the control plane reports and
// what this node is, compute the routes, ARP and FDB entries, the overlay
// filter's admissions and the host-gw check's entries (filter.h) the kernel
// should hold, and the difference to what it holds. Pure: no syscalls, so
// it is unit-tested without root.

#include <string>
#include <vector>

#include "overlay/filter.h"
#include "overlay/types.h"
#include "sys/netlink.h"

namespace weft::overlay {

// This node, as the reconciler needs it.
struct LocalView {
  std::string name;
  std::vector<IpPrefix> pod_cidrs;        // at most one per family; a peer's CIDR of a family
                                          // this node has none of is not routed
  IpAddress host_ip;                      // the underlay address: the VXLAN device's local
                                          // (IPv4, or IPv6 on an IPv6-only underlay)
  std::optional<IpAddress> host_ip6;      // the uplink's IPv6 address, if any
  Backend backend = Backend::kVxlan;
  int vxlan_index = 0;                    // 0 when there is no VXLAN device
  int uplink_index = 0;
  std::string uplink_name;                // the host-gw check's interface
  std::vector<IpPrefix> uplink_subnets;   // on-link prefixes of the uplink (both families)
};

// The kernel entries Weft owns. Routes carry protocol kRouteProtoWeft and a
// gateway (the plugin's per-pod routes carry the same protocol but never a
// gateway); neighbours and FDB entries are those on our VXLAN device.
struct KernelState {
  std::vector<sys::RouteSpec> routes;
  std::vector<sys::NeighSpec> arp;
  std::vector<sys::NeighSpec> fdb;
  // The overlay filter's admissions (filter.h), when there is a VXLAN device.
  std::vector<FilterEntry> filter;
  // The host-gw check's elements (filter.h), unless the backend is vxlan.
  std::vector<HostGwEntry> hostgw;
};

// Whether a route from a kernel dump belongs to the agent.
bool IsAgentRoute(const sys::RouteSpec& r);

// The metric (RTA_PRIORITY) of the IPv4 route to a peer's pod CIDR: the
// CIDR's network number (10.244.3.0/24 -> 0x0af403 = 717827); for IPv6 the
// kernel's default metric (1024), which the kernel reports back in dumps.
// Only one route has each destination, so the metric chooses nothing; it is
// there because the kernel keys its table of IPv4 route "infos" (gateway,
// device, metric, protocol, ...) by everything but the gateway: with one
// metric, every peer route lands in one hash chain and adding N of them
// costs O(N^2) comparisons (5000 peers: ~1 s of kernel time on this VM;
// with distinct metrics ~0.15 s). docs/performance.md, "weftd: memory and convergence".
inline constexpr int kIpv6DefaultRouteMetric = 1024;
int PeerRoutePriority(const IpPrefix& cidr);

// Counts: a dual-stack peer has a route per family, each through VXLAN or
// direct, so vxlan_routes + direct_routes may exceed `peers`.
struct Desired {
  KernelState state;
  size_t peers = 0;          // peers with at least one route
  size_t peers_v4 = 0;       // peers whose IPv4 pod CIDR is routed
  size_t peers_v6 = 0;       // peers whose IPv6 pod CIDR is routed
  size_t vxlan_peers = 0;    // peer routes through the VXLAN device
  size_t direct_peers = 0;   // peer routes via the peer's host IP (host-gw)
  // "node: reason" for peers left out (no MAC yet, not on link, overlap...).
  std::vector<std::string> skipped;
};

// Per peer and pod CIDR family (IPv4 and IPv6 alike):
//   VXLAN   route `cidr via cidr.first dev <vxlan> onlink metric M` (M: PeerRoutePriority), permanent neighbour
//           `cidr.first lladdr <peer MAC> dev <vxlan>`, FDB `<peer MAC> dst
//           <peer's underlay address of the local VTEP's family>` (one per MAC+dst);
//   direct  route `cidr via <peer's host address of cidr's family> dev <uplink>`
//           when that address is on one of the uplink's subnets (host-gw, auto).
// With a VXLAN device, the overlay filter's admissions (filter.h): each
// underlay address the peer publishes (host_ip, host_ip6) may send VXLAN,
// carrying sources inside each pod CIDR of the peer's that is routed (a
// CIDR overlapping another node's, or skipped, admits nothing) and its own
// underlay addresses (a hostNetwork server's replies to this node's pods). With the
// host-gw or auto backend (and an uplink name), the host-gw check's
// elements: each of this node's pod CIDRs checked on the uplink, and each
// CIDR routed directly to a peer that published its uplink MAC checked and
// bound to that MAC.
Desired ComputeDesired(const LocalView& local, const PeerMap& peers);

// Applied in this order so a route never points at an unresolved neighbour
// and traffic to a peer that stays is never interrupted: the filter's
// deletes and adds (one transaction), fdb_adds, arp_upserts, route_upserts,
// route_deletes, arp_deletes, fdb_deletes.
// The overlay filter's changes come first, in one transaction: a peer that
// leaves is refused before its routes go, one that joins is admitted
// before traffic to it can leave.
struct Plan {
  std::vector<FilterEntry> filter_deletes;
  std::vector<FilterEntry> filter_adds;
  std::vector<HostGwEntry> hostgw_deletes;
  std::vector<HostGwEntry> hostgw_adds;
  std::vector<sys::NeighSpec> fdb_adds;
  std::vector<sys::NeighSpec> arp_upserts;
  std::vector<sys::RouteSpec> route_upserts;  // add or replace (same dst)
  std::vector<sys::RouteSpec> route_deletes;
  std::vector<sys::NeighSpec> arp_deletes;
  std::vector<sys::NeighSpec> fdb_deletes;
  size_t size() const {
    return filter_deletes.size() + filter_adds.size() + hostgw_deletes.size() + hostgw_adds.size() + fdb_adds.size() + arp_upserts.size() + route_upserts.size() + route_deletes.size() +
           arp_deletes.size() + fdb_deletes.size();
  }
  bool empty() const { return size() == 0; }
};

// Routes are keyed by destination and metric: a route to a wanted
// destination with another metric (one an older weftd added with metric 0) is
// deleted once the wanted one is in.
Plan Diff(const KernelState& want, const KernelState& have);

// Lower-case "aa:bb:cc:dd:ee:ff", or "" when `mac` is not a unicast MAC.
std::string NormalizeMac(const std::string& mac);

}  // namespace weft::overlay
