#pragma once
// The pod's datapath, one object per mode (routed.h, bridge.h; the plugin
// picks one by the config's mode, weft_plugin.cc): what ADD
// builds in the kernel for an attachment, what CHECK verifies and what the
// result reports. Both modes are a veth pair with the pod end placed
// straight into the pod netns; the steps they share (creating the pair,
// reading the host end back, CHECK's "is it there and up" and "is the
// address on it") are written once, in VethDatapath.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "cni/result.h"
#include "ipam/store.h"
#include "plugin/config.h"
#include "sys/netlink.h"
#include "sys/netns.h"

namespace weft::plugin {

// What the ADD sequence (add.h) asks of a datapath. A seam: add_test drives
// the sequence with a fake.
class Datapath {
 public:
  virtual ~Datapath() = default;

  // Creates the veth pair, the host end in interface group `host_group` (0:
  // the default group) from its creation on. Already-exists naming the end whose
  // name is in use. After a failure nothing of the pair exists.
  virtual Status CreateLinks(uint32_t host_group) = 0;
  // Configures both ends (and what the mode needs besides: in bridge mode
  // the bridge) for `rec`. `ipam_routes`: a delegated IPAM plugin's routes,
  // nullopt with the built-in IPAM. Crash points add-after-pod-side and
  // add-after-host-side, in the mode's order.
  // REQUIRES: CreateLinks succeeded.
  virtual Status Attach(const ipam::PodRecord& rec, const std::optional<std::vector<cni::Route>>& ipam_routes) = 0;
  // The interfaces, ips and routes of the ADD result.
  // REQUIRES: Attach succeeded.
  virtual cni::CniResult Result() const = 0;
  // The interface DNAT'd localhost traffic leaves by (route_localnet goes on
  // it when the pod has hostPorts).
  virtual std::string LocalnetDevice() const = 0;
  // CHECK: the kernel holds what Attach built for `rec` (its routes as weft
  // chose them; a delegated plugin's routes are not recorded). A mismatch
  // naming the first difference.
  virtual Status Check(const ipam::PodRecord& rec) = 0;
};

// The kernel handles and names one attachment's datapath works with. The
// referenced objects outlive the datapath.
struct DatapathContext {
  sys::Netlink& host;        // a socket in the node's netns
  sys::Netlink& pod;         // a socket in the pod's netns
  const sys::Netns& pod_ns;  // where CreateLinks puts the pod end
  std::string netns;         // CNI_NETNS, the result's sandbox
  std::string host_ifname, ifname;
  int mtu = 0;  // the veth's MTU (ADD; unused by CHECK)
};

// The result's entry for `link`; `sandbox` is the netns, for the pod end.
cni::Interface ResultInterface(const sys::LinkInfo& link, const std::string& sandbox = "");

// The MTU of the host's default-route interface, or 1500.
int DeriveMtu(sys::Netlink& host);

// The steps both modes share.
class VethDatapath : public Datapath {
 public:
  Status CreateLinks(uint32_t host_group) override;

 protected:
  VethDatapath(const Config& cfg, const DatapathContext& ctx) : cfg_(cfg), ctx_(ctx) {}

  // (weft::Result: inside the class, Result names Datapath::Result().)
  // The host end as the kernel has it now (failed, kernel, when it vanished).
  weft::Result<sys::LinkInfo> ReadHostLink();
  // CHECK: the link `name` exists and is up, else a mismatch
  // "<what> is missing<where>" / "<what> is down<where>".
  static weft::Result<sys::LinkInfo> RequireLinkUp(sys::Netlink& nl, const std::string& name,
                                                   const std::string& what, const std::string& where = "");
  // CHECK: the pod end (`pod_link`) carries `want`; `exact_prefix` also
  // compares the prefix length (bridge mode) and names the prefix rather
  // than the address in the message.
  Status RequirePodAddress(const sys::LinkInfo& pod_link, const IpPrefix& want, bool exact_prefix);

  const Config& cfg_;
  DatapathContext ctx_;
};

}  // namespace weft::plugin
