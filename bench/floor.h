#pragma once
// The kernel floor of one routed ADD: exactly the kernel work a routed pod
// needs and nothing else (no config, no IPAM, no result): a veth pair made in
// one RTM_NEWLINK with the peer placed into the pod netns, the pod side up
// with its /32, a link route to the gateway and a default route, the host side
// up with proxy ARP, and the host route to the pod.

#include <string>

#include "base/ip.h"
#include "base/status.h"
#include "sys/netlink.h"

namespace weft::bench {

inline constexpr char kFloorGateway[] = "169.254.1.1";

// `host` is a socket in the node netns. Opens the pod netns itself (as a
// plugin must) and a socket inside it.
Status FloorAdd(sys::Netlink& host, const std::string& pod_netns_path, const std::string& host_ifname,
                const IpAddress& pod_ip, int mtu);

}  // namespace weft::bench
