#pragma once
// The weft plugin's configuration (docs/config.md documents every key).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/log.h"
#include "base/status.h"
#include "cni/netconf.h"
#include "fw/backend.h"

namespace weft::plugin {

enum class Mode { kRouted, kBridge };
// `masqueradeBackend`: the firewall tool, fw's type (weftd's flag uses it too).
using FwBackend = fw::Backend;

inline constexpr const char* kDefaultBridge = "weft0";
// `ipam.type` naming the built-in SQLite IPAM (same as no `ipam` section).
inline constexpr const char* kBuiltinIpamType = "weft";

// The IFLA_GROUP of a "pending" pod's host veth unless the config names
// another: 0x5746 ("WF").
inline constexpr uint32_t kDefaultPendingGroup = 0x5746;

// `networkPolicy` (routed mode only): pods whose namespace weftd lists in
// `namespaces_file` start "pending", their host veth in `pending_group`,
// and weftd's nftables table drops their forwarded traffic until it has
// learned the pod's IP (docs/plugin.md, "NetworkPolicy").
struct NetworkPolicyConfig {
  std::string namespaces_file;  // absolute path
  uint32_t pending_group = kDefaultPendingGroup;  // 1..2^32-1
};

struct Config {
  cni::NetConf net;
  Mode mode = Mode::kRouted;
  std::string bridge = kDefaultBridge;  // bridge mode only
  // Bridge mode: explicit gateway per family; otherwise the first usable
  // address of the family's range (built-in IPAM) or IPAM's gateway.
  std::vector<IpAddress> gateways;
  // Non-empty: exec this IPAM plugin from CNI_PATH instead of the SQLite IPAM.
  std::string delegated_ipam;
  // Subnets named by a delegated host-local-style `ipam` section
  // (`ranges[][].subnet`, `subnet`): the masquerade's source set.
  std::vector<IpPrefix> ipam_subnets;
  std::vector<IpPrefix> route_via_host;  // ipsToRouteViaHost, as host prefixes
  int mtu = 0;  // 0: derive from the host's default-route interface
  bool masquerade = false;
  FwBackend masquerade_backend = FwBackend::kNftables;
  std::string data_dir = "/var/lib/weft";
  std::vector<IpPrefix> ranges;
  std::vector<IpPrefix> cluster_cidrs;  // never masqueraded as destinations
  std::string log_file;
  log::Level log_level = log::Level::kWarn;
  std::optional<NetworkPolicyConfig> network_policy;
};

inline constexpr int kMinMtu = 68;
inline constexpr int kMaxMtu = 65535;
// RFC 8200: an IPv6 link carries at least 1280 bytes; the kernel removes
// IPv6 from a device set below it.
inline constexpr int kMinIpv6Mtu = 1280;

// Validates every weft key. Errors are invalid-argument and name the field.
// `ranges` is required only with the built-in IPAM. A config with a
// `bridge` key and no `mode` is bridge mode (seed 000's conflist).
Result<Config> ParseConfig(const cni::NetConf& net);

// The host end of the veth for container+ifname: "wft" + 12 hex digits of a
// stable hash, so DEL finds it without the netns or the database.
std::string HostVethName(const std::string& container_id, const std::string& ifname);
// The pod end's MAC address in bridge mode (6 raw bytes): locally
// administered, unicast, from a hash of the host veth's name, so DEL knows
// the source guard's binding (fw/source_guard.h) without the pod's netns.
std::string PodMac(const std::string& host_ifname);
// "0a:1b:..." for logs and tests.
std::string MacString(const std::string& mac);

}  // namespace weft::plugin
