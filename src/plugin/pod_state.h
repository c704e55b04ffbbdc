#pragma once
// The per-pod kernel state ADD creates, kept after ADD (issue 34): weftd
// checks it on kernel events and on its resync and puts back what is
// missing; `weftctl doctor` names the same pieces and --fix repairs them.
// The desired state is the plugin's: the database's attachments (rows in
// state ready whose host veth is on the node) rendered by the code ADD uses
// (HostRoute, GuardBinding, fw::EnsureGuard/BindPorts), so weftd, doctor and
// a concurrent ADD always write the same objects and never fight.
//
// The pieces, per attachment (routed mode unless said):
//   pod-route      the host route to each of the pod's addresses via its
//                  host veth (both families, protocol 201)
//   pod-proxy-arp  proxy ARP on the host veth (IPv4 pods)
//   pod-ipv6-off   IPv6 off on the host veth (IPv4-only pods; bridge ports
//                  always)
//   guard-chain    the port's chain in the source guard (both modes)
// and per node, for each mode some attachment uses:
//   guard-table    the source guard's table with its shared chains (its
//                  marker); repairing it binds every port again, as the ADD
//                  that finds the table gone does
//
// Rows in state adding or deleting are left alone: their ADD or DEL is
// still at work on them (or GC finishes them). A port a DEL removes between
// the read and a repair makes that repair fail harmlessly (no such device);
// a guard chain it leaves on Linux 6.16+ (where a netdev chain outlives its
// device) is pruned by the same pass, as GC prunes it.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "fw/source_guard.h"
#include "ipam/store.h"
#include "sys/netlink.h"

namespace weft::plugin {

// One missing piece.
struct PodRepair {
  std::string object;   // the list above: weft_repairs_total's label
  std::string subject;  // "<containerID>/<ifname>", or the table for guard-table
  std::string what;     // plain words: "host route 10.244.0.2/32 dev wft0123456789ab"
  fw::GuardMode mode = fw::GuardMode::kRouted;
  int link_index = 0;
  std::string port;                     // the host veth
  std::optional<sys::RouteSpec> route;  // pod-route
  fw::PortBinding binding;              // guard-chain
};

// What the kernel holds, as PlanPodRepairs compares it.
struct PodKernelView {
  std::vector<sys::LinkInfo> links;
  std::vector<sys::RouteSpec> routes;  // the main table, both families
  // Sysctl key -> its value; a key that could not be read is absent (and
  // not compared: a kernel without IPv6 has no disable_ipv6).
  std::map<std::string, std::string> sysctls;
  bool guard_installed[2] = {false, false};  // [routed, bridge]: the shared chains' marker is in place
  std::set<std::string> bound[2];            // ports with a chain in each mode's table
};

// The sysctls PlanPodRepairs compares for `rows` whose veth is in `links`.
std::vector<std::string> PodSysctlKeys(const std::vector<ipam::PodRecord>& rows,
                                       const std::vector<sys::LinkInfo>& links);

// Pure: the missing pieces, node-wide ones (guard-table) first.
std::vector<PodRepair> PlanPodRepairs(const std::vector<ipam::PodRecord>& rows, const PodKernelView& k);

// Reads what PlanPodRepairs needs for `rows` through `nl` and the nftables
// netlink reads. REQUIRES: the calling thread is in the node's netns.
Result<PodKernelView> ReadPodKernel(sys::Netlink& nl, const std::vector<ipam::PodRecord>& rows);

struct PodRepairResult {
  PodRepair repair;
  Status status;  // OK: put back
};

// Puts each piece back with ADD's own calls (a route replace, SetUp with
// proxy ARP, DisableIpv6, BindPorts; a guard table as
// NodeFirewall::EnsureSourceGuard, then the chains of ports gone pruned).
// `lock_dir` holds firewall.lock (the plugin's dataDir). After a guard
// repair the result ends with one entry of object "guard-prune" (no piece
// put back: the status of pruning the chains of ports gone).
std::vector<PodRepairResult> ApplyPodRepairs(sys::Netlink& nl, ipam::Store& store, const std::string& lock_dir,
                                             const std::vector<PodRepair>& plan);

struct KeepOptions {
  std::string data_dir = "/var/lib/weft";
  std::string network;  // only rows of this CNI network; "" = every network
};

// The rows of `first` that are ready there and in `second` (the same
// attachment read again later). Pure.
std::vector<ipam::PodRecord> ReadyInBoth(std::vector<ipam::PodRecord> first,
                                        const std::vector<ipam::PodRecord>& second);

// One pass: the rows, the kernel, the rows again (ReadyInBoth: a DEL under
// way is no repair), the plan, the repairs. A missing database
// is nothing to keep (and nothing is created). Errors: the database or the
// kernel cannot be read; a repair that fails is in its result.
Result<std::vector<PodRepairResult>> KeepPodState(const KeepOptions& opts);

}  // namespace weft::plugin
