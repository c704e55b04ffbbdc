#pragma once
// The source guard's drop counters (fw/source_guard.h's tables), read
// through the nftables layer (sys/nft_kernel.h: one dump of a table's
// named counters, no `nft` exec), for weftd's /metrics and `weftctl guard`.
// A library of its own (weft_fw_counters): the plugin, a static binary,
// does not link the layer's libnftnl and libmnl (docs/deploy.md).

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "fw/source_guard.h"
#include "sys/nft_types.h"

namespace weft::fw {

// Packets the guard dropped, per table (0 when the table is absent).
struct GuardCounters {
  bool routed_installed = false, bridge_installed = false;
  uint64_t routed4 = 0, routed6 = 0;                  // netdev weft-guard spoofed4/spoofed6
  uint64_t bridge4 = 0, bridge6 = 0, bridge_mac = 0;  // netdev weft-guard-bridge spoofed4/spoofed6/spoofed-mac
  uint64_t total() const { return routed4 + routed6 + bridge4 + bridge6 + bridge_mac; }
};

// Adds the named counters of GuardTable(mode), as the layer dumps them,
// to `out` and marks that table installed. Pure.
void AddGuardCounters(GuardMode mode, const std::vector<sys::nft::NamedCounter>& counters, GuardCounters* out);
// Both tables' counters from the kernel of the calling thread's network
// namespace (an absent table: not installed, zeros).
Result<GuardCounters> ReadGuardCounters();
// The Prometheus text of weftd's /metrics for `c`:
// weft_source_guard_installed{mode} and
// weft_source_guard_dropped_packets_total{mode,kind} (kind ipv4, ipv6, and
// in bridge mode mac: frames from a foreign MAC or not IP/ARP).
std::string RenderGuardMetrics(const GuardCounters& c);

}  // namespace weft::fw
