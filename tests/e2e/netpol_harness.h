#pragma once
// The NetworkPolicy e2e harness, on the model of upstream Kubernetes'
// test/e2e/network/netpol: namespaces x, y, z (labels ns=x, ...) with pods
// a, b, c each (labels pod=a, ...), spread over two weftd nodes, every pod
// running `netpol_agent serve` (TCP 80 and 81, UDP 80, SCTP 80 where the
// kernel has it) behind the named ports serve-80-tcp, serve-81-tcp,
// serve-80-udp and serve-80-sctp. A case states the expected reachability
// matrix per protocol and port (Reachability), and the harness probes the
// full matrix (every pod to every pod, itself included; all ports of a check
// at once, in parallel) until it matches or the deadline passes; a mismatch
// prints the expected and observed tables like upstream's TruthTable.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/cluster.h"
#include "e2e/kube_api.h"

namespace weft::testing::netpol {

enum class L4 { kTcp, kUdp, kSctp };

struct PortSpec {
  L4 proto;
  int port;
  std::string Name() const;                          // "TCP/80"
  std::string Target(const std::string& ip) const;  // "tcp:IP:80" (netpol_agent's form)
};
inline PortSpec Tcp(int port) { return {L4::kTcp, port}; }
inline PortSpec Udp(int port) { return {L4::kUdp, port}; }
inline PortSpec Sctp(int port) { return {L4::kSctp, port}; }

// Upstream's Peer: a namespace and a pod name, either empty for "any".
struct Peer {
  std::string ns;
  std::string pod;
  bool Matches(const std::string& key) const;  // key "x/a"
};

// The expected (or observed) connectivity between pods, keyed "ns/pod";
// rows are sources, columns destinations. A pod to itself is always
// allowed (issue 12: "Always allowed: a pod to itself"), so the Expect
// helpers leave the diagonal alone.
class Reachability {
 public:
  explicit Reachability(std::vector<std::string> pods, bool allowed = true);
  void Expect(const std::string& from, const std::string& to, bool allowed);
  // Every source to `to` (its ingress) / `from` to every destination.
  void ExpectAllIngress(const std::string& to, bool allowed);
  void ExpectAllEgress(const std::string& from, bool allowed);
  void ExpectPeer(const Peer& from, const Peer& to, bool allowed);
  bool Get(const std::string& from, const std::string& to) const;
  void Set(const std::string& from, const std::string& to, bool allowed);  // incl. the diagonal
  const std::vector<std::string>& pods() const { return pods_; }
  bool operator==(const Reachability& o) const { return pods_ == o.pods_ && cells_ == o.cells_; }
  // Rows from, columns to: `.` allowed, `X` denied; with `expected`, a cell
  // that differs from it is followed by `*`.
  std::string Table(const Reachability* expected = nullptr) const;

