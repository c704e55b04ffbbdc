#pragma once
// The datapath: TCP throughput (iperf3) and a TCP_RR-style request/response
// loop (one byte each way, TCP_NODELAY) between two netns, for pods wired by
// each plugin on one node and for the baselines (a bare veth pair; two nodes
// over a veth underlay, and a bare kernel VXLAN on it); and pod to pod across
// two such nodes run by weftd (etcd, backend vxlan or host-gw).

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
Result<double> MeasureIperf(const PodPair& pair, int seconds);
// The TCP_RR loop on kRrPort for `seconds`: {trans_per_s, p50_us, p99_us}.
Result<nlohmann::json> MeasureRr(const PodPair& pair, int seconds);

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
};

// `configs`: plugin configurations to wire two pods with on one node (only
// those with `datapath` set and available in `control`).
nlohmann::json RunDatapath(const DatapathOptions& opt, const Runner& runner, const std::vector<NetConfig>& configs,
                           const nlohmann::json& control);

}  // namespace weft::bench
