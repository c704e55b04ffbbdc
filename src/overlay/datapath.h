#pragma once
// The kernel side of the agent: the uplink, the VXLAN device, and reading and
// applying the reconciler's KernelState in the agent's own network
// namespace: routes, ARP and FDB entries through one rtnetlink socket, the
// overlay filter's and the host-gw check's set elements (filter.h) over
// nfnetlink.

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "overlay/reconcile.h"
#include "sys/netlink.h"

namespace weft::overlay {

struct Uplink {
  int index = 0;
  std::string name;
  int mtu = 0;
  IpAddress ip;                    // the node IP: VXLAN local, host-gw next hop for peers
  std::optional<IpAddress> ip6;    // its IPv6 address, if any (== ip on an IPv6-only underlay)
  std::vector<IpPrefix> subnets;   // its on-link prefixes, both families
  std::string mac;                 // its MAC ("" on a device without one)
};

// Finds the uplink: `iface` if given, else the interface carrying the node
// IP(s) if given, else the IPv4 default route's interface, else the IPv6
// default route's. `node_ip` is "", one address, or one per family
// ("192.0.2.11,2001:db8::11", as kubelet's --node-ip); the first is the node
// IP. Without one, the node IP is the uplink's first global IPv4 address,
// else its first global IPv6 address; the IPv6 address is the given one or
// the uplink's first global IPv6 address.
Result<Uplink> DetectUplink(sys::Netlink& nl, const std::string& iface, const std::string& node_ip);

struct VxlanSpec {
  std::string name = "weft.1";
  uint32_t vni = 1;
  int port = 8472;
  IpAddress local;  // IPv4 or IPv6 (the peers' FDB remotes are of its family)
  int underlay_index = 0;
  int mtu = 0;
};

// Creates the device (learning off) or keeps an existing one so a restart
// never disturbs traffic; fixes its MTU and brings it up. Returns its link.
Result<sys::LinkInfo> EnsureVxlan(sys::Netlink& nl, const VxlanSpec& spec);

// Reads and changes the kernel. Separate from the pure reconciler so the
// agent loop can be driven by a fake in tests.
class Datapath {
 public:
  virtual ~Datapath() = default;
  virtual Result<KernelState> Read() = 0;
  // Applies every step it can; returns the first error (the next resync
  // retries the rest) and counts failures in *errors.
  virtual Status Apply(const Plan& plan, int* errors) = 0;
};

// The VXLAN encapsulation's cost on an underlay of the family: outer IP,
// UDP, VXLAN and inner Ethernet headers (50 bytes over IPv4, 70 over IPv6).
inline int VxlanOverhead(bool underlay_v6) { return underlay_v6 ? 70 : 50; }

// `vxlan_index` 0: no VXLAN device (host-gw), so no neighbours are read.
// Reads and writes routes of both families.
std::unique_ptr<Datapath> NewKernelDatapath(sys::Netlink nl, int vxlan_index);

}  // namespace weft::overlay
