#pragma once
// hostPorts (the `portMappings` capability) as one node-wide ruleset derived
// from the IPAM database, kindnet's level-triggered design: every sync renders
// the complete desired ruleset from the database and, only when the kernel's
// copy differs, replaces it in one atomic batch (`nft -f`, or one
// `iptables-restore` per family). A crashed ADD or DEL can therefore never
// leave half a ruleset, and the next sync repairs any drift.
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
// Rendering is pure and unit-tested; the backends exec nft / iptables-restore.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "sys/nft_query.h"

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

// nftables: the base chains (prerouting/output jump to "hostports",
// postrouting masquerades marked hairpin traffic, a localhost guard) carry
// kNftHostPortBase; each mapping owns two rules in chain "hostports" whose
// comments name it ("weft-hp:<hash>:m" marks hairpin sources, ":d" DNATs),
// so a sync can add and delete single mappings.
inline constexpr const char* kNftHostPortBase = "weft-hp-base:1";
struct NftChainRule {
  std::string comment;
  std::string text;  // without the comment
};
std::vector<NftChainRule> NftHostPortChain(const std::vector<HostPortRule>& rules);
// A complete `nft -f` script that atomically replaces the table, or deletes
// it when `rules` is empty.
std::string RenderNftHostPorts(const std::string& table, const std::vector<HostPortRule>& rules);
// Rules the table puts into chain "hostports".
size_t NftHostPortChainRules(const std::vector<HostPortRule>& rules);
// Whether the four base rules are present (and nothing else outside
// "hostports"), given the table's rules as read from the kernel.
bool NftHostPortBaseInPlace(const std::vector<sys::NftRuleInfo>& have);
// The `nft -f` script turning the "hostports" chain in `have` into `want`:
// deletes (by handle) rules of mappings no longer wanted or broken, appends
// missing mappings. "" when nothing differs. REQUIRES: base in place.
std::string RenderNftHostPortDiff(const std::string& table, const std::vector<HostPortRule>& want,
                                  const std::vector<sys::NftRuleInfo>& have);

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
using HostPortSource = std::function<Result<std::vector<HostPortRule>>()>;

class HostPortFirewall {
 public:
  virtual ~HostPortFirewall() = default;
  // Makes the kernel match `source()`. Cheap (one netlink read, or one
  // iptables-save per family) when it already does.
  virtual Status Sync(const HostPortSource& source) = 0;
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
