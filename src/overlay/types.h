#pragma once
// The vocabulary shared by the control planes, the reconciler and the
// datapath: a node as the cluster sees it. Plain values, no I/O.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"

namespace weft::overlay {

enum class Backend { kVxlan, kHostGw, kAuto };

// "vxlan", "host-gw", "auto".
const char* BackendName(Backend b);
bool ParseBackend(const std::string& s, Backend* out);

// One node's network identity as published in the control plane.
struct NodeInfo {
  std::string name;
  std::vector<IpPrefix> pod_cidrs;  // IPv4 first when present
  std::optional<IpAddress> host_ip;  // underlay address (VXLAN remote, host-gw next hop)
  std::string vtep_mac;              // empty when the node runs no VXLAN device
  std::string backend;               // what the node says it runs ("" if unknown)
  // Its IPv6 underlay address when it has one (host-gw next hop for its IPv6
  // pod CIDR; equal to host_ip on an IPv6-only underlay).
  std::optional<IpAddress> host_ip6;
  // The MAC of its uplink ("" when it does not say): what its host-gw
  // packets come from (the overlay filter binds its pod CIDRs to it).
  std::string host_mac;
  bool operator==(const NodeInfo&) const = default;
};

// The node's underlay address of one family: host_ip when it is of that
// family, else (IPv6) host_ip6. What a peer's route or FDB entry of that
// family points at.
std::optional<IpAddress> UnderlayAddress(const NodeInfo& n, bool v6);

// Peers by node name. std::map keeps iteration (and so every derived plan)
// deterministic.
using PeerMap = std::map<std::string, NodeInfo>;

// What this node publishes about itself before it has a pod CIDR.
struct LocalNode {
  std::string name;
  IpAddress host_ip;
  std::string vtep_mac;  // empty for host-gw
  Backend backend = Backend::kVxlan;
  std::optional<IpAddress> host_ip6;  // the uplink's IPv6 address, if any
  std::string host_mac;               // the uplink's MAC
};

}  // namespace weft::overlay
