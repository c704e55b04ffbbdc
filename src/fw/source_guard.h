#pragma once
// The source guard (issue 22): a packet that enters the node from a pod's
// host interface (every weft host veth is named "wft" + 12 hex digits)
// carries one of that pod's own addresses as its source, or it is dropped
// and counted.
//
// Each mode has a `netdev` table (routed: weft-guard, bridge:
// weft-guard-bridge) and each pod port a base chain of its own in it,
// named after the port, on the port's ingress hook: its rules compare the
// source with the pod's addresses as immediates (no lookup, no FIB), accept
// a match, and send everything else to the table's shared chain `pod`.
// Legitimate traffic from a pod evaluates one rule (IPv4) or two (IPv6);
// only a port's own packets cross its chain, so the per-packet cost does not
// grow with the number of pods. The shared chains (built here, applied
// once per node as one nftables transaction) judge the rest:
//
//   routed: ARP passes (a routed port is point-to-point); router
//           advertisements and redirects are dropped; link-local sources,
//           duplicate address detection and the opt-outs pass; any other
//           IPv4 or IPv6 source is dropped.
//   bridge: the plugin locks the port to its pod's MAC in the bridge
//           itself (learning off, `locked on`, one static FDB entry: the
//           bridge drops a frame from any other MAC), so the port's chain
//           compares addresses only (not ICMPv6). The shared chains drop a
//           foreign MAC first, then check ARP (sender MAC and address),
//           neighbour advertisements (target), router advertisements and
//           link-local sources against set elements binding the port to
//           its pod's MAC and addresses (port . MAC, port . IPv4, port .
//           IPv6), and drop other protocols.
//
// ADD creates the port's chain (and the bridge elements) in one netlink
// transaction after creating the veth and before setting it up, so no
// packet of the pod is ever judged without it; DEL destroys them before the
// link; GC destroys those of ports that no longer exist (from Linux 6.16 a
// netdev chain outlives its device, and a later link of the same name
// would be hooked by it).
//
// Both tables hold `allow4`/`allow6` (port . prefix, intervals): the per-pod
// opt-out for pods that legitimately send other sources (a VPN or router
// pod), empty unless someone fills them (SetAllowedSources).
//
// The shared rules are built here as typed objects (GuardTransaction: pure,
// unit-tested); EnsureGuard checks their marker comment with one netlink
// read and, when it is not in place, applies them in one transaction
// (sys/nft_kernel.h) that creates what is missing and replaces only the
// shared chains: the ports' chains and the sets survive an upgrade.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "sys/nft_types.h"
#include "sys/nft_query.h"
#include "sys/nft_set.h"

namespace weft::fw {

inline constexpr char kGuardTable[] = "weft-guard";               // routed mode's
inline constexpr char kBridgeGuardTable[] = "weft-guard-bridge";  // bridge mode's
// The ports' chains' hook priority (nothing else hooks a pod port's ingress).
inline constexpr int32_t kGuardPortPriority = -500;
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

sys::NftFamily GuardFamily(GuardMode mode);  // netdev, both
const char* GuardTable(GuardMode mode);
// The comment of the shared chain's first rule; it encodes a hash of the
// whole ruleset, the ports' rules' shape included.
// A constant per mode (no work on ADD's path).
std::string GuardMarker(GuardMode mode);
// What GuardMarker must be: the hash of the transaction as rendered and of
// the ports' rules' shape (fw_test compares the two).
std::string ComputedGuardMarker(GuardMode mode);
// One transaction: adds the table, its counters, limit and sets when
// missing (keeping their elements), and replaces the shared chains' rules.
sys::nft::Transaction GuardTransaction(GuardMode mode);

// The rules of a port's own chain: accept the pod's addresses (bridge mode:
// not ICMPv6), send the rest to `pod`. A bridge port's MAC is enforced by
// the bridge (the plugin locks the port to it) and, for what reaches `pod`,
// by the shared chain.
std::vector<sys::NftRule> PortRules(GuardMode mode, const std::optional<IpAddress>& v4,
                                    const std::optional<IpAddress>& v6);

// Installs the mode's shared chains unless their marker is in place.
// `lock_dir` holds firewall.lock, which serialises the rare rebuilds between
// processes. `applied` (optional) tells whether this call applied it:
// the table may have been created anew, without the chains of existing
// pods (the caller binds them again: BindPorts).
Status EnsureGuard(GuardMode mode, const std::string& lock_dir, bool* applied = nullptr);

// What binds a port: its name, its pod's MAC (6 raw bytes; bridge mode
// only) and addresses.
struct PortBinding {
  std::string port, mac;
  std::optional<IpAddress> v4, v6;
};
// Bridge mode's elements binding a port to its pod's MAC and addresses
// (what the shared chains look up: ARP, neighbour discovery, link-local).
std::vector<sys::NftElement> BridgeElements(const PortBinding& b);
// Creates (or rewrites) the port's chain with PortRules, and in bridge mode
// adds its elements: one netlink transaction.
Status BindPort(GuardMode mode, const PortBinding& b);
// The same for several ports, in one transaction.
Status BindPorts(GuardMode mode, const std::vector<PortBinding>& ports);
// Destroys the port's chain (and its bridge elements); absent ones, or no
// table at all, are not an error. `keep`: as sys::NftApply's, the socket is
// handed to the caller to close after its own slow kernel work.
Status UnbindPort(GuardMode mode, const PortBinding& b, UniqueFd* keep = nullptr);
// The ports that have a chain in the mode's table.
Result<std::vector<std::string>> BoundPorts(GuardMode mode);

// The upgrade from the guard of earlier releases (table inet weft-guard,
// a `fib` check; table bridge weft-guard): moves its opt-outs to the mode's
// netdev table and deletes it. No-op without it. Call after the ports of
// the node were bound in the new table.
Status RetireLegacyGuard(GuardMode mode);

// GC's repair: destroys the chains and elements of both tables (port
// chains, bridge bindings, opt-outs) whose port is not a link of the node
// any more (a teardown that died between its steps). Returns how many went.
// `list_links` names the node's links; it is called after the chains and
// elements were read, so a port an ADD binds meanwhile (link first, then
// its chain) is always among them, and a DEL destroys its chain before its
// link.
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

// The guard's drop counters: fw/guard_counters.h.

}  // namespace weft::fw
