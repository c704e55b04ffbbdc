#pragma once
// The etcd v3 control plane, spoken through etcd's HTTP/JSON gateway
// (/v3/kv/range, /v3/kv/txn, /v3/lease/*, /v3/watch) with libcurl.
//
// Key layout under a prefix (default /weft/network), docs/weftd.md:
//   <prefix>/config                    {"network":"10.244.0.0/16","subnetLen":24,
//                                       "ipv6Network":"fd00:10:244::/56","ipv6SubnetLen":64}
//   <prefix>/subnets/10.244.1.0-24     {"node":"n1","hostIP":"192.0.2.11","hostIP6":"2001:db8::11",
//                                       "vtepMAC":"aa:..","backend":"vxlan"}
//   <prefix>/subnets6/fd00:10:244:1::-64   (the same value)
// A node holds one subnet per family of the config, each its own key (so
// each family's subnets are unique by key), claimed together in one
// compare-and-swap transaction (none of the keys may exist) and attached to
// the node's one lease, so they vanish together when the node stops
// renewing it. A restarted node finds its own keys by node name and moves
// them onto its new lease, keeping its subnets. IPv6 keys live beside, not
// under, subnets/: a weftd from before dual-stack lists only subnets/ and
// keeps seeing one record per node.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/control_plane.h"
#include "agent/http.h"

namespace weft::agent {

// --- Pure helpers (unit-tested) ---------------------------------------------

std::string Base64Encode(std::string_view in);
std::optional<std::string> Base64Decode(std::string_view in);
// The range_end that selects every key starting with `prefix`.
std::string PrefixRangeEnd(std::string prefix);

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdRange {
  int64_t revision = 0;  // the store revision the range was read at
  std::vector<EtcdKv> kvs;
};

struct EtcdEvent {
  bool is_delete = false;
  EtcdKv kv;
};

struct EtcdWatchMessage {
  bool created = false;
  bool canceled = false;
  int64_t compact_revision = 0;  // > 0: the start revision was compacted
  int64_t revision = 0;          // header revision
  std::string cancel_reason;
  std::vector<EtcdEvent> events;
};

// Gateway bodies. Errors are kDecode for malformed JSON and kControlPlane for
// an error object returned by etcd.
Result<EtcdRange> ParseRangeResponse(std::string_view body);
Result<EtcdWatchMessage> ParseWatchLine(std::string_view line);
// `*revision` gets the header revision.
Result<bool> ParseTxnResponse(std::string_view body, int64_t* revision);
Result<int64_t> ParseLeaseGrant(std::string_view body);   // lease ID
Result<int64_t> ParseLeaseKeepAlive(std::string_view body);  // remaining TTL; 0 = lease gone

// At least one family. Subnet lengths: IPv4 network..30, IPv6 network..126.
struct NetworkConfig {
  std::optional<IpPrefix> network;   // IPv4 ("network")
  int subnet_len = 24;               // "subnetLen"
  std::optional<IpPrefix> network6;  // IPv6 ("ipv6Network")
  int subnet_len6 = 64;              // "ipv6SubnetLen", as kube-controller-manager's --node-cidr-mask-size-ipv6
  // The networks, IPv4 first.
  std::vector<IpPrefix> Networks() const;
};
Result<NetworkConfig> ParseNetworkConfig(std::string_view value);
std::string EncodeNetworkConfig(const NetworkConfig& c);

// "<prefix>/subnets/10.244.1.0-24", "<prefix>/subnets6/fd00:10:244:1::-64"
// and back (an IPv4 subnet only under subnets/, an IPv6 one only under
// subnets6/).
std::string SubnetKey(const std::string& prefix, const IpPrefix& subnet);
std::optional<IpPrefix> SubnetFromKey(const std::string& prefix, std::string_view key);
// The key prefix both subnet directories start with ("<prefix>/subnets"):
// one range or watch from here to PrefixRangeEnd() reads them all.
std::string SubnetsKeyPrefix(const std::string& prefix);
// "hostIP6" is left out when the node has no IPv6 address.
std::string EncodeSubnetValue(const LocalNode& self);
// A peer from a subnet key/value (one pod CIDR: the key's); errors name the
// key. Records without "hostIP6" (written before dual-stack) decode too.
Result<NodeInfo> DecodeSubnet(const std::string& prefix, const EtcdKv& kv);

// The first subnet of length `subnet_len` in `network` not overlapping
// `taken`, trying `preferred` first. Either family; at most 2^32 candidates
// are tried.
std::optional<IpPrefix> PickSubnet(const IpPrefix& network, int subnet_len, const std::vector<IpPrefix>& taken,
                                   const std::optional<IpPrefix>& preferred);

// The peers the subnet records describe. A node's records (one per family)
// merge into one NodeInfo: its pod CIDRs IPv4 first, the other fields from
// its most recently written record. Of two records of one family for the
// same node the most recently written wins (as when a node moved to a new
// subnet and its old key has not expired yet). Not thread-safe.
class SubnetRecords {
 public:
  // Returns the nodes whose merged view may have changed.
  std::vector<std::string> Put(const std::string& key, NodeInfo record, int64_t mod_revision);
  std::vector<std::string> Delete(const std::string& key);
  void Clear();
  // The merged view, or nullopt when the node has no record.
  std::optional<NodeInfo> Node(const std::string& name) const;
  // Every node's merged view but `except`'s.
  PeerMap Peers(const std::string& except) const;

