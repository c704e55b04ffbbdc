#pragma once
// The datapath: TCP throughput (iperf3) and a TCP_RR-style request/response
// loop (one byte each way, TCP_NODELAY) between two netns, for pods wired by
// each plugin on one node and for the baselines (a bare veth pair; two nodes
// over a veth underlay, and a bare kernel VXLAN on it); and pod to pod across
// two such nodes run by weftd (etcd, backend vxlan or host-gw).

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/control.h"

namespace weft::bench {

// A client netns that connects to `server_ip` in a server netns.
struct PodPair {
  std::string client_ns, server_ns, server_ip;
};
inline constexpr int kRrPort = 7001;
inline constexpr int kIperfPort = 5201;

// iperf3 TCP throughput client -> server for `seconds` (one stream), Gbit/s.
// `cpus` = {client, server}: each end pinned to that CPU (iperf3 -A); empty:
// wherever the scheduler puts them.
Result<double> MeasureIperf(const PodPair& pair, int seconds, const std::vector<int>& cpus = {});
// The TCP_RR loop on kRrPort for `seconds`: {trans_per_s, p50_us, p99_us}.
// `cpus` as for MeasureIperf (the calling thread is the client; it is
// unpinned again afterwards).
Result<nlohmann::json> MeasureRr(const PodPair& pair, int seconds, const std::vector<int>& cpus = {});

// Connections per second on `port`: connect, one byte each way, close with a
// RST (no TIME_WAIT), for `seconds`: {conn_per_s, p50_us, p99_us}. Each
// connection's first packet is a new flow (what firewall rules are asked
// about; later packets only hit conntrack).
Result<nlohmann::json> MeasureCrr(const PodPair& pair, int seconds, int port);

struct DatapathOptions {
  std::string prefix;
  int seconds = 3;  // per iperf3 run and per RR run
  int rounds = 3;   // all topologies once per round, interleaved; medians
  std::string weftd_bin;  // for the two-node weft rows (vxlan, host-gw)
  // {client, server}: every row's two ends pinned to these CPUs (both the
  // iperf3 processes and the TCP_RR threads), so no row is measured with
  // its ends sharing a CPU while another has one each. Empty: unpinned.
  // weft-bench's default is {0, 0}: one CPU for both ends.
  std::vector<int> cpus;
  bool same_node_only = false;  // skip the two-node rows
};

// `configs`: plugin configurations to wire two pods with on one node (only
// those with `datapath` set and available in `control`).
nlohmann::json RunDatapath(const DatapathOptions& opt, const Runner& runner, const std::vector<NetConfig>& configs,
                           const nlohmann::json& control);

// The source guard's cost (issue 22 §1), as a paired A/B: the same pods and
// the same two long-lived TCP connections (a TCP_RR loop, one byte each way,
// TCP_NODELAY; a bulk stream) measured in short windows, the node(s)
// switched between state "on" and state "off" before every window, pairs in
// alternating order (on, off / off, on). Each pair gives one ratio on/off;
// the result is the median ratio with a bootstrap 95 % confidence interval,
// so load that drifts over seconds cancels within a pair.
//
// "on" is the guard as the plugin installed it (its table listed after the
// pods' ADDs and restored before each "on" window), or `on_script`; "off"
// is no guard table, or `off_script`. A script is an nft -f text applied in
// each node's netns (it should start by removing the weft-guard tables it
// replaces). `rp_filter` = "on": the "on" state also sets
// net.ipv4.conf.<pod port>.rp_filter=1 on every pod's host interface (0 in
// "off"), the kernel's strict reverse-path check.
struct GuardAbOptions {
  std::string prefix;
  std::string weftd_bin;
  // weft-routed, weft-bridge (one node), weft-vxlan, weft-host-gw (two).
  std::vector<std::string> topologies = {"weft-routed"};
  int pairs = 40;
  int window_ms = 500;
  // After each switch, before the window: the kernel's deferred work of the
  // nft transaction (freeing the replaced table, hook unregistration) runs
  // on a kworker and would bill the window that follows.
  int settle_ms = 100;
  std::vector<int> cpus;  // {client, server}: pin the two threads
  bool fifo = false;      // SCHED_FIFO for the two threads while measuring
  bool stream = true;     // also measure the bulk stream
  std::string on_script, off_script;  // file contents; empty: as described
  std::string on_label = "guard on", off_label = "guard off";
  bool rp_filter_on = false, rp_filter_off = false;
  // Applied once in each node's netns after the ADDs, before the "on" state
  // is listed, and left in place through both states: what else the node
  // runs (bench/guard_variants/kube-proxy.nft). Empty: nothing.
  std::string baseline_script;
  // > 0: the interleaved A/B (TCP_RR only). The topology is set up twice,
  // on two identical nodes (or node pairs); before each window one is put
  // in the "on" state and the other in "off", the roles swapped every
  // window, and within the window the client alternates between the two
  // pod pairs every `interleave_ms`, so both states see the same moments of
  // the machine (the VM's rate jumps between levels from one 400-ms window
  // to the next, which the classic pairs only average out). One pair = two
  // windows with the roles swapped; its ratio, the geometric mean of the
  // two windows' on/off, cancels any difference between the two nodes.
  int interleave_ms = 0;
  // With interleave_ms: also the bulk stream, measured on both pod pairs at
  // once in every window (one sender thread each, both on the client's CPU,
  // SCHED_OTHER so the scheduler shares it fairly): the on/off ratio of the
  // two rates is the ratio of the per-byte costs, and both states see the
  // same moments of the machine (a stream cannot be sliced like TCP_RR:
  // bytes in flight drain during the other pair's slice).
  bool concurrent_stream = false;
};

// A script line that starts with "@each-port " is repeated once per pod port
// of the node (links named wft*), without that word, with @PORT@ replaced by
// the port's name and @ADDR4@ / @ADDR6@ by the pod address the node routes
// to it (/32, /128; a port without one is skipped): per-port rulesets such
// as bench/guard_variants/netdev-port.nft. Exposed for the unit test.
struct GuardPort {
  std::string name, addr4, addr6;
};
std::string ExpandPerPort(const std::string& script, const std::vector<GuardPort>& ports);

// One row per topology and metric: {topology, metric, pairs, on, off
// (medians), ratio (median of on/off), ci_low, ci_high, cost_pct, verdict}.
nlohmann::json RunGuardAb(const GuardAbOptions& opt, const Runner& runner, const std::vector<NetConfig>& configs);

// Median of `ratios` and its bootstrap 95 % interval (2000 resamples, fixed
// seed): {median, low, high}.
std::array<double, 3> MedianWithCi(const std::vector<double>& ratios);

}  // namespace weft::bench
