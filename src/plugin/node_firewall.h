#pragma once
// ADD's firewall steps on the node (AddFirewall, add.h): the source guard
// (the mode's table, and the pod's port bound in it), the masquerade
// through the configured backend, the pod's own hostPort entries (its
// mappings as recorded in the database, hostports.h), and the UDP conntrack
// flush for them. Also the source guard's repairs that GC and doctor share
// (RebindPorts, PruneGuardOfNode).

#include <string>

#include "fw/masquerade.h"
#include "fw/source_guard.h"
#include "ipam/store.h"
#include "plugin/add.h"
#include "plugin/config.h"
#include "sys/netlink.h"

namespace weft::plugin {

class NodeFirewall : public AddFirewall {
 public:
  // `cfg` and `store` outlive this object.
  NodeFirewall(const Config& cfg, ipam::Store& store) : cfg_(cfg), store_(store) {}

  Status EnsureSourceGuard() override;
  Status BindSources(const ipam::PodRecord& rec) override;
  Status EnsureMasquerade(const ipam::PodRecord& rec) override;
  Status SyncHostPorts(const ipam::PodRecord& rec, const std::string& localnet_dev) override;
  Status FlushUdpConntrack(const ipam::PodRecord& rec) override;

 private:
  const Config& cfg_;
  ipam::Store& store_;
};

// The source guard of `mode` as ADD needs it: its shared chains installed
// unless their marker is in place (fw::EnsureGuard, serialised by
// `lock_dir`/firewall.lock); when they were, every attachment's port in
// `store` bound again (RebindPorts) and the guard of an earlier release
// retired. `applied` (optional): whether the table was installed.
Status EnsureGuardOfNode(fw::GuardMode mode, const std::string& lock_dir, ipam::Store& store,
                         bool* applied = nullptr);

// Binds the port of every attachment in `store` whose link is on the node
// and of `mode` (a bridge port or a routed veth) in the mode's source guard
// (one transaction): after the table was created anew, or by doctor --fix.
// Returns how many ports were bound.
Result<size_t> RebindPorts(ipam::Store& store, fw::GuardMode mode);

// GC's and doctor's repair of the source guard: fw::PruneGuard against the
// links `nl` lists now. Returns how many chains and elements went.
Result<size_t> PruneGuardOfNode(sys::Netlink& nl);

// The source guard's binding of an attachment's port.
fw::PortBinding GuardBinding(fw::GuardMode mode, const ipam::PodRecord& rec);

// The source guard's table for the config's mode.
fw::GuardMode GuardModeOf(const Config& cfg);

// The masquerade's sources: the configured ranges, the delegated IPAM's
// subnets, or (for an IPAM plugin whose config names none) the pod's subnet.
fw::MasqueradeSpec MasqSpec(const Config& cfg, const ipam::PodRecord& rec);

}  // namespace weft::plugin
