#pragma once
// The thin adapters under `weftctl doctor`: read the node's kernel state,
// the IPAM database and (optionally) the control plane into a Snapshot, and
// apply the safe repairs. Every repair reuses the code that owns the state:
// the plugin's reclaim (GC's teardown) and hostPort sync, the masquerade
// firewall, and weftd's reconciler plan applied through its datapath.
//
// REQUIRES: the calling thread is in the node's network namespace.

#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor.h"
#include "fw/masquerade.h"
#include "plugin/config.h"

namespace weft::doctor {

struct Options {
  std::string data_dir = "/var/lib/weft";
  plugin::FwBackend hostport_backend = plugin::FwBackend::kNftables;
  // The node-wide masquerade the network should have (from the conflist:
  // network name, ranges, cluster CIDRs); nullopt = not checked.
  std::optional<fw::MasqueradeSpec> masquerade;
  // The plugin itself masquerades (config `masquerade: true`): a missing
  // ruleset is a finding. Otherwise weftd owns it and an absent table is
  // only noted (weftd may run with --masquerade=false).
  bool masquerade_required = false;
  plugin::FwBackend masquerade_backend = plugin::FwBackend::kNftables;
  // weftd's --state-dir: the masquerade rebuild takes weftd's lock there,
  // and a kubeconfig's inline credentials are written there as weftd does.
  std::string weftd_state_dir = "/var/lib/weftd";
  // This node's pod CIDRs (one per family) from the conflist's ranges, used
  // when the control plane has no record of the node.
  std::vector<IpPrefix> pod_cidrs;

  // Control plane: etcd endpoints, or a kubeconfig, or (neither given, in
  // a pod: KUBERNETES_SERVICE_HOST set and a token in
  // service_account_dir) the pod's service account, as weftd uses it;
  // none of them = peer checks skipped.
  std::vector<std::string> etcd_endpoints;
  std::string etcd_prefix = "/weft/network";
  std::string kubeconfig;
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  std::string node_name;    // "" = the peer whose host IP is the uplink's
  std::string iface;        // uplink ("" = the default route's)
  std::string node_ip;
  std::string vxlan_device = "weft.1";
  int control_plane_timeout_ms = 10000;

  int64_t stuck_after_s = 60;

  // weftd's metrics address, for its NetworkPolicy ruleset ("" = the
  // network policy check is skipped).
  std::string weftd_addr = "127.0.0.1:9641";
  // After a difference, wait this long and compare once more before
  // reporting it: weftd's own transaction may have been in flight.
  int netpol_settle_ms = 1000;
};

// Errors: the database cannot be opened or read, netlink fails, the control
// plane cannot be listed (unavailable, control plane: a half-read list is never used).
Result<Snapshot> ReadSnapshot(const Options& opts);

// One line per repair made or failed.
struct FixReport {
  std::vector<std::string> done;
  std::vector<std::string> failed;
};

// Repairs the fixable findings of `snap` (re-checking each just before it
// acts, so a pod added meanwhile is never touched).
FixReport Fix(const Options& opts, const Snapshot& snap, const std::vector<Finding>& findings);

}  // namespace weft::doctor