 private:
  struct Record {
    NodeInfo info;  // one pod CIDR
    int64_t mod_revision = 0;
  };
  std::map<std::string, Record> by_key_;
  std::map<std::string, std::set<std::string>> keys_by_node_;
};

// --- The client ---------------------------------------------------------------

// Requests against a list of gateway endpoints, moving to the next endpoint
// after a transport failure. One per thread. A TLS failure (a rotated client
// certificate or CA) is retried once on a new connection, which reads the
// TLS files again. Outcomes go to `health` when it is not null (it must
// outlive the client).
class EtcdClient {
 public:
  EtcdClient(std::vector<std::string> endpoints, TlsOptions tls, AuthHealth* health = nullptr);

  Result<EtcdRange> Range(const std::string& key, const std::string& range_end, int64_t revision = 0);
  Result<bool> Txn(const std::string& body_json, int64_t* revision = nullptr);
  Result<int64_t> LeaseGrant(int64_t ttl_seconds);
  Result<int64_t> LeaseKeepAlive(int64_t id);
  Status LeaseRevoke(int64_t id);
  Status Compact(int64_t revision);
  Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  Status Delete(const std::string& key);
  // Watches [key, range_end) from `start_revision`; `on_msg` gets each
  // complete message and returns false to stop.
  Status Watch(const std::string& key, const std::string& range_end, int64_t start_revision,
               const std::function<bool(const EtcdWatchMessage&)>& on_msg, const std::atomic<bool>& stop);

 private:
  Result<std::string> Post(const std::string& path, const std::string& body);
  std::vector<std::string> endpoints_;
  size_t current_ = 0;
  HttpClient http_;
  AuthHealth* health_;
};

struct EtcdOptions {
  std::vector<std::string> endpoints;       // "http://10.0.0.1:2379"
  std::string prefix = "/weft/network";
  int64_t lease_ttl = 60;                   // seconds
  std::vector<IpPrefix> cluster_cidrs;      // one per family: written to <prefix>/config if absent
  int subnet_len = 24;
  int subnet_len6 = 64;
  TlsOptions tls;
  std::string state_file;                   // remembers the last subnets, one a line ("" = none)
  std::string node_name;                    // for Leave() without Register()
};

std::unique_ptr<ControlPlane> NewEtcdControlPlane(EtcdOptions opts);

}  // namespace weft::agent
