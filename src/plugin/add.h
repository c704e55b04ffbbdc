#pragma once
// The ADD sequence, top to bottom as the reference ptp plugin's cmdAdd reads:
//
//   allocate  the addresses, and the row in state "adding"  (AddIpam)
//   arm       the teardown (teardown.h), before the kernel is touched
//   claim     the hostPorts in the database
//   guard     the node's source guard, before any pod interface exists
//   attach    the veth pair (its host port bound in the guard, both
//             modes), pod side and host side                  (Datapath)
//   firewall  the masquerade and the hostPort rules          (AddFirewall)
//   ready     the row; the teardown is disarmed
//
// with the crash points of docs/reliability.md between the steps. Every
// step is behind a seam, so add_test drives the sequence and its rollback
// without root; WeftPlugin::CmdAdd parses, opens the kernel handles and
// the database, and passes the real steps.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/phase_timer.h"
#include "base/scope_guard.h"
#include "base/status.h"
#include "cni/result.h"
#include "ipam/store.h"
#include "plugin/config.h"
#include "plugin/datapath.h"
#include "plugin/runtime_config.h"

namespace weft::plugin {

// An ADD, parsed and validated.
struct AddRequest {
  Config cfg;
  RuntimeOptions rt;
  std::string container_id, ifname, netns;
  std::string host_ifname;  // HostVethName(container_id, ifname)
  std::string pod_name, pod_namespace, pod_uid;  // CNI_ARGS K8S_POD_*
  int mtu = 0;  // the veth's: the config's, else the uplink's

  // The row to allocate: everything but addresses and gateways.
  ipam::PodRecord Record() const;
};

// What the IPAM handed out.
struct Allocation {
  ipam::PodRecord rec;  // the row as written, state "adding"
  // A delegated IPAM plugin's routes and DNS; nullopt routes with the
  // built-in IPAM (the datapath chooses default routes).
  std::optional<std::vector<cni::Route>> routes;
  cni::Dns dns;
  // Undoes the allocation while nothing else exists (a delegated plugin's
  // lease, the row). ADD dismisses it once the teardown is armed: the
  // teardown releases all of it from then on.
  ScopeGuard undo;
};

// The attachment's addresses and its row in weft's database.
class AddIpam {
 public:
  virtual ~AddIpam() = default;
  // Reserves the pod's addresses (built-in IPAM) or gets them from the
  // delegated plugin, and writes the row in state "adding". On failure
  // nothing is left allocated.
  virtual Result<Allocation> Allocate(const ipam::PodRecord& want) = 0;
  // Claims hostPorts (a conflict naming the owner); no-op for none.
  virtual Status ClaimPorts(const ipam::PodRecord& rec, const std::vector<ipam::PortMapping>& maps) = 0;
  // The last step: the row becomes "ready".
  virtual Status MarkReady(const ipam::PodRecord& rec) = 0;
};

// The node's firewall as ADD uses it. Level-triggered: every call makes the
// kernel match the database (and the config), so repeating one is safe.
class AddFirewall {
 public:
  virtual ~AddFirewall() = default;
  // The node-wide source guard of the config's mode (fw/source_guard.h):
  // in place before the pod's interface exists, so no packet of it is ever
  // judged without it.
  virtual Status EnsureSourceGuard() = 0;
  // Bridge mode: binds the pod's port to its MAC and addresses (until then
  // the guard drops everything the port sends). No-op in routed mode.
  virtual Status BindSources(const ipam::PodRecord& rec) = 0;
  // The node-wide masquerade for the network (`masquerade: true`).
  virtual Status EnsureMasquerade(const ipam::PodRecord& rec) = 0;
  // The pod's own hostPort entries (its claimed mappings), after
  // route_localnet on `localnet_dev` (DNAT of 127.0.0.1 needs it where the
  // packet leaves); nothing else on the node is touched.
  virtual Status SyncHostPorts(const ipam::PodRecord& rec, const std::string& localnet_dev) = 0;
  // Drops UDP conntrack entries that would bypass the pod's new DNAT rules.
  virtual Status FlushUdpConntrack(const ipam::PodRecord& rec) = 0;
};

struct AddSteps {
  AddIpam& ipam;
  Datapath& datapath;
  AddFirewall& firewall;
  // ADD's rollback: the ordered teardown (teardown.h) of whatever the row
  // records. `delete_link` is false before the veth pair was created: a link
  // with the deterministic name that this ADD did not create is not ours.
  std::function<void(bool delete_link)> teardown;
};

// The hostPort mappings of `req` for `rec`: to its IPv4 address, else its
// IPv6 one.
std::vector<ipam::PortMapping> PortMappingsFor(const AddRequest& req, const ipam::PodRecord& rec);

// Runs the sequence above; on any failure after the allocation the teardown
// runs (once) before the error is returned. `timer` gets the phases ipam,
// veth, interfaces, firewall and ready.
Result<cni::CniResult> RunAdd(const AddRequest& req, const AddSteps& steps, PhaseTimer& timer);

}  // namespace weft::plugin
