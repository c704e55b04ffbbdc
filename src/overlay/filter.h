#pragma once
// The overlay's admission filter (issue 22 §2): a VXLAN packet addressed to
// this node is accepted only from a current peer's underlay address, and
// only when the source of the packet it carries is inside that peer's pod
// CIDRs. One node-wide table, `inet weft-overlay`, never a rule per peer or
// per pod:
//
//   chain input (hook input, priority filter - 10: after IPv4 reassembly)
//     udp dport <port> jump vxlan
//   chain vxlan
//     ip  saddr != @peers4  counter vxlan-unknown-peer drop
//     ip6 saddr != @peers6  counter vxlan-unknown-peer drop
//     <inner ethertype IPv4> <outer saddr> . <inner saddr> @peerN-pod4 return
//     <inner ethertype IPv6> <outer saddr> . <inner saddr> @peerN-pod6 return
//     counter vxlan-foreign-source drop
//
// The inner headers are read at fixed offsets from the outer UDP header
// (UDP 8 + VXLAN 8 + Ethernet 14 bytes): Debian 12's nft 1.0.6 has no
// `vxlan ip saddr`, but raw payload fields in a `typeof` set are supported
// and cost the same. A packet too short for the field (a tiny first
// fragment), an inner VLAN tag or an inner ARP frame matches nothing and is
// dropped. Each lookup is one hash (peers) and one pipapo lookup in a set
// of (peer address . pod CIDR) ranges: the cost does not grow with the
// number of pods.
//
// The elements are written by weftd's reconciler (reconcile.h computes
// them from the peer set, datapath.cc applies them in one nfnetlink
// transaction before any route or FDB change of the same pass); the rules
// are installed by weftd before the VXLAN device exists, and never flushed
// with their sets: a restarted weftd finds its elements in force.
//
// The table is built as typed objects of the nftables layer (sys/nft_types.h:
// pure, unit-tested against its fake) and applied by weftd in-process as one
// kernel transaction (sys/nft_kernel.h); the `typeof` sets carry nft's own
// metadata (sys/nft_udata.h), so `nft list` shows the table as nft would
// have written it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "sys/nft_set.h"
#include "sys/nft_types.h"

namespace weft::overlay {

inline constexpr char kOverlayTable[] = "weft-overlay";
// The drop rules' counters: where the explain/NFLOG work hooks in too.
inline constexpr char kUnknownPeerCounter[] = "vxlan-unknown-peer";
inline constexpr char kForeignSourceCounter[] = "vxlan-foreign-source";

// host-gw (and auto's direct routes): a packet that arrives on the uplink
// with a source inside a pod CIDR this node knows (its own, or a direct
// peer's that published its uplink MAC) must come from the MAC of the node
// that owns the CIDR:
//
//   chain hostgw (hook prerouting, priority raw)
//     ip  saddr . iifname @pods4-on  ip  saddr . ether saddr != @gw4  counter hostgw-foreign-source drop
//     ip6 saddr . iifname @pods6-on  ip6 saddr . ether saddr != @gw6  counter hostgw-foreign-source drop
//
// Own pod CIDRs are in pods*-on with no gw element: from the underlay, such
// a source is always forged. A peer that publishes no MAC (an older weftd)
// leaves its CIDR unchecked rather than cut off.
inline constexpr char kHostGwForeignCounter[] = "hostgw-foreign-source";

// One admission: `peer` (an underlay address) may send VXLAN; with `pods`,
// packets whose inner source is inside `pods`.
struct FilterEntry {
  IpAddress peer;
  std::optional<IpPrefix> pods;  // nullopt: the peer's address itself (peers4/peers6)
  auto operator<=>(const FilterEntry&) const = default;
  bool operator==(const FilterEntry&) const = default;
};

// One host-gw element: `pods` arriving on `iface` is checked (mac ""), or
// may come from `mac` (lower-case aa:bb:..).
struct HostGwEntry {
  IpPrefix pods;
  std::string iface;
  std::string mac;
  auto operator<=>(const HostGwEntry&) const = default;
  bool operator==(const HostGwEntry&) const = default;
};
sys::NftElement HostGwElement(const HostGwEntry& e);
std::optional<HostGwEntry> ParseHostGwElement(const sys::NftElement& el);
std::vector<std::string> HostGwSets();

// One transaction: the table, counters and sets when missing (elements
// kept), the chains' rules replaced. `port`: the VXLAN UDP port.
sys::nft::Transaction OverlayFilterTransaction(int port);
// The comment on the input chain's rule: a hash of the whole ruleset (the
// transaction rendered in nft's syntax without it).
std::string OverlayFilterMarker(int port);

// The set element of `e` (raw keys: addresses in network order).
sys::NftElement FilterElement(const FilterEntry& e);
// The entry an element of one of the table's sets encodes, or nullopt.
std::optional<FilterEntry> ParseFilterElement(const sys::NftElement& el);
// Every set of the table.
std::vector<std::string> FilterSets();

// Dropped packets, from the table's named counters.
struct OverlayFilterCounters {
  bool installed = false;
  uint64_t unknown_peer = 0, foreign_source = 0, hostgw_foreign_source = 0;
};
// The counters of an installed table (installed = true).
OverlayFilterCounters OverlayFilterCountersFrom(const std::vector<sys::nft::NamedCounter>& counters);
// weft_overlay_filter_installed and
// weft_overlay_filter_dropped_packets_total{reason} (unknown_peer,
// foreign_source, hostgw_foreign_source).
std::string RenderOverlayFilterMetrics(const OverlayFilterCounters& c);

}  // namespace weft::overlay
