#pragma once
// The control path: CNI plugins exec'd the way a runtime execs them (fork,
// setns into the node netns, execve with the CNI_* environment and the
// network config on stdin), each pod in its own netns, conflists chained with
// prevResult as libcni does.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sys/netns.h"

namespace weft::bench {

// One network configuration under test (a conflist).
struct NetConfig {
  std::string key;    // "weft-routed"
  std::string label;  // "weft routed"
  std::vector<nlohmann::json> plugins;
  bool weft = false;
  // Required configurations must work: if they do not, the benchmark itself
  // is broken (exit 1). Optional ones (features still being built) are
  // reported as "not available yet".
  bool required = false;
  // Sends runtimeConfig.portMappings (one hostPort per pod) and checks, on
  // the probe pod, that the port really got a DNAT rule.
  bool host_port = false;
  bool datapath = false;  // also measured pod->pod on one node
  bool control = true;     // measured on the control path (false: datapath only)
};

// The configurations of the suite, with private data dirs under `tmp`.
std::vector<NetConfig> SuiteConfigs(const std::string& tmp);

// A node under test: its netns and the data dir its plugins keep state in
// (substituted for "@DATA@" in every plugin config).
struct Node {
  std::string name;
  sys::Netns ns;
  std::string data_dir;
};

struct Pod {
  std::string id;      // CNI_CONTAINERID
  std::string netns;   // name under /run/netns
  std::string k8s_ns = "bench";  // K8S_POD_NAMESPACE in CNI_ARGS
  int host_port = 0;
  nlohmann::json result;  // the ADD result, sent back as prevResult on DEL
};

struct OpResult {
  bool ok = false;
  double ms = 0;
  std::string error;
};

// Execs plugin chains. Thread-safe (no shared mutable state).
class Runner {
 public:
  // `cni_path`: directories searched for plugin binaries, in order.
  explicit Runner(std::vector<std::string> cni_path) : cni_path_(std::move(cni_path)) {}
  // ADD stores the final result in pod.result.
  OpResult Add(const NetConfig& cfg, const Node& node, Pod& pod) const;
  OpResult Del(const NetConfig& cfg, const Node& node, const Pod& pod) const;

 private:
  std::vector<std::string> cni_path_;
};
// A fresh node netns (see CreateNode) with a private data dir.
Result<Node> MakeNode(const std::string& prefix, const std::string& name, int octet);
// Removes the pods' netns, the node netns and its data dir.
void DropNode(const Node& node, const std::vector<Pod>& pods);
// The first IPv4 address of an ADD result, without its prefix length.
std::string PodIp(const nlohmann::json& result);

struct ControlOptions {
  std::string prefix;
  std::vector<int> levels;  // pods already on the node
  int samples = 40;         // ADD+DEL pairs measured at each level
  int parallel_pods = 240;
  int parallel_workers = 8;
  // Rounds of the parallel phase for weft's configurations, each on a fresh
  // node (the reference plugins run one: their rounds take minutes).
  int parallel_rounds = 1;
  // Wall-time budget of one configuration's fill + samples. A plugin whose
  // ADD grows with pod count (portmap lists the whole nat table per call)
  // stops at the last level it finished within it, and the report says so.
  int budget_s = 420;
  bool quick = false;
};

// Per pod count: ADD and DEL latency of one more pod; then the 8-way
// parallel throughput on a fresh node. Returns the config's JSON section;
// {"available": false, "reason": ...} when the probe ADD fails.
nlohmann::json RunControl(const NetConfig& cfg, int index, const ControlOptions& opt, const Runner& runner);

struct FloorOptions {
  std::string prefix;
  std::string floor_bin, noop_bin;
  int samples = 200;
};

// The kernel floor in-process, the same work exec'd as a static binary, the
// kernel's own veth deletion, and a no-op exec (static and dynamic).
nlohmann::json RunFloor(const FloorOptions& opt);

}  // namespace weft::bench
