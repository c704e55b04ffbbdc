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
#include "ipam/store.h"
#include "plugin/config.h"
#include "plugin/datapath.h"
#include "sys/netlink.h"

namespace weft::plugin {

inline constexpr const char* kGatewayV4 = "169.254.1.1";
inline constexpr const char* kGatewayV6 = "fe80::1";

struct PodAddrs {
  std::optional<IpAddress> v4, v6;
  // Further destinations routed via the gateway (ipsToRouteViaHost, IPAM
  // routes); only those of a family the pod has an address in are used.
  std::vector<IpPrefix> extra_routes;
};

// Pod side: up, address(es), gateway and default routes, and a permanent
// neighbour entry for the gateway pointing at the host end's MAC (no ARP
// round trip, and no dependency on the node having a route to 169.254.1.1).
Result<sys::LinkInfo> ConfigurePodSide(sys::Netlink& pod, const std::string& ifname, const PodAddrs& a,
                                       const std::string& host_mac);

// The host route to a pod's address `addr` via its host veth `index`
// (protocol 201; scope link for IPv4): what ConfigureHostSide installs and
// weftd keeps (pod_state.h).
sys::RouteSpec HostRoute(const IpAddress& addr, int index);

// Host side: up with proxy ARP (and zero proxy delay), the link-local IPv6
// gateway, and a host route per pod address.
// REQUIRES: `host_link` was just read from the kernel.
Result<sys::LinkInfo> ConfigureHostSide(sys::Netlink& host, sys::LinkInfo host_link, const PodAddrs& a);

// The interfaces/ips/routes part of the result.
cni::CniResult RoutedResult(const sys::LinkInfo& host, const sys::LinkInfo& pod, const std::string& netns,
                            const PodAddrs& a);

// Routed mode's plan for `rec`: its addresses and, besides the default
// routes, `ipsToRouteViaHost` and the IPAM plugin's non-default routes.
PodAddrs RoutedPlan(const Config& cfg, const ipam::PodRecord& rec, const std::vector<cni::Route>& ipam_routes);

class RoutedDatapath : public VethDatapath {
 public:
  RoutedDatapath(const Config& cfg, const DatapathContext& ctx) : VethDatapath(cfg, ctx) {}
  // Pod side (crash point add-after-pod-side), then host side
  // (add-after-host-side).
  Status Attach(const ipam::PodRecord& rec, const std::optional<std::vector<cni::Route>>& ipam_routes) override;
  cni::CniResult Result() const override;
  std::string LocalnetDevice() const override { return ctx_.host_ifname; }
  Status Check(const ipam::PodRecord& rec) override;

 private:
  PodAddrs plan_;
  sys::LinkInfo host_link_, pod_link_;
};

}  // namespace weft::plugin
