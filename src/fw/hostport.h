#pragma once
// hostPorts (the `portMappings` capability), derived from the IPAM database.
//
// nftables: one table per database whose rules never change with the
// mappings. Its chains (the "base", written once) look the packet up in
// maps keyed by (protocol, port) or (host IP, protocol, port) and DNAT to
// the map's (pod address, port); each mapping is nothing but an element of
// one of those maps. So a pod's ADD adds its own elements
// and its DEL deletes its own, each in one netlink transaction of tens of
// microseconds (sys/nft_set.h), whatever the number of mappings on the
// node. The full desired-vs-kernel diff (Sync) is for CHECK, GC, weftd's
// reclaim, `doctor --fix` and the fallback of an ADD or DEL whose own
// change failed (the table missing or tampered with, a key held by stale
// data): it builds the table whole (one transaction, NftHostPortTransaction)
// when its base is not in place, else adds and deletes elements in one batch.
//
// iptables: one chain set per database rebuilt whole with one
// `iptables-restore` per family when its marker hash differs (Sync, also on
// ADD and DEL): the cost grows with the node.
//
// What the ruleset does, per mapping:
//  - DNAT traffic to a local address (or the mapping's hostIP) and hostPort,
//    arriving from outside (prerouting) or generated on the node (output,
//    localhost included) to the pod's address and containerPort;
//  - marks (0x2000, the reference portmap plugin's bit) connections from the
//    pod's own subnet (hairpin: the pod or a bridge neighbour reaching itself
//    through the node) and from 127.0.0.0/8, and masquerades marked
//    connections in postrouting, so replies come back through the node;
//  - drops packets to 127.0.0.0/8 that arrive on a non-loopback interface
//    and are not replies (route_localnet, which localhost DNAT needs on the
//    pod's host interface, would otherwise expose the node's localhost
//    services to that pod; kube-proxy installs the same guard).
// Rendering and element encoding are pure and unit-tested.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "sys/nft_query.h"
#include "sys/nft_set.h"
#include "sys/nft_types.h"

