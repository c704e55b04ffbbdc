#pragma once
// Table inet weft-netpol in the nftables layer's objects (sys/nft_types.h):
// the rules the Engine (netpol_model.h) puts in the per-pod chains, and the
// transactions that build the whole table or move the kernel from the last
// applied model to the desired one. The Engine decides what the table
// holds; this unit alone knows how it is spelled in expressions. Pure: no
// I/O, unit-tested without root (the netns suite compares what it builds
// with what the text path built, netpol_nft_equivalence_test).

#include <cstdint>
#include <map>
#include <utility>
#include <set>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "policy/netpol_sets.h"
#include "policy/netpol_types.h"
#include "sys/nft_types.h"

namespace weft::policy::netpol {

// The table's layout (docs/networkpolicy.md).
inline constexpr char kTable[] = "weft-netpol";
inline constexpr uint32_t kDefaultPendingGroup = 22342;  // 0x5746
// The conntrack mark bit of established connections that a change may now
// deny: their packets are judged again (docs/networkpolicy.md).
inline constexpr uint32_t kRecheckMark = 0x20000000;
// Drop records (docs/networkpolicy.md, "Drop records"): every drop of the
// table goes to one of its drop chains (kDropChains: ingress, egress, their
// reply twins, and the pending pods of each direction), which sends the
// packet to NFLOG group kDropLogGroup with the prefix "weft-np <kind>", at
// most kDropLogRate packets per second for the whole table (the named limit
// "drop-log"), then counts and drops it. Over the rate the packet is
// dropped unrecorded: the drop never depends on the log.
inline constexpr uint16_t kDropLogGroup = 22342;
inline constexpr uint32_t kDropLogRate = 1000;  // per second
inline constexpr uint32_t kDropLogBurst = 100;
// chain -> the prefix's kind; each has kDropChainRules rules.
inline constexpr std::pair<const char*, const char*> kDropChains[] = {
    {"drop-in", "in"},   {"drop-eg", "eg"},   {"rdrop-in", "rin"},
    {"rdrop-eg", "reg"}, {"pending-in", "pending-in"}, {"pending-eg", "pending-eg"}};
inline constexpr size_t kDropChainRules = 2;
// Rules of the table's base chains (the kernel check counts them).
inline constexpr size_t kForwardChainRules = 11;
inline constexpr size_t kRecheckChainRules = 5;
inline constexpr size_t kInputChainRules = 9;
inline constexpr size_t kOutputChainRules = 2;
// The interface name prefix of pods' host veths (fw/source_guard.h's
// kPodPortPrefix), for the input hook's rule on IPv6 link-local sources.
inline constexpr char kPodPortPattern[] = "wft*";

using NftRule = sys::nft::Rule;
using NftExprs = std::vector<sys::nft::Expr>;

namespace nftr {

// Verdicts of the per-pod chains.
sys::nft::Verdict Accept();
sys::nft::Verdict Return();
sys::nft::Verdict Drop();
sys::nft::Verdict Goto(const std::string& chain);

// `ip saddr @set` / `ip6 daddr @set` (src: the packet's source).
NftExprs InSet(bool v6, bool src, const std::string& set);
// `ip saddr 10.0.0.1`.
NftExprs AddrIs(const IpAddress& ip, bool src);
// `meta l4proto tcp` (port 0), `... th dport 80`, `... th dport 80-90`.
NftExprs Port(Proto proto, uint16_t port, uint16_t end);
// `ip daddr . meta l4proto . th dport @set` (a named-port set).
NftExprs NamedPortIn(bool v6, const std::string& set);
// `ct state invalid`.
NftExprs CtInvalid();

// A rule: `match` then `verdict`, with a comment (nft keeps 128 bytes of
// one; longer ones are cut to 127).
NftRule MakeRule(NftExprs match, sys::nft::Verdict verdict, const std::string& comment = "");

// The rule that judges a reply of the connection `rule` judged: source and
// destination addresses swapped, the destination port the packet's source
// port, and a goto to chain X a goto to X's reply twin rX.
NftRule ReplyOf(const NftRule& rule);

// The rule in nft's syntax, as `nft list` prints it.
std::string Render(const NftRule& rule);

}  // namespace nftr

// One dispatch map: pod address -> chain (a jump).
using DispatchMap = std::map<std::string, std::string>;

// The dispatch maps of the table, in the order they are declared.
inline constexpr const char* kDispatchMaps[] = {"ingress4", "egress4",  "ingress6", "egress6", "ingress4r", "egress4r",
                                                "ingress6r", "egress6r", "node4",    "node6",   "node4r",    "node6r"};

// What the transactions are built from: the desired model's parts by
// reference (netpol_model.h's Model), its dispatch maps in kDispatchMaps'
// order.
struct TableView {
  const std::map<std::string, SetDef>* sets = nullptr;
  const std::map<std::string, std::vector<NftRule>>* chains = nullptr;
  std::vector<const DispatchMap*> maps;  // kDispatchMaps' order
  uint32_t pending_group = 0;
};

// The whole table in one transaction that replaces it atomically (add,
// delete and build it again: never a moment without rules). An element
// that does not parse as its set's type is an error (it cannot happen for
// elements the Engine made).
Result<sys::nft::Transaction> FullTransaction(const TableView& want);

// What changed since the last apply, for DeltaTransaction.
struct TableDelta {
  const std::map<std::string, SetLedger::Change>* sets = nullptr;
  // Chains whose rules changed: the applied rules (null: the kernel does
  // not have the chain) and the desired ones (null: to be deleted).
  struct ChainChange {
    const std::vector<NftRule>* have = nullptr;
    const std::vector<NftRule>* want = nullptr;
  };
  std::map<std::string, ChainChange> chains;
  std::vector<const DispatchMap*> applied_maps;  // kDispatchMaps' order
};

// The ops that move the kernel from the applied model to `want`, touching
// only what changed (empty when nothing did): element deletions, sets
// created or refilled, chains declared before any rule (a rule may go to a
// chain of the same batch), chains rewritten, dispatch entries, then
// chains and sets deleted once nothing refers to them.
Result<sys::nft::Transaction> DeltaTransaction(const TableView& want, const TableDelta& delta);

// The bytes of `element` as the kernel holds it in a set of `type`
// (SetDef::type): an address in network order; a concatenation's fields each
// padded to 4 bytes (inet_proto one byte, inet_service two in network
// order). An element that does not parse as `type` is an error.
Result<std::string> ElementKey(const std::string& type, const std::string& element);

// The layer's verdict map of that name (one of kDispatchMaps).
sys::nft::Set DispatchMapObject(const std::string& name);

// The layer's set for `def` (its key type and nft's userdata).
sys::nft::Set SetObject(const std::string& name, const SetDef& def);
// `def`'s elements as the kernel takes them: plain keys, or for an interval
// set the ranges' starts and ends.
Result<std::vector<sys::nft::Element>> SetElements(const SetDef& def, const std::set<std::string>& elements);

}  // namespace weft::policy::netpol
