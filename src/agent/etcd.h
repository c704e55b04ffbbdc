#pragma once
// The etcd v3 control plane, spoken through etcd's HTTP/JSON gateway
// (/v3/kv/range, /v3/kv/txn, /v3/lease/*, /v3/watch) with libcurl.
//
// Key layout under a prefix (default /weft/network), docs/weftd.md:
//   <prefix>/config                    {"network":"10.244.0.0/16","subnetLen":24}
//   <prefix>/subnets/10.244.1.0-24     {"node":"n1","hostIP":"192.0.2.11",
//                                       "vtepMAC":"aa:..","backend":"vxlan"}
// A subnet key is created with a compare-and-swap transaction (it must not
// exist) and is attached to the node's lease, so it vanishes when the node
// stops renewing it. A restarted node finds its own key by node name and
// moves it onto its new lease, keeping the same subnet.

#include <atomic>
#include <cstdint>
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

struct NetworkConfig {
  IpPrefix network;
  int subnet_len = 24;
};
Result<NetworkConfig> ParseNetworkConfig(std::string_view value);
std::string EncodeNetworkConfig(const NetworkConfig& c);

// "<prefix>/subnets/10.244.1.0-24" and back.
std::string SubnetKey(const std::string& prefix, const IpPrefix& subnet);
std::optional<IpPrefix> SubnetFromKey(const std::string& prefix, std::string_view key);
std::string EncodeSubnetValue(const LocalNode& self);
// A peer from a subnet key/value; errors name the key.
Result<NodeInfo> DecodeSubnet(const std::string& prefix, const EtcdKv& kv);

// The first subnet of `c` not overlapping `taken`, trying `preferred` first.
std::optional<IpPrefix> PickSubnet(const NetworkConfig& c, const std::vector<IpPrefix>& taken,
                                   const std::optional<IpPrefix>& preferred);

// --- The client ---------------------------------------------------------------

// Requests against a list of gateway endpoints, moving to the next endpoint
// after a transport failure. One per thread.
class EtcdClient {
 public:
  EtcdClient(std::vector<std::string> endpoints, TlsOptions tls);

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
};

struct EtcdOptions {
  std::vector<std::string> endpoints;       // "http://10.0.0.1:2379"
  std::string prefix = "/weft/network";
  int64_t lease_ttl = 60;                   // seconds
  std::optional<IpPrefix> cluster_cidr;     // written to <prefix>/config if absent
  int subnet_len = 24;
  TlsOptions tls;
  std::string state_file;                   // remembers the last subnet ("" = none)
  std::string node_name;                    // for Leave() without Register()
};

std::unique_ptr<ControlPlane> NewEtcdControlPlane(EtcdOptions opts);

}  // namespace weft::agent
