#pragma once
// A virtual cluster for weftd tests: an "underlay" netns holding a bridge
// (192.0.2.254/24), node netns (testutil TestNode) whose uplink veth's far
// end is moved onto that bridge, a real etcd listening on the bridge
// address inside the underlay netns, and weftd processes run inside their
// node netns. Everything is named with testing::Prefix() and torn down in
// destructors (children are SIGKILLed and reaped).

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "testutil/netns_fixture.h"

namespace weft::testing {

// A child process started inside a netns (via `ip netns exec`, which execs
// the program, so pid() is the program's own pid). Output goes to a file.
class Child {
 public:
  Child(const std::string& netns, const std::vector<std::string>& argv, const std::string& log_path);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Sends `sig` and waits up to `ms` for exit; SIGKILLs after that.
  int Stop(int sig = 15, int ms = 5000);
  bool Running();

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

// Polls `pred` every `step_ms` until it holds or `timeout_ms` passes.
bool WaitFor(const std::function<bool()>& pred, int timeout_ms, int step_ms = 50);

// Runs `fn` on a thread inside `ns` (sockets opened there stay there).
Status InNetns(const TestNetns& ns, const std::function<Status()>& fn);

class Underlay : public TestNetns {
 public:
  // The netns is named Prefix()-<suffix>: a second underlay with another
  // suffix can exist beside the first (separate L2, same addresses).
  explicit Underlay(const std::string& suffix = "ul");
  // Moves the node's up1 onto the bridge (renamed to "p<octet>").
  void Attach(const TestNetns& node, int octet);
  // Adds kIp6/64 to the bridge (no DAD wait): an IPv6 or dual-stack underlay.
  void EnableIpv6();
  static constexpr const char* kIp = "192.0.2.254";
  static constexpr const char* kIp6 = "2001:db8::fe";
  // br0's fixed MAC (cluster.cc says why it is fixed).
  static constexpr const char* kMac = "02:c0:00:02:fe:fe";
};

class Etcd {
 public:
  // Listens on <host>:2379 inside `ns` (Underlay::kIp6 on an IPv6-only
  // underlay).
  Etcd(const TestNetns& ns, std::string dir, std::string host = Underlay::kIp);
  ~Etcd();
  void Start();
  void Stop(int sig = 15);
  std::string endpoint() const;
  // Waits until /health answers inside the netns.
  bool WaitHealthy(int timeout_ms = 15000);

 private:
  const TestNetns& ns_;
  std::string dir_;
  std::string host_;
  std::unique_ptr<Child> proc_;
  int starts_ = 0;
};

// One node: netns with its uplink on the underlay, and its weftd.
struct WeftNode {
  WeftNode(Underlay& ul, const std::string& name, int octet, const std::string& root_dir);
  std::string name;
  int octet;
  TestNode ns;
  std::string dir;  // conf dir, state, logs
  std::unique_ptr<Child> weftd;
  std::string ip() const { return "192.0.2." + std::to_string(octet); }
  std::string conf_dir() const { return dir + "/net.d"; }
  std::string log() const { return dir + "/weftd.log"; }
  // The last `max_bytes` of weftd's log, under a header naming the node
  // (what a failing test prints).
  std::string LogTail(size_t max_bytes) const;
  // Starts weftd with the standard test flags plus `extra` (its status
  // server on 127.0.0.1:9641 unless `extra` has a --metrics-addr).
  void StartWeftd(const std::vector<std::string>& extra);
  void StopWeftd(int sig = 15);
  // The plugin config (first plugin of the written conflist, with name and
  // cniVersion), or "" if the conflist is not there.
  std::string PluginConf() const;
  // GET http://127.0.0.1:9641<path> from inside the node ("" on failure).
  std::string Http(const std::string& path, int* code = nullptr) const;
  // A metric's value (-1 if absent).
  double Metric(const std::string& name) const;
  // Routes with protocol 201 and a gateway: "dst via gw dev".
  std::vector<std::string> AgentRoutes() const;
};

// A pod attached through the real plugin, from the node's conflist.
// `cni_args` is passed as CNI_ARGS ("K8S_POD_NAMESPACE=x;K8S_POD_NAME=a")
// and `runtime_config` as the conf's runtimeConfig (e.g. portMappings), at
// ADD and at DEL; both are left out when empty.
struct Pod {
  Pod(WeftNode& node, const std::string& name, std::string cni_args = "",
      nlohmann::json runtime_config = nullptr);
  ~Pod();
  WeftNode& node;
  std::string cid;
  TestNetns ns;
  std::string ip;
  std::string add_error;
  std::string cni_args;
  nlohmann::json runtime_config;
  // The conf and env this pod's plugin runs with (for ADD or DEL).
  std::string Conf() const;
  std::map<std::string, std::string> Env(const std::string& cmd) const;
};

}  // namespace weft::testing
