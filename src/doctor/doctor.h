#pragma once
// `weftctl doctor`'s core: compares what the kernel holds, what the IPAM
// database records and what the control plane publishes on one node, and
// names every discrepancy in plain words. Pure: snapshots in, findings out
// (unit-tested without root); doctor_io.h reads the snapshots and applies
// the repairs.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "doctor/nft_table.h"
#include "doctor/services_check.h"
#include "fw/hostport.h"
#include "ipam/store.h"
#include "overlay/reconcile.h"
#include "overlay/types.h"
#include "sys/netlink.h"
#include "sys/nft_types.h"

namespace weft::doctor {

// One attachment row and what the kernel says about it.
struct PodView {
  ipam::PodRecord row;
  bool veth_present = false;
  // False only when the netns path certainly no longer names a network
  // namespace (missing file, or not a netns); unknown counts as alive.
  bool netns_alive = true;
  // Seconds since the row was written (-1 when unknown).
  int64_t age_s = -1;
};

// A ruleset (one nftables table) as the database wants it and as the kernel
// holds it, each as the comments of its rules per chain. Every Weft rule
// carries a comment derived from what it encodes (the marker), so equal
// comment sets mean an equal ruleset.
struct RulesetView {
  bool checked = false;  // false: not examined (a note says why)
  std::string what;      // "hostPort ruleset (table inet weft-hp-...)"
  std::map<std::string, std::vector<std::string>> want;  // empty: should not exist
  std::map<std::string, std::vector<std::string>> have;
};

// The comments of the rules of each chain a transaction (sys/nft_types.h)
// adds, in order.
std::map<std::string, std::vector<std::string>> TransactionChainComments(const sys::nft::Transaction& tx);

// The hostPort table as `rules` want it, in RulesetView's terms: each
// chain's rule comments, each map's elements ("map hp4": fw::NftElementText)
// and the hairpin source ranges ("sources": fw::NftIntervals). Empty when
// `rules` is.
std::map<std::string, std::vector<std::string>> HostPortView(const std::string& table,
                                                             const std::vector<fw::HostPortRule>& rules);

// The peer side, present only when a control plane was given.
struct PeerView {
  overlay::LocalView local;
  overlay::PeerMap peers;
  overlay::KernelState kernel;  // agent routes, ARP/FDB on the VXLAN device
};

// weftd's NetworkPolicy table (`inet weft-netpol`) as weftd wants it and as
// the kernel holds it. Present only when weftd answered.
struct NetpolView {
  std::string weftd;             // weftd's address, for messages
  bool enforced = true;          // false: weftd answered 404 (network policy off)
  NftTable want;                 // weftd's ruleset as nft lists it back (enforced only)
  // false: weftd's ruleset could not be read here (not a transaction this
  // doctor decodes: another release's weftd); only a missing table is judged.
  bool want_listed = true;
  std::optional<NftTable> have;  // the kernel's table; nullopt: there is none
};

inline constexpr char kNetpolTable[] = "inet weft-netpol";

// weftd's Service proxy table (`inet weft-services`, services_check.h) as
// weftd wants it and as the kernel holds it. Present only when weftd answered.
struct ServicesView {
  std::string weftd;
  bool serving = true;  // false: weftd answered 404 (--service-proxy false)
  services::TableDigest want;
  std::optional<services::TableDigest> have;  // nullopt: the kernel has no such table
};

// A piece of an attachment's per-pod kernel state that is missing
// (plugin/pod_state.h: a host route, proxy ARP, IPv6 off), as
// plugin::PlanPodRepairs names it.
struct MissingPodState {
  std::string object;      // "pod-route", "pod-proxy-arp", "pod-ipv6-off"
  std::string attachment;  // "<containerID>/<ifname>"
  std::string what;        // "host route 10.244.0.2/32 dev wft0123456789ab"
};

struct Snapshot {
  std::string data_dir;
  std::vector<PodView> pods;
  std::vector<sys::LinkInfo> links;          // the node's links
  std::vector<sys::RouteSpec> host_routes;   // proto 201 without gateway
  std::vector<RulesetView> rulesets;
  std::vector<MissingPodState> pod_state;    // the source guard's pieces are in `rulesets`
  std::optional<PeerView> peers;
  std::optional<NetpolView> netpol;
  std::optional<ServicesView> services;
  // weftd's VXLAN device (a vxlan link named weft.*) is here, and whether the
  // overlay filter's hook rule (table inet weft-overlay) is in front of it.
  bool vxlan_device = false;
  bool overlay_filter = false;
  std::vector<std::string> notes;            // checks skipped and why
  std::vector<std::string> warnings;         // checks skipped that should have run
  int64_t stuck_after_s = 60;                // `adding` older than this is stuck
  // A source could not be read (the control plane): its checks are missing.
  bool incomplete = false;
};

enum class Kind {
  kVanishedAttachment,   // row whose veth and netns are both gone
  kMissingVeth,          // row whose veth is gone, netns still there
  kMissingNetns,         // row whose netns is gone, veth still there
  kStuckAttachment,      // row in state adding/deleting for too long
  kOrphanVeth,           // wft* link without a row
  kStaleHostRoute,       // proto-201 route without gateway, address not in DB
  kDuplicateAddress,     // two rows hold one address
  kRulesetMismatch,      // hostPort / masquerade marker differs from the DB
  kPeerMissing,          // route/ARP/FDB a live peer needs is absent or wrong
  kPeerStale,            // route/ARP/FDB for no live peer
  kNetpolMismatch,       // table inet weft-netpol missing, differing from weftd's, or left over
  kPodStateMissing,      // a ready attachment's host route, proxy ARP or IPv6-off is missing
  kServicesMismatch,     // a Service's rules in table inet weft-services missing or stale (weftd's proxy)
};

// "vanished-attachment", "orphan-veth", ... (the JSON `kind`).
const char* KindName(Kind k);

struct Finding {
  Kind kind;
  std::string subject;   // what it is about: "cid/eth0", "wft0123..", "10.244.1.0/24"
  std::string message;   // plain words, one line
  bool fixable = false;  // --fix repairs it
  std::string remedy;    // fixable: what --fix does; else: why it is left alone
  std::vector<std::string> details;  // one line per difference (capped), may be empty
};

// At most this many detail lines per finding; the last says how many more.
inline constexpr size_t kMaxDetails = 40;

std::vector<Finding> Diagnose(const Snapshot& snap);

// The reconciler's plan that repairs the kPeer* findings (empty without a
// control plane): exactly what weftd would apply.
overlay::Plan PeerPlan(const PeerView& peers);

// Parses SQLite's CURRENT_TIMESTAMP ("YYYY-MM-DD HH:MM:SS", UTC) to Unix
// seconds; nullopt when malformed.
std::optional<int64_t> ParseSqliteTime(const std::string& ts);

}  // namespace weft::doctor
