#pragma once
// Routed mode (Calico's model): a veth pair, the pod address as /32 (/128),
// in the pod a scope-link route to the gateway 169.254.1.1 (fe80::1) and the
// default route via it; on the host end proxy ARP, no IPv4 address, and a
// host route to the pod.

#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "cni/result.h"
#include "sys/netlink.h"
#include "sys/netns.h"

namespace weft::plugin {

inline constexpr const char* kGatewayV4 = "169.254.1.1";
inline constexpr const char* kGatewayV6 = "fe80::1";

struct PodAddrs {
  std::optional<IpAddress> v4, v6;
  // Further destinations routed via the gateway (ipsToRouteViaHost, IPAM
  // routes); only those of a family the pod has an address in are used.
  std::vector<IpPrefix> extra_routes;
};

// Creates the veth pair with the peer directly inside the pod netns, the
// host end in interface group `host_group` (0: the default group) from its
// creation on. EEXIST on either end becomes kNameTaken naming which end.
Status CreateVethPair(sys::Netlink& host, sys::Netlink& pod, const sys::Netns& pod_ns,
                      const std::string& host_ifname, const std::string& ifname, int mtu,
                      uint32_t host_group = 0);

// Pod side: up, address(es), gateway and default routes, and a permanent
// neighbour entry for the gateway pointing at the host end's MAC (no ARP
// round trip, and no dependency on the node having a route to 169.254.1.1).
Result<sys::LinkInfo> ConfigurePodSide(sys::Netlink& pod, const std::string& ifname, const PodAddrs& a,
                                       const std::string& host_mac);

// Host side: up with proxy ARP (and zero proxy delay), the link-local IPv6
// gateway, and a host route per pod address.
// REQUIRES: `host_link` was just read from the kernel.
Result<sys::LinkInfo> ConfigureHostSide(sys::Netlink& host, sys::LinkInfo host_link, const PodAddrs& a);

// Verifies both ends against what ADD built. kCheckFailed describes the
// first difference.
Status CheckRouted(sys::Netlink& host, sys::Netlink& pod, const std::string& host_ifname,
                   const std::string& ifname, const PodAddrs& a);

// The interfaces/ips/routes part of the result.
cni::CniResult RoutedResult(const sys::LinkInfo& host, const sys::LinkInfo& pod, const std::string& netns,
                            const PodAddrs& a);

// The MTU of the host's default-route interface, or 1500.
int DeriveMtu(sys::Netlink& host);

}  // namespace weft::plugin
