#pragma once
// The etcd v3 control plane: registration, lease renewal and the peer watch
// as logic over the narrow EtcdRegistry interface (etcd_registry.h), so all
// of it is unit-tested against FakeEtcd (etcd_fake.h); weftd runs it over
// EtcdClient (etcd_client.h: the JSON gateway with libcurl).
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
#include <chrono>
#include <functional>
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
#include "agent/errors.h"
#include "base/list_watch.h"
#include "etcd/etcd_client.h"
#include "etcd/etcd_registry.h"
#include "sys/http.h"

namespace weft::agent {

// --- Pure helpers (unit-tested) ---------------------------------------------

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
std::string EncodeSubnetValue(const overlay::LocalNode& self);
// A peer from a subnet key/value (one pod CIDR: the key's); errors name the
// key. Records without "hostIP6" (written before dual-stack) decode too.
Result<overlay::NodeInfo> DecodeSubnet(const std::string& prefix, const etcd::EtcdKv& kv);

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
  std::vector<std::string> Put(const std::string& key, overlay::NodeInfo record, int64_t mod_revision);
  std::vector<std::string> Delete(const std::string& key);
  void Clear();
  // The merged view, or nullopt when the node has no record.
  std::optional<overlay::NodeInfo> Node(const std::string& name) const;
  // Every node's merged view but `except`'s.
  overlay::PeerMap Peers(const std::string& except) const;

 private:
  struct Record {
    overlay::NodeInfo info;  // one pod CIDR
    int64_t mod_revision = 0;
  };
  std::map<std::string, Record> by_key_;
  std::map<std::string, std::set<std::string>> keys_by_node_;
};

struct EtcdOptions {
  std::vector<std::string> endpoints;       // "http://10.0.0.1:2379"
  std::string prefix = "/weft/network";
  int64_t lease_ttl = 60;                   // seconds
  std::vector<IpPrefix> cluster_cidrs;      // one per family: written to <prefix>/config if absent
  int subnet_len = 24;
  int subnet_len6 = 64;
  sys::TlsOptions tls;
  std::string state_file;                   // remembers the last subnets, one a line ("" = none)
  std::string node_name;                    // for Leave() without Register()
};

// The node's claim, planned from the subnet records read at one revision:
// one subnet per family of `cfg` under `lease`, in one transaction whose
// compares make it fail if anyone wrote those keys since. The node's own
// records (found by name) move onto the new lease; otherwise a free subnet
// is picked, preferring `remembered` (the state file's). `must_keep`: the
// subnets the node already uses (its lease was lost): any other outcome is a
// kNoSubnet failure. A full network is kNoSubnet too.
struct SubnetClaim {
  etcd::EtcdTxn txn;
  std::vector<IpPrefix> subnets;    // IPv4 first
  std::vector<int64_t> old_leases;  // the leases the reused records hung on
  bool reused = false;
};
Attempt<SubnetClaim> PlanClaim(const std::string& prefix, const std::string& self_name, const std::string& value,
                               const NetworkConfig& cfg, const std::vector<etcd::EtcdKv>& records,
                               const std::vector<IpPrefix>& must_keep, const std::vector<IpPrefix>& remembered,
                               int64_t lease);

class EtcdControlPlane : public ControlPlane {
 public:
  // Makes one registry per thread (Register and Leave on the caller's, the
  // lease renewal, the watch), each recording into `health` (the control
  // plane's own, for auth_health()).
  using RegistryFactory = std::function<std::unique_ptr<etcd::EtcdRegistry>(AuthHealth* health)>;
  EtcdControlPlane(EtcdOptions opts, RegistryFactory registry);

  // Ensures <prefix>/config (written from --cluster-cidr when absent) and
  // claims the subnets; retries transient failures with backoff, gives up at
  // once on a bad config (Why::kBadConfig) or no subnet (Why::kNoSubnet).
  Result<std::vector<IpPrefix>> Register(const overlay::LocalNode& self, const std::atomic<bool>& stop) override;
  std::vector<IpPrefix> ClusterCidrs() const override;
  // KeepAlive() on the calling thread, WatchPeers() on another, until `stop`
  // or until KeepAlive fails (the node lost its subnets): its error then.
  Status Run(PeerStore& store, const std::atomic<bool>& stop) override;
  // Deletes every subnet recorded for this node in one transaction and
  // revokes the leases they hang on; works without Register() (weftd --leave).
  Status Leave() override;
  ControlPlaneStats& stats() override { return stats_; }
  const AuthHealth* auth_health() const override { return &health_; }

  // --- Run's halves, public so tests drive them one at a time ---
  // Renews the lease every lease_ttl/3 (at least 300 ms); a lease found gone
  // (the node was away longer than its TTL) is claimed again with the same
  // subnets. Returns Ok when stopped, or the kNoSubnet failure when the
  // subnets were taken meanwhile. Other failures are retried with backoff.
  Status KeepAlive(const std::atomic<bool>& stop);
  // Lists then watches the subnet records into `store` (RunListWatch: the
  // revision is the resume point; a compacted or canceled watch re-lists, as
  // does a healthy one every 10 minutes) until `stop`.
  void WatchPeers(PeerStore& store, const std::atomic<bool>& stop);

  // Tests: the sleeps between renewals and retries (SleepUnlessStopped), and
  // the clock of the periodic re-list (steady_clock). Before Register/Run.
  void SetSleepForTesting(SleepFn sleep) { sleep_ = std::move(sleep); }
  void SetClockForTesting(std::function<std::chrono::steady_clock::time_point()> now) { now_ = std::move(now); }
  int64_t lease() const { return lease_.load(); }  // 0 before Register

 private:
  class PeerSource;
  const std::string& self_name() const { return self_.name.empty() ? opts_.node_name : self_.name; }
  Attempt<NetworkConfig> EnsureConfig(etcd::EtcdRegistry& r);
  Attempt<std::vector<IpPrefix>> TryRegister(etcd::EtcdRegistry& r, const std::vector<IpPrefix>& must_keep);
  // Renews once; a lost lease is re-claimed. Ok: renewed or re-claimed.
  Attempt<bool> Renew(etcd::EtcdRegistry& r);
  std::vector<IpPrefix> Remembered() const;
  void Remember(const std::vector<IpPrefix>& subnets) const;

  EtcdOptions opts_;
  RegistryFactory make_registry_;
  AuthHealth health_;                        // before the registries that record into it
  std::unique_ptr<etcd::EtcdRegistry> registry_;  // Register/Leave (the caller's thread)
  SleepFn sleep_;
  std::function<std::chrono::steady_clock::time_point()> now_;
  overlay::LocalNode self_;
  std::atomic<int64_t> lease_{0};
  mutable std::mutex mu_;
  std::vector<IpPrefix> subnets_;        // guarded by mu_
  std::optional<NetworkConfig> config_;  // guarded by mu_
  ControlPlaneStats stats_;
};

// The control plane over EtcdClient.
std::unique_ptr<ControlPlane> NewEtcdControlPlane(EtcdOptions opts);

}  // namespace weft::agent