 private:
  size_t Index(const std::string& pod) const;
  std::vector<std::string> pods_;
  std::vector<char> cells_;  // row-major, 1 = allowed
};

// One port's expectation in a check.
struct Expectation {
  PortSpec port;
  Reachability reach;
};

// One probe outside the pod matrix (node, underlay, ClusterIP, hostPort...).
struct Probe {
  const TestNetns* from;
  std::string from_label;
  std::string target;  // "tcp:IP:PORT"
  bool allowed;
  std::string source;  // --source address, "" = the kernel's choice
  std::string responder;  // when allowed and non-empty: the reply must name this pod
};

struct ProbeResult {
  bool ok = false;
  std::string detail;  // the responder's name when ok, the failure's reason otherwise
};

// A pod of the matrix (or one a case adds): the CNI attachment, its agent
// and the Pod object posted for it.
struct NetpolPod {
  std::string ns;
  std::string name;
  WeftNode* node = nullptr;
  std::unique_ptr<Pod> pod;
  std::unique_ptr<Child> agent;
  nlohmann::json object;  // as last applied
  std::string key() const { return ns + "/" + name; }
  std::string ip() const { return pod ? pod->ip : ""; }
};

// What a NetpolCluster is made of; the defaults are the e2e suite's.
struct ClusterOptions {
  // The matrix pods, "namespace/name", in matrix order, placed on n1 and n2
  // alternately. Their namespaces are created with the label ns=<namespace>;
  // each pod is labelled pod=<name>.
  std::vector<std::string> pods = {"x/a", "x/b", "x/c", "y/a", "y/b", "y/c", "z/a", "z/b", "z/c"};
  // The underlay netns' suffix: a different one lets this cluster run beside
  // another virtual cluster of the same process (the demo's etcd chapter).
  std::string underlay = "ul";
  // State and logs; "" for a fresh TempDir("netpol"). Removed with the cluster.
  std::string dir;
  // Polled while setting up and between CheckMatrix rounds; once it returns
  // true, set-up stops with error() "interrupted" and CheckMatrix returns
  // "interrupted" (the demo's Ctrl-C).
  std::function<bool()> cancelled;
  // Flags every weftd gets after the suite's (e.g. {"--metrics-addr", "0.0.0.0:9641"}).
  std::vector<std::string> weftd_flags;
  // Each weftd authenticates with its own pod-bound token, as on a real
  // cluster: ServiceAccount kube-system/weftd and a hostNetwork Pod
  // kube-system/weftd-<node> on each node, the token bound to it (its user
  // names the node: the stand-in's writes log says who wrote what).
  bool pod_bound_tokens = false;
};

// The virtual cluster the cases share: underlay, API server, two nodes
// (n1 192.0.2.11 with 10.245.1.0/24, n2 192.0.2.12 with 10.245.2.0/24)
// running weftd with --network-policy, and the matrix pods (by default the
// nine of x/y/z × a/b/c).
class NetpolCluster {
 public:
  static constexpr int kProbeTimeoutMs = 1000;
  static constexpr int kDeadlineMs = 5000;
  // CheckMatrix and CheckProbes poll with kPollProbeMs probes, a round at
  // most every kPollGapMs; a match is confirmed with kProbeTimeoutMs ones.
  static constexpr int kPollProbeMs = 200;
  static constexpr int kPollGapMs = 100;

  NetpolCluster() : NetpolCluster(ClusterOptions{}) {}
  explicit NetpolCluster(ClusterOptions options);
  ~NetpolCluster();
  // "" once the cluster is up with every matrix pod serving; else why not.
  const std::string& error() const { return error_; }

  FakeApiServer& api() { return *api_; }
  Underlay& underlay() { return *ul_; }
  WeftNode& node(int i) { return *nodes_.at(i); }
  int node_count() const { return static_cast<int>(nodes_.size()); }
  const std::vector<std::string>& pod_keys() const { return keys_; }
  NetpolPod& pod(const std::string& key);
  bool sctp() const { return sctp_; }
  const std::string& root() const { return root_; }

  // The canonical objects.
  static nlohmann::json NamespaceObject(const std::string& ns);
  static nlohmann::json PodObject(const NetpolPod& p, const nlohmann::json& labels,
                                  const nlohmann::json& ports);
  static nlohmann::json DefaultPorts();

  // Adds a pod beyond the matrix (attached, serving; its Pod object is
  // posted only when `post` is set). Removed by RemoveExtraPods.
  NetpolPod& AddPod(const std::string& ns, const std::string& name, int node,
                    nlohmann::json runtime_config = nullptr, bool post = true);
  void PostPod(NetpolPod& p, nlohmann::json labels = nullptr, nlohmann::json ports = nullptr);
  void RemoveExtraPods();

  // Policies applied through ApplyPolicy are deleted by DeletePolicies (a
  // "kind": "ClusterNetworkPolicy" goes to its own API; DeletePolicies deletes
  // every ClusterNetworkPolicy).
  nlohmann::json ApplyPolicy(const nlohmann::json& policy);
  void DeletePolicy(const std::string& ns, const std::string& name);
  void DeletePolicies();
  // Replaces a matrix namespace's labels (RestoreObjects puts them back).
  void LabelNamespace(const std::string& ns, const nlohmann::json& labels);
  // Re-posts the canonical Namespace and Pod objects of the matrix that a
  // case changed.
  void RestoreObjects();

