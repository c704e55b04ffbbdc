#pragma once
// What weftd's keeper (agent.cc, KeepLoop) wakes for and what it counts
// (issue 34): the kernel's notifications (sys/kernel_events.h) sorted into
// the passes they call for, and weft_repairs_total. Pure and thread-safe
// pieces; the loop itself is the agent's.
//
// The passes:
//   pods    the per-pod state and the source guard (plugin/pod_state.h)
//   node    node setup (overlay filter, masquerade, VXLAN device) and a
//           reconcile that reads the kernel (overlay routes, FDB, neighbours)
//   netpol  the NetworkPolicy table compared with the desired ruleset
//   services  the Service proxy's table compared with its model's digest
// A notification wakes a pass only when it can mean that something of that
// pass went missing (a deletion, proxy ARP turned off, IPv6 addresses on a
// port, a link down): what weftd and the plugin add themselves never wakes
// anything, and a pass that finds everything in place changes nothing, so
// the wakes settle.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "sys/kernel_events.h"

namespace weft::agent {

struct WakeFor {
  bool pods = false, node = false, netpol = false, services = false;
  bool any() const { return pods || node || netpol || services; }
  WakeFor& operator|=(const WakeFor& o) {
    pods |= o.pods;
    node |= o.node;
    netpol |= o.netpol;
    services |= o.services;
    return *this;
  }
};

// The names of what the node pass restores.
struct KeptNames {
  std::string vxlan_device;      // "weft.1"
  int vxlan_index = 0;           // 0: none (host-gw)
  std::string masquerade_table;  // inet, fw::NftTableName(network)
  // Whether a notification's port id is one of weftd's own commits to
  // table inet weft-netpol (NetpolController::OwnCommit): its deltas delete
  // rules, which call for no check. Unset: every deletion does.
  std::function<bool(uint32_t portid)> own_netpol_commit;
  // The same for table inet weft-services (ProxyController::OwnCommit):
  // each Service change deletes chains and elements.
  std::function<bool(uint32_t portid)> own_services_commit;
};

// Pure: which passes `e` calls for.
WakeFor Classify(const sys::KernelEvent& e, const KeptNames& names);

// weft_repairs_total{object}: the kernel objects weftd found missing and
// put back. Thread-safe.
class RepairCounter {
 public:
  void Add(const std::string& object, uint64_t n = 1);
  // The Prometheus text; `extra` adds counters kept elsewhere (the
  // NetworkPolicy controller's netpol-table).
  std::string Render(const std::map<std::string, uint64_t>& extra = {}) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> counts_;
};

}  // namespace weft::agent