namespace weft::fw {

inline constexpr uint32_t kHostPortMasqMark = 0x2000;

// One mapping in one address family.
struct HostPortRule {
  std::string host_ip;  // "" = every local address of the rule's family
  int host_port = 0;
  std::string protocol;  // tcp, udp, sctp
  IpPrefix container;    // pod address with its subnet's prefix length
  int container_port = 0;
  bool is_v4() const { return container.is_v4(); }
  bool operator==(const HostPortRule&) const = default;
};

// Sorted, duplicate-free: the canonical order rendering and hashing use.
std::vector<HostPortRule> Canonical(std::vector<HostPortRule> rules);

// nftables table (inet family) for the database in `data_dir`: one ruleset
// per database, so two dataDirs on a node never fight over one table.
std::string HostPortTable(const std::string& data_dir);
// iptables: carried as the comment of every rule; a hash of the canonical
// rules, so any difference means a rebuild.
std::string HostPortMarker(const std::vector<HostPortRule>& rules);

// nftables. Every rule of the table is base and carries kNftHostPortBase.
// A mapping is one element of one map:
//   hp4  inet_proto . inet_service : ipv4_addr . inet_service     any local address
//   hp4a ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service   one hostIP
//   hp6, hp6a                                                       the same for IPv6
// The hairpin mark applies to sources in hp4-src / hp6-src (interval sets):
// 127.0.0.0/8 and the subnet of every pod with a mapping. An ADD adds its
// subnet (a no-op when present); only the full diff removes one. (Elements
// of these maps are hash entries, ~50 us to add or delete; entries of
// concatenated interval sets cost milliseconds to delete at 1000 entries.)
inline constexpr const char* kNftHostPortBase = "weft-hp-base:2";
// The four maps.
const std::vector<std::string>& NftHostPortMaps();
// The map elements of `rules`, in the kernel's byte layout.
std::vector<sys::NftElement> NftHostPortElements(const std::vector<HostPortRule>& rules);
// The hairpin source prefixes `rules` need (127.0.0.0/8 with any IPv4
// rule), without duplicates or prefixes another one covers.
std::vector<IpPrefix> NftHostPortSources(const std::vector<HostPortRule>& rules);
// The elements adding `p` to hp4-src / hp6-src: its start and its
// exclusive end (flagged NFT_SET_ELEM_INTERVAL_END; none when p reaches the
// top of the address space).
std::vector<sys::NftElement> NftSourceElements(const IpPrefix& p);
// The ranges a one-field interval set holds, as the kernel lists its
// elements, each as "set start-end" (hex, end exclusive; "" for the top),
// sorted. nft's own zero "end" element is skipped.
std::vector<std::string> NftIntervals(const std::vector<sys::NftElement>& elements);
// One map element as text, for comparisons and messages:
// "hp4 06000000.1f900000 : 0af40205.00500000" (hex of each 4-byte word).
std::string NftElementText(const sys::NftElement& e);
// One transaction that atomically replaces the table (base and elements),
// or deletes it when `rules` is empty (absent, it is no error).
sys::nft::Transaction NftHostPortTransaction(const std::string& table, const std::vector<HostPortRule>& rules);
// Whether the base rules are all present (and nothing else), given the
// table's rules as read from the kernel.
bool NftHostPortBaseInPlace(const std::vector<sys::NftRuleInfo>& have);
// The map element changes turning `have` (every element of the maps) into
// the elements of `want`: stale ones deleted, missing ones added, a key with
// other data deleted and re-added. REQUIRES: base in place.
std::vector<sys::NftChange> NftHostPortDiff(const std::vector<HostPortRule>& want,
                                            const std::vector<sys::NftElement>& have);

// iptables: chain names derived from the table name (<= 28 chars each).
struct IptablesHostPortChains {
  std::string dnat, masq, guard;  // nat, nat, filter (IPv4 only)
};
IptablesHostPortChains IptablesHostPortChainNames(const std::string& data_dir);
// The rules of our chains for one family, as "-A CHAIN ..." lines, keyed by
// table ("nat" or "filter"); and the jumps into them from the built-in chains.
struct IptablesLine {
  std::string table;
  std::string line;
};
std::vector<IptablesLine> IptablesHostPortRules(const std::string& data_dir, const std::vector<HostPortRule>& rules,
                                                bool v6);
std::vector<IptablesLine> IptablesHostPortJumps(const std::string& data_dir, bool v6);
// iptables-restore --noflush input that flushes our chains, refills them and
// adds the given jumps (`remove`: empties them, deletes the present jumps and
// the chains).
std::string RenderIptablesHostPorts(const std::string& data_dir, const std::vector<HostPortRule>& rules, bool v6,
                                    const std::vector<IptablesLine>& jumps, bool remove);

// Desired state, read from the source of truth. Called while the sync lock
// is held, so a concurrent writer's committed rows are always included.
// Every writer of the table (Sync, Add, Remove) holds <dataDir>/firewall.lock.
using HostPortSource = std::function<Result<std::vector<HostPortRule>>()>;

class HostPortFirewall {
 public:
  virtual ~HostPortFirewall() = default;
  // Makes the kernel match `source()` (the full diff). Cheap (netlink reads,
  // or one iptables-save per family) when it already does.
  virtual Status Sync(const HostPortSource& source) = 0;
  // ADD: puts one attachment's rules `mine` in place and touches nothing
  // else; falls back to Sync(source) when its own change fails (nftables),
  // or is Sync(source) (iptables).
  virtual Status Add(const std::vector<HostPortRule>& mine, const HostPortSource& source) = 0;
  // DEL: removes one attachment's rules `mine` (whose database rows the
  // caller still holds, so nobody else can own those keys yet); deletes the
  // whole table instead when `others()`, asked under the lock, says no other
  // attachment has mappings. Falls back to Sync(source) like Add.
  virtual Status Remove(const std::vector<HostPortRule>& mine, const HostPortSource& source,
                        const std::function<Result<bool>()>& others) = 0;
  // CHECK: "" when `mine` is in place in the kernel, else what is missing.
  virtual Result<std::string> Verify(const std::vector<HostPortRule>& mine) = 0;
};

// `data_dir` names the ruleset and holds the lock serialising syncs.
std::unique_ptr<HostPortFirewall> NewNftHostPorts(std::string data_dir);
std::unique_ptr<HostPortFirewall> NewIptablesHostPorts(std::string data_dir);

// Deletes conntrack entries for the UDP mappings' host ports (entries made
// before the DNAT existed would otherwise keep steering datagrams past it).
// Execs `conntrack` once per UDP mapping; none for TCP/SCTP. A missing tool
// or "no entries" is not an error.
Status FlushUdpConntrack(const std::vector<HostPortRule>& rules);

}  // namespace weft::fw
