#pragma once
// The level-triggered core: from the peers the control plane reports and
// what this node is, compute the routes, ARP and FDB entries the kernel
// should hold, and the difference to what it holds. Pure: no syscalls, so
// it is unit-tested without root.

#include <string>
#include <vector>

#include "agent/types.h"
#include "sys/netlink.h"

namespace weft::agent {

// This node, as the reconciler needs it.
struct LocalView {
  std::string name;
  IpPrefix pod_cidr;                      // IPv4 pod CIDR of this node
  IpAddress host_ip;
  Backend backend = Backend::kVxlan;
  int vxlan_index = 0;                    // 0 when there is no VXLAN device
  int uplink_index = 0;
  std::vector<IpPrefix> uplink_subnets;   // on-link prefixes of the uplink
};

// The kernel entries Weft owns. Routes carry protocol kRouteProtoWeft and a
// gateway (the plugin's per-pod routes carry the same protocol but never a
// gateway); neighbours and FDB entries are those on our VXLAN device.
struct KernelState {
  std::vector<sys::RouteSpec> routes;
  std::vector<sys::NeighSpec> arp;
  std::vector<sys::NeighSpec> fdb;
};

// Whether a route from a kernel dump belongs to the agent.
bool IsAgentRoute(const sys::RouteSpec& r);

struct Desired {
  KernelState state;
  size_t vxlan_peers = 0;
  size_t direct_peers = 0;
  // "node: reason" for peers left out (no MAC yet, not on link, overlap...).
  std::vector<std::string> skipped;
};

Desired ComputeDesired(const LocalView& local, const PeerMap& peers);

// Applied in this order so a route never points at an unresolved neighbour
// and traffic to a peer that stays is never interrupted: fdb_adds,
// arp_upserts, route_upserts, route_deletes, arp_deletes, fdb_deletes.
struct Plan {
  std::vector<sys::NeighSpec> fdb_adds;
  std::vector<sys::NeighSpec> arp_upserts;
  std::vector<sys::RouteSpec> route_upserts;  // add or replace (same dst)
  std::vector<sys::RouteSpec> route_deletes;
  std::vector<sys::NeighSpec> arp_deletes;
  std::vector<sys::NeighSpec> fdb_deletes;
  size_t size() const {
    return fdb_adds.size() + arp_upserts.size() + route_upserts.size() + route_deletes.size() +
           arp_deletes.size() + fdb_deletes.size();
  }
  bool empty() const { return size() == 0; }
};

Plan Diff(const KernelState& want, const KernelState& have);

// Lower-case "aa:bb:cc:dd:ee:ff", or "" when `mac` is not a unicast MAC.
std::string NormalizeMac(const std::string& mac);

}  // namespace weft::agent
