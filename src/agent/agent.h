#pragma once
// weftd's main loop: sets the node up (uplink, VXLAN device, sysctls,
// masquerade, conflist), registers with the control plane, then reconciles
// the kernel against the peers on every change and on a periodic resync.

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/control_plane.h"
#include "agent/drops.h"
#include "agent/keeper.h"
#include "agent/metrics.h"
#include "agent/status_auth.h"
#include "base/status.h"
#include "fw/backend.h"
#include "overlay/types.h"
#include "policy/netpol_controller.h"
#include "services/proxy_controller.h"

namespace weft::agent {

struct AgentOptions {
  std::string node_name;
  std::string version, commit;              // weft_build_info (cmd/build_info/build_info.h)
  std::string control_plane_name = "etcd";  // for metrics labels and logs
  overlay::Backend backend = overlay::Backend::kVxlan;
  std::string iface;                        // uplink ("" = default route's)
  std::string node_ip;                      // one, or one per family ("" = the uplink's; DetectUplink)
  uint32_t vxlan_vni = 1;
  int vxlan_port = 8472;
  std::string vxlan_device;                 // "" = "weft.<vni>"
  std::vector<IpPrefix> cluster_cidrs;      // at most one per family: masquerade, the conflist
  std::string cni_conf_dir = "/etc/cni/net.d";
  std::string cni_conf_name = "10-weft.conflist";
  std::string network_name = "weft";
  bool write_conflist = true;
  std::string plugin_data_dir;              // "" = the plugin's default
  std::string plugin_log_file;
  std::string plugin_log_level;
  std::string state_dir = "/var/lib/weftd";  // masquerade lock
  bool masquerade = true;
  fw::Backend masquerade_backend = fw::Backend::kNftables;
  std::chrono::milliseconds resync{std::chrono::seconds(30)};
  std::string metrics_addr = "0.0.0.0:9641";  // "" = no server
  // --metrics-auth: /metrics answers as the protected paths do (status_auth.h).
  bool metrics_auth = false;
  // /healthz fails once the control plane refused every request (401/403,
  // a rejected certificate) for this long (auth_health.h).
  std::chrono::milliseconds auth_failure_timeout{std::chrono::minutes(2)};
  // NetworkPolicy: the conflist tells the plugin where the namespaces file
  // is and which interface group pending pods' host veths get; the file must
  // be the node's (weftd's state dir is a hostPath in deploy/weftd.yaml).
  bool network_policy = false;
  bool drop_log = true;  // --drop-log: read NFLOG drop records (agent/drops.h)
  std::string netpol_namespaces_file;     // "" = <state_dir>/netpol-namespaces
  uint32_t netpol_pending_group = 22342;  // 0x5746, the plugin's default
};

// The namespaces file weftd writes and the plugin reads.
inline std::string NetpolNamespacesFile(const AgentOptions& o) {
  return o.netpol_namespaces_file.empty() ? o.state_dir + "/netpol-namespaces" : o.netpol_namespaces_file;
}

class Agent {
 public:
  Agent(AgentOptions opts, std::unique_ptr<ControlPlane> cp);
  // Enforces NetworkPolicy with `netpol` (Kubernetes control plane only);
  // call before Run().
  void SetNetworkPolicy(std::unique_ptr<policy::NetpolController> netpol);
  // Serves Kubernetes Services with `proxy` (--service-proxy; Kubernetes
  // control plane only); call before Run().
  void SetServiceProxy(std::unique_ptr<services::ProxyController> proxy);
  // Checks the bearer tokens of callers off the node's loopback
  // (status_auth.h); without one, protected paths answer the loopback only.
  // Call before Run().
  void SetTokenReviewer(std::unique_ptr<TokenReviewer> reviewer) { reviewer_ = std::move(reviewer); }
  ~Agent();
  // Blocks until RequestStop() or a fatal error.
  Status Run();
  // Thread-safe; safe to call from a signal-handling thread.
  void RequestStop();

 private:
  struct State;
  // Run's steps: the uplink and what the node publishes, the reclaim after a
  // reboot, registration (the pod CIDRs), then the reconcile loop.
  Status DetectNode(State& st);
  void ReclaimVanishedAttachments();
  Status RegisterNode(State& st);
  void ReconcileLoop(State& st);
  Status SetUpNode(State& st);
  // SetUpNode's steps.
  Status EnsureForwarding(const State& st);
  Status EnsureVxlanDevice(State& st, int* vxlan_index, int* pod_mtu);
  // The overlay filter's table (overlay/filter.h), installed unless its
  // marker is in place; before the VXLAN device, so it never runs unfiltered.
  Status EnsureOverlayFilter();
  std::vector<IpPrefix> EffectiveClusterCidrs();
  Status EnsureNodeMasquerade(State& st, const std::vector<IpPrefix>& cluster);
  Status WriteNodeConflist(const State& st, int pod_mtu, const std::vector<IpPrefix>& cluster);
  // `full`: read the kernel rather than trust what the last pass applied.
  Status Reconcile(State& st, const overlay::PeerMap& peers, bool full);
  // The status server's handler: the gate, then the path.
  HttpAnswer Serve(const StatusServer::Request& req);
  HttpAnswer ServePath(const std::string& path, const StatusServer::Query& query);
  // The keeper's thread (keeper.h): kernel notifications and the resync
  // wake the pods pass (KeepPods) here, the node pass in ReconcileLoop
  // (node_due_) and the NetworkPolicy controller's kernel check.
  void KeepLoop();
  void KeepPods();
  // The NetworkPolicy controller's full table (start-up, after a failure)
  // is sent while weftd listens to no nftables notification: the kernel
  // then builds none for its elements (a third of the commit's time at
  // 10,000 pods). Afterwards the keeper wakes the pods, node and services
  // passes, as after lost notifications; the netpol table itself was just
  // replaced whole.
  // The Service proxy's whole table likewise; its own passes are then left
  // out instead (`replaced`: which of netpol and services was sent whole).
  void DeafDuringFullSync(bool begin, const WakeFor& replaced);

  AgentOptions opts_;
  std::unique_ptr<ControlPlane> cp_;
  std::unique_ptr<policy::NetpolController> netpol_;
  std::unique_ptr<services::ProxyController> proxy_;
  std::unique_ptr<DropRecorder> drops_;  // null with --drop-log=false
  std::unique_ptr<TokenReviewer> reviewer_;  // moved into gate_ by Run()
  std::unique_ptr<StatusGate> gate_;
  PeerStore store_;
  AgentMetrics metrics_;
  std::atomic<bool> stop_{false};
  RepairCounter repairs_;
  std::atomic<bool> node_due_{false};
  std::atomic<int> vxlan_index_{0};
  bool overlay_filter_seen_ = false;     // the reconcile thread's: installed once
  std::set<std::string> keep_failing_;  // the keeper thread's: repairs that failed last time
  std::mutex events_mu_;                 // guards events_nft_fd_ against the keeper closing it
  int events_nft_fd_ = -1;               // the keeper's nftables notification socket, -1: none
  std::mutex deaf_mu_;             // what DeafDuringFullSync leaves for the keeper
  int deaf_ = 0;                   // full syncs sent deaf now (netpol's and the proxy's may overlap)
  WakeFor heard_nothing_;          // the passes to wake for what went unheard
};

}  // namespace weft::agent
