#pragma once
// weftd's NetworkPolicy controller: informers on Pods, Namespaces,
// NetworkPolicies and (with ClusterNetworkPolicy on) ClusterNetworkPolicies
// and Nodes feed the pure Engine (netpol_model.h); each batch of changes
// becomes one atomic transaction on table inet weft-netpol (the nftables
// layer's objects, policy/netpol_nft.h), sent from weftd's process as one
// nfnetlink batch (docs/networkpolicy.md).
//
// Start-up never flushes: the first apply replaces the table in one
// transaction built from complete lists, so the ruleset left by an earlier
// weftd stays in force until then. Every resync period the kernel's table is
// checked (chains and rule counts over nfnetlink) and replaced in full when
// it differs; a failed incremental apply is followed by a full one.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/list_watch.h"
#include "base/status.h"
#include "kube/kube_endpoint.h"
#include "policy/drop_log.h"
#include "policy/explain.h"
#include "policy/netpol_model.h"
#include "sys/nft_types.h"

namespace weft::kube {
class KubeApi;
}  // namespace weft::kube

namespace weft::policy {

// The kernel side, behind a seam so the controller's loop is tested without
// root.
class NetpolKernel {
 public:
  virtual ~NetpolKernel() = default;
  // Applies one transaction of table inet weft-netpol, all or nothing.
  virtual Status Apply(const sys::nft::Transaction& tx) = 0;
  // Rules per chain of the table as the kernel has it (empty: no table).
  virtual Result<std::map<std::string, size_t>> ChainRuleCounts() = 0;
  // Packets dropped by policy so far: {ingress, egress}.
  virtual Result<std::pair<uint64_t, uint64_t>> DropCounters() = 0;
  // Sets `mark` on the conntrack entries to or from `ips` (also as the
  // DNAT'ed destination): their packets are judged again. "0.0.0.0/0" or
  // "::/0" stands for every entry of that family.
  virtual Status MarkConntrack(const std::vector<std::string>& ips, uint32_t mark) = 0;
  // Writes the plugin's namespaces file (atomically).
  virtual Status WriteNamespaces(const std::string& path, const std::string& content) = 0;
  // Whether nftables notifications with this netlink port id
  // (sys::KernelEvent::portid) came from a batch Apply sent recently (its
  // last 8 sockets): weftd's own deltas delete rules, which must not call
  // for a check of the table. Thread-safe; a port id reused by another
  // process within that window is taken for ours, and the periodic check
  // still sees what it changed.
  virtual bool SentBy(uint32_t /*portid*/) const { return false; }
};
// nft, conntrack and files of the node weftd runs in.
std::unique_ptr<NetpolKernel> NewNetpolKernel();

struct NetpolOptions {
  std::string node_name;
  uint32_t pending_group = netpol::kDefaultPendingGroup;
  std::string namespaces_file;          // the plugin's pending decision (conflist networkPolicy.namespacesFile)
  std::chrono::milliseconds resync{std::chrono::seconds(30)};
  std::chrono::milliseconds batch{std::chrono::milliseconds(10)};  // events coalesced this long
  bool recheck_established = true;  // mark established connections of tightened addresses for a recheck
  int64_t watch_timeout_seconds = 300;
  // ClusterNetworkPolicy (docs/clusternetworkpolicy.md): watched with Nodes;
  // a cluster without the CRD is asked again every cnp_absent_retry.
  bool cluster_network_policy = true;
  std::chrono::milliseconds cnp_absent_retry{std::chrono::seconds(30)};
  // status.conditions: written by the weftd of the first Node by name, and
  // by any weftd when a needed write is still missing after this long.
  std::chrono::milliseconds cnp_status_grace{std::chrono::seconds(10)};
};

// Read by the metrics endpoint.
struct NetpolMetrics {
  std::atomic<uint64_t> policies{0};
  std::atomic<uint64_t> pods{0};               // pods known cluster-wide
  std::atomic<uint64_t> local_pods{0};
  std::atomic<uint64_t> isolated_ingress{0};   // local pods isolated for ingress
  std::atomic<uint64_t> isolated_egress{0};
  std::atomic<uint64_t> syncs{0};              // transactions applied
  std::atomic<uint64_t> full_syncs{0};
  std::atomic<uint64_t> sync_errors{0};
  std::atomic<uint64_t> conntrack_marks{0};    // addresses whose entries were marked for a recheck
  std::atomic<uint64_t> last_sync_us{0};
  // Event-to-enforcement latency histogram (le buckets in ms, then +Inf).
  static constexpr int kBuckets = 10;
  static constexpr uint32_t kBucketMs[kBuckets] = {1, 5, 10, 25, 50, 100, 200, 500, 1000, 5000};
  std::atomic<uint64_t> latency_bucket[kBuckets + 1] = {};
  std::atomic<uint64_t> latency_sum_us{0};
  std::atomic<uint64_t> latency_count{0};
  std::atomic<uint64_t> dropped_ingress{0};
  std::atomic<uint64_t> dropped_egress{0};
  std::atomic<bool> ready{false};
  // ClusterNetworkPolicy.
  std::atomic<uint64_t> cluster_policies{0};
  std::atomic<uint64_t> nodes{0};
  std::atomic<bool> cnp_crd_absent{false};
  std::atomic<uint64_t> cnp_status_writes{0};
  std::atomic<uint64_t> cnp_status_errors{0};
  // Times the kernel's table differed from the desired ruleset and was
  // replaced (weft_repairs_total{object="netpol-table"}).
  std::atomic<uint64_t> kernel_repairs{0};
  // Checks of the kernel's table against the desired ruleset (each one
  // dump of the table's rules): at the resync, and when someone else
  // deleted a rule, chain or the table (weft_netpol_kernel_checks_total).
  std::atomic<uint64_t> kernel_checks{0};
};
std::string RenderNetpolMetrics(const NetpolMetrics& m);


class NetpolController {
 public:
  // One KubeApi per informer thread.
  using ApiFactory = std::function<std::unique_ptr<kube::KubeApi>()>;
  NetpolController(NetpolOptions opts, kube::KubeEndpoint endpoint, std::unique_ptr<NetpolKernel> kernel);
  // Tests: informers talk to what `apis` makes.
  NetpolController(NetpolOptions opts, ApiFactory apis, std::unique_ptr<NetpolKernel> kernel);
  ~NetpolController();
  // Lists and watches until `stop`; applies every batch. Blocks.
  void Run(const std::atomic<bool>& stop);
  NetpolMetrics& metrics() { return metrics_; }
  ControlPlaneStats& stats();
  // What the policies say about the local pods (weftctl policy, /netpol).
  std::string DescribeJson();
  // `weftctl policy explain`: the explanation's JSON (policy/explain.h)
  // from the engine's current objects; its errors as Explain's.
  Result<std::string> ExplainJson(const netpol::ExplainQuery& q);
  // A new drop record's context (policy/drop_log.h) from the engine's
  // current objects: the pods of its addresses and, for a policy drop, the
  // policies isolating the judged pod in that direction and the tier rule
  // that decided, as explain says them. `sender` (a guard drop): the
  // address of the pod whose interface sent it, "" when unknown.
  DropContext DescribeDrop(const DropEvent& ev, const std::string& sender);
  // The table weftd wants in the kernel: as `nft list table` would print it,
  // or (`json`) as the JSON of its full transaction (sys/nft_json.h), which
  // doctor compares with the kernel's and --fix applies.
  Result<std::string> DesiredRuleset(bool json);
  // Refreshes dropped_ingress/egress from the kernel's counters.
  void RefreshCounters();
  // Compares the kernel's table with the desired ruleset at the next pass
  // (now, not at the resync): weftd saw the table or one of its chains or
  // rules deleted. Thread-safe.
  void CheckKernelSoon();
  // NetpolKernel::SentBy: a notification of weftd's own commit.
  bool OwnCommit(uint32_t portid) const;
  // Called with true right before a full table is sent and with false
  // once the kernel answered (weftd's agent stops listening to nftables
  // notifications meanwhile: agent.h). REQUIRES: set before Run.
  void SetFullSyncHook(std::function<void(bool begin)> hook);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  NetpolMetrics metrics_;
};

}  // namespace weft::policy
