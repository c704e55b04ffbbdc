#pragma once
// The node-wide masquerade for a pod network: one rule per address family
// ("from the pod ranges to anything outside the pod/cluster ranges ->
// masquerade"), never per pod. Rendering is pure; the backends check the
// kernel with a cheap read and rebuild atomically only when it differs.

#include <memory>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "sys/nft_types.h"

namespace weft::fw {

struct MasqueradeSpec {
  std::string network;               // validated CNI network name
  std::vector<IpPrefix> pod_ranges;  // sources to masquerade
  std::vector<IpPrefix> no_masq;     // destinations left alone (pod ranges are added)
};

// Prefixes with those contained in another removed, sorted.
std::vector<IpPrefix> Normalize(std::vector<IpPrefix> prefixes);

// nftables: table "inet weft-<network>" with chain "postrouting".
std::string NftTableName(const std::string& network);
// The marker comment carried by every rule; it encodes a hash of the ruleset,
// so any difference in ranges means a rebuild.
std::string MasqMarker(const MasqueradeSpec& spec);
// One transaction (sys/nft_types.h) that atomically replaces the table:
// sets pods4/nomasq4 (pods6/nomasq6) and chain postrouting, one rule per
// family carrying the marker. sys::nft::RenderTransaction prints it.
sys::nft::Transaction NftMasqueradeTransaction(const MasqueradeSpec& spec);
// The table's deletion (none there: no error).
sys::nft::Transaction NftMasqueradeRemoval(const MasqueradeSpec& spec);
// iptables: chain name (<= 28 chars) and iptables-restore input per family.
std::string IptablesChain(const std::string& network);
std::string RenderIptablesMasquerade(const MasqueradeSpec& spec, bool v6, bool with_jumps);
// Expected `iptables-save -t nat` lines for the family (chain rules + jumps).
std::vector<std::string> ExpectedIptablesLines(const MasqueradeSpec& spec, bool v6);

class Firewall {
 public:
  virtual ~Firewall() = default;
  // Idempotent; cheap when the rules are already in place.
  virtual Status EnsureMasquerade(const MasqueradeSpec& spec) = 0;
  virtual Status RemoveMasquerade(const MasqueradeSpec& spec) = 0;
};

// `lock_dir` holds a lock file that serialises rebuilds between processes.
std::unique_ptr<Firewall> NewNftFirewall(std::string lock_dir);
std::unique_ptr<Firewall> NewIptablesFirewall(std::string lock_dir);

}  // namespace weft::fw
