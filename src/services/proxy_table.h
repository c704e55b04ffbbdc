#pragma once
// Table inet weft-services in the nftables layer's objects
// (sys/nft_types.h): its fixed part (base chains, the verdict maps, the
// masquerade and reject chains) and what one Service puts in it (a chain
// per service port and family, one per endpoint, affinity sets, map
// elements), modelled on kube-proxy's nftables proxier
// (pkg/proxy/nftables/proxier.go; docs/services.md draws the layout). This
// unit alone knows how the table is spelled; proxy_model.h decides when
// which part changes. Pure: no I/O.
//
// One inet table rather than kube-proxy's ip and ip6 pair: a dual-stack
// Service's change is then one transaction (one nfnetlink batch, all or
// nothing) for both families, as Weft's other tables are (inet weft-netpol,
// inet weft-overlay); the per-family parts are the maps, each keyed by one
// family's addresses, and the chains, whose names carry the family.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/ip.h"
#include "services/endpoints.h"
#include "services/service_types.h"
#include "sys/nft_types.h"

namespace weft::services {

namespace nft = sys::nft;

inline constexpr char kTable[] = "weft-services";

// What the proxy is told about its node and cluster (weftd's flags, later).
struct Config {
  NodeTopology node;
  // The pod network, at most one prefix per family (kube-proxy's
  // --cluster-cidr, its "local detector"): traffic to a ClusterIP from
  // outside it is masqueraded, and eTP=Local's pod short-circuit matches
  // it. None: no such masquerade, as kube-proxy without one.
  std::vector<IpPrefix> cluster_cidrs;
  bool masquerade_all = false;  // kube-proxy's --masquerade-all
  // The packet mark bit that asks the postrouting chain to masquerade
  // (kube-proxy's --masquerade-bit 14).
  uint32_t masquerade_mark = 0x4000;
};

// The fixed chains and maps (docs/services.md).
inline constexpr char kServicesChain[] = "services";
inline constexpr char kMarkMasqChain[] = "mark-for-masquerade";
inline constexpr char kMasqueradingChain[] = "masquerading";
inline constexpr char kRejectChain[] = "reject-chain";
inline constexpr char kEndpointsCheckChain[] = "service-endpoints-check";
inline constexpr char kNodePortEndpointsCheckChain[] = "nodeport-endpoints-check";
// address . protocol . port : verdict, per family: ClusterIPs, externalIPs, LB IPs.
const char* ServiceIpsMap(bool v6);
// protocol . port : verdict, per family: NodePorts on the node's own addresses.
const char* NodePortsMap(bool v6);
// The same keys for a service port without usable endpoints: reject or drop, in the filter hooks.
const char* NoEndpointServicesMap(bool v6);
const char* NoEndpointNodePortsMap(bool v6);
// Every map of the table (the maps above for both families).
std::vector<std::string> AllMaps();

// "ns/name/tcp/http": kube-proxy's service port name with its protocol.
std::string PortName(const Service& svc, const ServicePort& port);
// Stable names, unique per service port (and endpoint) and family:
// "<kind><4|6>-<hash>-<ns>/<name>/<proto>/<port>[__<endpoint>]", the hash
// (8 base32 characters of FNV-1a 64 of the family and the rest) standing
// for the name when it must be cut to nft's limit of 255 bytes.
//   svc4-   the Cluster policy chain: endpoint selection
//   local4- the Local policy chain
//   ext4-   the external chain: NodePort, externalIPs, LB IPs
//   ep4-    one endpoint's chain: masquerade on hairpin, affinity, DNAT
//   aff4-   one endpoint's affinity set (client addresses, with timeout)
std::string ChainName(const char* kind, bool v6, const std::string& port_name, const std::string& endpoint = "");
inline constexpr size_t kMaxNameLen = 255;
// An endpoint as a name's last part: "10.1.0.5/8080", "fd00..5/8080" (nft's words have no ':').
std::string EndpointPart(const PortEndpoint& e);

// One rule of a Service's chain, and the anonymous verdict map it looks up
// when it has one (numgen's `vmap { 0 : goto ep.., 1 : goto ep.. }`): the
// rule's lookup names kAnonymousMap, which the transaction renames.
inline constexpr char kAnonymousMap[] = "__set_vmap";
struct TableRule {
  nft::Rule rule;
  std::vector<nft::Element> vmap;
  bool operator==(const TableRule&) const = default;
};

// One (map, key) of the verdict maps.
using MapKey = std::pair<std::string, std::string>;

// What the table does for one service port in one family: what conntrack
// cleanup and explain read.
struct PortState {
  bool v6 = false;
  Proto proto = Proto::kTcp;
  uint16_t port = 0, node_port = 0;
  std::vector<IpAddress> vips;  // ClusterIP, externalIPs, LB IPs of the family
  std::vector<PortEndpoint> endpoints;  // those with a chain (reachable from this node)
  bool has_endpoints = false;           // a usable endpoint somewhere: traffic is DNATed, not rejected
  std::string port_name;
  bool operator==(const PortState&) const = default;
};

// Everything one Service puts in the table.
struct ServiceObjects {
  std::map<std::string, std::vector<TableRule>> chains;
  std::map<std::string, nft::Set> sets;  // affinity sets
  std::map<MapKey, nft::Verdict> entries;
  std::vector<PortState> ports;
  bool operator==(const ServiceObjects&) const = default;
};

// The objects of `svc` given its EndpointSlices (any order) on this node,
// as kube-proxy's syncProxyRules writes them for each service port and
// family: nothing for a Service the proxy skips.
ServiceObjects BuildService(const Service& svc, const std::vector<const EndpointSlice*>& slices, const Config& cfg);

// The table's fixed part into `tx`: the maps, the fixed chains and their rules.
void AddFixedObjects(nft::Transaction& tx, const Config& cfg);

// Names anonymous maps uniquely within one transaction ("__set0", ...).
class AnonymousNames {
 public:
  std::string Next() { return "__set" + std::to_string(n_++); }

 private:
  unsigned n_ = 0;
};
// The rules of a chain into `tx`, each numgen map declared before its rule.
void AddRules(nft::Transaction& tx, const std::string& chain, const std::vector<TableRule>& rules,
              AnonymousNames& names);

// The map's key for an address, protocol and port (a NodePort: no address).
std::string MapKeyBytes(const std::optional<IpAddress>& addr, Proto proto, uint16_t port);

}  // namespace weft::services