  // Probes targets from one netns, all at once. `resend_ms` > 0: UDP
  // datagrams go out at that interval (netpol_agent --resend-ms).
  std::vector<ProbeResult> ProbeFrom(const TestNetns& from, const std::vector<std::string>& targets,
                                     int timeout_ms = kProbeTimeoutMs, const std::string& source = "",
                                     int resend_ms = 0);
  // One round of the full matrix for each port (every source in parallel).
  std::vector<Reachability> ProbeMatrix(const std::vector<PortSpec>& ports, std::string* notes,
                                        int timeout_ms = kProbeTimeoutMs);
  // Probes until every matrix equals its expectation, or `deadline_ms`.
  // Returns "" on a match, else the tables of the last round (and notes).
  // `took`: from the call to the start of the matching round. A denied cell
  // is a probe that got no answer: the polling rounds give up on it after
  // kPollProbeMs (an allowed cell is an answer, proven at any timeout), and
  // a round that matches so is repeated with `probe_timeout_ms` probes,
  // which alone decide a match with a denied cell in it, as the last round
  // before a failure does.
  std::string CheckMatrix(const std::vector<Expectation>& want, int deadline_ms = kDeadlineMs,
                          std::chrono::milliseconds* took = nullptr, int probe_timeout_ms = kProbeTimeoutMs);
  // After a CheckMatrix that matched: weftd's `explain` must agree with the
  // matrices that round probed. Every cell (every port) is asked of weftd
  // (GET /netpol/explain by address, as the datapath sees the packet;
  // alternately n1's and n2's weftd, skipping a stopped one), and `weftctl
  // policy explain` runs by pod name for one allowed and one denied cell of
  // each port (its exit code 0/1 must match). "" when all agree, else each
  // disagreement with weftd's reason. A cell that disagrees is asked again
  // after 500 ms (the other node's model may trail by a batch).
  std::string CheckExplain();
  // `weftctl policy explain ARGS...` inside node `i`: its exit code, stdout and stderr.
  int WeftctlExplain(int i, const std::vector<std::string>& args, std::string* out, std::string* err = nullptr);
  // The same for probes outside the matrix (polled the same way; with
  // `deadline_ms` 0, one round of kProbeTimeoutMs probes).
  std::string CheckProbes(const std::vector<Probe>& want, int deadline_ms = kDeadlineMs);
  // Probes `target` from `from` until the result is `want`; the time from
  // the call until then, or -1 after `deadline_ms`. A UDP target that
  // should open is watched with a datagram every 2 ms; otherwise a probe
  // with a 20 ms timeout runs back to back (a denial is confirmed with a
  // full-timeout probe).
  long WaitProbe(const TestNetns& from, const std::string& target, bool want, int deadline_ms = kDeadlineMs);

  // What a failing case prints: weftd log tails, each node's netpol table,
  // the API server's log tail.
  std::string Diagnostics();
  // True when both weftd processes are still running.
  bool Healthy();

  // Starts weftd on node i with the suite's flags, then `extra_flags`
  // (e.g. {"--netpol-recheck-established=false"}).
  void StartWeftd(int i, const std::vector<std::string>& extra_flags = {});

 private:
  std::string Setup();
  bool Cancelled() const { return options_.cancelled && options_.cancelled(); }
  ClusterOptions options_;
  std::string root_;
  std::string error_;
  std::unique_ptr<Underlay> ul_;
  std::unique_ptr<FakeApiServer> api_;
  std::vector<std::unique_ptr<WeftNode>> nodes_;
  std::vector<std::string> kubeconfigs_;  // per node with pod_bound_tokens
  std::vector<std::string> keys_;
  std::map<std::string, std::unique_ptr<NetpolPod>> pods_;   // the matrix
  std::vector<std::unique_ptr<NetpolPod>> extra_;           // added by cases
  std::vector<std::pair<std::string, std::string>> policies_;  // (ns, name)
  std::vector<std::string> relabelled_namespaces_;
  bool sctp_ = false;
  std::vector<Expectation> last_probed_;  // what CheckMatrix's matching round observed
};

// The binary run inside pods.
std::string AgentPath();

}  // namespace weft::testing::netpol
