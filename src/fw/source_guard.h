#pragma once
// The source guard (issue 22): a packet that enters the node from a pod's
// host interface (every weft host veth is named "wft" + 12 hex digits)
// carries one of that pod's own addresses as its source, or it is dropped
// and counted. One node-wide table per mode, never a rule per pod:
//
//   routed: table inet weft-guard. A strict reverse-path check, `fib saddr
//           . iif oif exists`: the node routes each pod address to exactly
//           one host veth (/32, /128), so the source must be routed back out
//           of the interface it came in on. No per-pod state at all.
//   bridge: table bridge weft-guard. Bridged frames never reach the inet
//           hooks, and the bridge family has no fib: each port is bound to
//           its pod's MAC and addresses by set elements (port . MAC, port .
//           IPv4, port . IPv6; written by ADD, destroyed by DEL). Frames from
//           another MAC, IPv4/ARP from another address, IPv6 from another
//           address, neighbour advertisements for another pod's address and
//           router advertisements are dropped.
//
// Both tables hold `allow4`/`allow6` (port . prefix, intervals): the per-pod
// opt-out for pods that legitimately send other sources (a VPN or router
// pod), empty unless someone fills them (SetAllowedSources).
//
// The rules are rendered here (pure, unit-tested); EnsureGuard checks their
// marker comment with one netlink read and, when it is not in place, applies
// them with one `nft -f` that creates what is missing and replaces only the
// chains: the sets (the bridge bindings, the opt-outs) survive an upgrade.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "sys/nft_query.h"
#include "sys/nft_set.h"

namespace weft::fw {

inline constexpr char kGuardTable[] = "weft-guard";
// Every weft host veth starts with it (plugin::HostVethName).
inline constexpr char kPodPortPrefix[] = "wft";

// Drop records: each drop goes through a chain (drop4, drop6, drop-mac)
// that first sends the packet to this NFLOG group with the prefix
// "weft-guard spoofed4|spoofed6|spoofed-mac", at most kGuardDropLogRate a
// second per table, then counts and drops it (weftd's agent/drops.h reads
// the group; the same group as NetworkPolicy's).
inline constexpr uint16_t kGuardDropLogGroup = 22342;
inline constexpr uint32_t kGuardDropLogRate = 1000;

enum class GuardMode { kRouted, kBridge };

sys::NftFamily GuardFamily(GuardMode mode);
// The comment of the hook rule; it encodes a hash of the whole ruleset.
std::string GuardMarker(GuardMode mode);
// A complete `nft -f` script: adds the table, its counters and sets when
// missing (keeping their elements), and replaces the chains' rules.
std::string RenderGuard(GuardMode mode);

// Installs the mode's guard unless its marker is in place. `lock_dir` holds
// firewall.lock, which serialises the rare rebuilds between processes.
// `applied` (optional) tells whether this call ran `nft -f`: the table may
// have been created anew, without the bridge bindings of existing pods.
Status EnsureGuard(GuardMode mode, const std::string& lock_dir, bool* applied = nullptr);

// Bridge mode: the elements binding `port` to `mac` (6 raw bytes) and the
// pod's addresses.
std::vector<sys::NftElement> PortBindings(const std::string& port, const std::string& mac,
                                          const std::optional<IpAddress>& v4, const std::optional<IpAddress>& v6);
// Adds `elements` (PortBindings of several ports) in one transaction.
Status BindPorts(const std::vector<sys::NftElement>& elements);
// Adds them in one netlink transaction.
Status BindPort(const std::string& port, const std::string& mac, const std::optional<IpAddress>& v4,
                const std::optional<IpAddress>& v6);
// Destroys them (absent elements, or no bridge guard table at all, are not
// an error). `keep`: as sys::NftApply's, the socket is handed to the caller
// to close after its own slow kernel work (the elements' destruction then
// costs the caller no wait).
Status UnbindPort(const std::string& port, const std::string& mac, const std::optional<IpAddress>& v4,
                  const std::optional<IpAddress>& v6, UniqueFd* keep = nullptr);

// GC's repair: destroys every element of both tables (bridge bindings,
// opt-outs) whose port is not a link of the node any more (a teardown that
// died between its steps). Returns how many went. `list_links` names the
// node's links; it is called after the elements were read, so a port an
// ADD binds meanwhile (link first, then its elements) is always among them,
// and a DEL destroys its elements before its link.
Result<size_t> PruneGuard(const std::function<Result<std::vector<std::string>>()>& list_links);

// The opt-out elements of `port`: one range per prefix in allow4/allow6.
std::vector<sys::NftElement> AllowElements(const std::string& port, const std::vector<IpPrefix>& prefixes);
// Makes `port`'s opt-out exactly `prefixes` in the mode's table (other
// ports' elements are neither read into the change nor touched): one dump of
// each allow set, one transaction, which also adds `port` to the table's
// `optouts` set (or removes it when `prefixes` is empty).
Status SetAllowedSources(GuardMode mode, const std::string& port, const std::vector<IpPrefix>& prefixes);
// DEL's form: removes `port`'s opt-out from the mode's table when the
// table's `optouts` set names the port (one lookup; nothing more on the
// nodes where nobody opted out, which is nearly all).
inline constexpr char kOptOutSet[] = "optouts";
Status ClearAllowedSourcesIfAny(GuardMode mode, const std::string& port);
// Removes `port`'s opt-out from both tables (teardown: a later pod that gets
// the same interface name starts without it). Absent tables are no error.
Status ClearAllowedSources(const std::string& port);
// The prefixes `port` may send from besides its own addresses.
Result<std::vector<IpPrefix>> AllowedSources(GuardMode mode, const std::string& port);

// Packets the guard dropped, per table (0 when the table is absent).
struct GuardCounters {
  bool routed_installed = false, bridge_installed = false;
  uint64_t routed4 = 0, routed6 = 0;            // inet weft-guard spoofed4/spoofed6
  uint64_t bridge4 = 0, bridge6 = 0, bridge_mac = 0;  // bridge weft-guard spoofed4/spoofed6/spoofed-mac
  uint64_t total() const { return routed4 + routed6 + bridge4 + bridge6 + bridge_mac; }
};
// Parses `nft -j list counters table <family> weft-guard` output into `out`.
Status ParseGuardCounters(GuardMode mode, const std::string& json, GuardCounters* out);
// Reads both tables' counters (execs nft once per installed table).
Result<GuardCounters> ReadGuardCounters();
// The Prometheus text of weftd's /metrics for `c`:
// weft_source_guard_installed{mode} and
// weft_source_guard_dropped_packets_total{mode,kind} (kind ipv4, ipv6, and
// in bridge mode mac: frames from a foreign MAC or not IP/ARP).
std::string RenderGuardMetrics(const GuardCounters& c);

}  // namespace weft::fw
