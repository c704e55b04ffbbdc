#pragma once
// Bridge mode (seed 000, the reference bridge plugin's model): the host end
// of each pod's veth is a port of a node bridge (hairpin on) that carries the
// gateway address of the pod subnet; the pod gets its address with the
// subnet's prefix length and routes via that gateway.
//
// Every step tolerates a concurrent ADD doing the same thing first: creating
// the bridge and adding the gateway treat EEXIST as success once the kernel
// confirms what exists is what was wanted.

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

struct BridgeAddrs {
  std::optional<IpPrefix> v4, v6;  // pod address with the subnet's prefix length
  std::optional<IpAddress> gw4, gw6;
  // Routes for the pod; a route without `gw` goes via its family's gateway.
  std::vector<cni::Route> routes;
};

// The bridge, created when missing (racing creators both succeed), with
// `mtu` applied when non-zero, and up. A conflict when `name` is another kind.
Result<sys::LinkInfo> EnsureBridge(sys::Netlink& host, const std::string& name, int mtu);
// Puts `gw` (gateway/prefix length) on the bridge unless it is there already.
// A conflict when the address sits on another interface.
Status EnsureBridgeAddress(sys::Netlink& host, const sys::LinkInfo& bridge, const IpPrefix& gw);
// Host end: enslaved to the bridge, hairpin on, up.
Result<sys::LinkInfo> ConfigureBridgePort(sys::Netlink& host, sys::LinkInfo host_link, const sys::LinkInfo& bridge);
// Pod end: up, addresses (IPv6 without DAD), routes.
Result<sys::LinkInfo> ConfigureBridgePodSide(sys::Netlink& pod, const std::string& ifname, const BridgeAddrs& a);
// interfaces: [bridge, host end, pod end]; ips point at the pod end.
cni::CniResult BridgeResult(const sys::LinkInfo& bridge, const sys::LinkInfo& host, const sys::LinkInfo& pod,
                            const std::string& netns, const BridgeAddrs& a);

// The default gateway of a subnet: its first usable address.
IpAddress FirstUsable(const IpPrefix& subnet);

// The bridge's gateway for `addr` with the built-in IPAM: the configured one
// of its family, else the first usable address of the range holding it.
std::optional<IpAddress> BridgeGateway(const Config& cfg, const IpPrefix& addr);

// Bridge mode's plan for `rec`: its addresses and gateways (the record's,
// else BridgeGateway's), and routes: `ipam_routes` (a delegated plugin's),
// or with the built-in IPAM (nullopt) a default route per family; then
// `ipsToRouteViaHost`.
BridgeAddrs BridgePlan(const Config& cfg, const ipam::PodRecord& rec,
                       const std::optional<std::vector<cni::Route>>& ipam_routes);

class BridgeDatapath : public VethDatapath {
 public:
  BridgeDatapath(const Config& cfg, const DatapathContext& ctx) : VethDatapath(cfg, ctx) {}
  // The bridge (created when missing) with the gateways and forwarding on,
  // the host end as its port (crash point add-after-host-side), then the pod
  // side (add-after-pod-side).
  Status Attach(const ipam::PodRecord& rec, const std::optional<std::vector<cni::Route>>& ipam_routes) override;
  cni::CniResult Result() const override;
  std::string LocalnetDevice() const override { return cfg_.bridge; }
  Status Check(const ipam::PodRecord& rec) override;

 private:
  BridgeAddrs plan_;
  sys::LinkInfo bridge_link_, host_link_, pod_link_;
};

}  // namespace weft::plugin
