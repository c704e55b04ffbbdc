#pragma once
// weftd's Service proxy controller (issue 31, docs/services.md): informers on
// Services and EndpointSlices feed the pure Model (proxy_model.h); at start
// one transaction builds table inet weft-services from complete lists, and
// after that each pass sends only what its changes changed (one nfnetlink
// batch per pass, the changes of a burst coalesced), then the conntrack
// entries those changes leave wrong. Nothing is read back on that path. A
// failed transaction is followed by Model::Full(); every resync period (and
// when weftd's keeper sees part of the table deleted by someone else)
// CheckAndRepair compares the kernel's table with the model's digest and
// replaces it only on a difference (logged and counted). After each pass
// that leaves the kernel's table equal to the model (and only then, as
// kube-proxy), the healthCheckNodePort servers (health_server.h) are told
// the ports the model's eTP Local Services want, when that set changed;
// they close when Run returns. Shaped like
// policy/netpol_controller.h; knows nothing of policy or the overlay.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/list_watch.h"
#include "kube/kube_endpoint.h"
#include "services/proxy_kernel.h"

namespace weft::kube {
class KubeApi;
}  // namespace weft::kube

namespace weft::services {

// The kernel of the node weftd runs in: sys::nft::Kernel for the table,
// sys::ConntrackDelete for the cleanup; the entries it deletes are added to
// `deleted` (weft_services_conntrack_entries_deleted_total).
std::unique_ptr<ProxyKernel> NewProxyKernel(std::atomic<uint64_t>* deleted);

struct ProxyOptions {
  std::string node_name;
  // topology.kubernetes.io/zone of the node: "" = read from the Node object
  // once at start (kept "" when it has none or the read fails).
  std::string zone;
  std::vector<IpPrefix> cluster_cidrs;  // weftd's --cluster-cidr
  bool masquerade_all = false;
  std::chrono::milliseconds resync{std::chrono::seconds(30)};         // the periodic check
  std::chrono::milliseconds batch{std::chrono::milliseconds(5)};      // events coalesced this long
  int64_t watch_timeout_seconds = 300;
  // The healthCheckNodePort servers (false: none, for tests that need no
  // sockets).
  bool health_check_ports = true;
};

// A Prometheus histogram of seconds with fixed bounds. Thread-safe.
class SecondsHistogram {
 public:
  explicit SecondsHistogram(std::vector<double> bounds);
  void Observe(double seconds);
  std::string Render(const char* name, const char* help) const;
  uint64_t count() const { return count_.load(); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1 (+Inf)
  std::atomic<uint64_t> sum_ns_{0};
  std::atomic<uint64_t> count_{0};
};

// Read by the metrics endpoint (RenderProxyMetrics; docs/services.md).
struct ProxyMetrics {
  std::atomic<uint64_t> services{0};   // Services in the model (skipped ones included)
  std::atomic<uint64_t> endpoints{0};  // endpoints of the EndpointSlices known
  std::atomic<uint64_t> changes{0};    // Service and EndpointSlice changes fed to the model
  std::atomic<uint64_t> syncs{0};      // transactions applied
  std::atomic<uint64_t> full_syncs{0};
  std::atomic<uint64_t> sync_errors{0};  // transactions or conntrack deletions that failed
  std::atomic<uint64_t> checks{0};       // comparisons of the kernel's table with the model's
  std::atomic<uint64_t> repairs{0};      // ... that found a difference and replaced the table
  std::atomic<uint64_t> decode_errors{0};  // objects skipped because they did not decode
  std::atomic<uint64_t> conntrack_flushes{0};          // flushes handed to the kernel side after their transaction
  std::atomic<uint64_t> conntrack_entries_deleted{0};  // entries they deleted (NewProxyKernel)
  std::atomic<bool> ready{false};  // the first complete lists are programmed
  // What the health check ports say of the proxy (ProxyHealthy): updated
  // at every pass.
  std::atomic<bool> healthy{false};
  std::atomic<uint64_t> health_check_ports{0};         // healthCheckNodePorts listening
  std::atomic<uint64_t> health_check_port_errors{0};   // wanted ones that could not be bound, now
  // kube-proxy's sync_proxy_rules_duration_seconds: one pass (decode, model,
  // transaction, conntrack) that changed the table.
  SecondsHistogram sync_duration{{0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024,
                                  2.048, 4.096, 8.192, 16.384}};
  // kube-proxy's network_programming_duration_seconds: from an
  // EndpointSlice's endpoints.kubernetes.io/last-change-trigger-time to its
  // change being in the kernel (slices without the annotation: not observed).
  SecondsHistogram programming_duration{
      {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}};
};
std::string RenderProxyMetrics(const ProxyMetrics& m);

// kube-proxy's healthz for the health check ports' serviceProxyHealthy:
// the proxy is healthy once its first complete lists are programmed, as
// long as no change has waited unprogrammed (a failed transaction or check
// not yet followed by a successful one) for `timeout` or more (kube-proxy:
// 2 x its sync period; here 2 x --resync-period). `failing_since` is the
// first failure's time, nullopt when the last attempt succeeded.
bool ProxyHealthy(bool ready, std::optional<std::chrono::steady_clock::time_point> failing_since,
                  std::chrono::steady_clock::time_point now, std::chrono::milliseconds timeout);

// The annotation's value (RFC 3339, fractional seconds optional) as seconds
// since the epoch; nullopt when it does not parse.
std::optional<double> ParseTriggerTime(const std::string& rfc3339);

class ProxyController {
 public:
  // One KubeApi per informer thread (and one for the Node's zone).
  using ApiFactory = std::function<std::unique_ptr<kube::KubeApi>()>;
  // The node's kernel (NewProxyKernel, counting into metrics()).
  ProxyController(ProxyOptions opts, kube::KubeEndpoint endpoint);
  // Tests: informers talk to what `apis` makes.
  ProxyController(ProxyOptions opts, ApiFactory apis, std::unique_ptr<ProxyKernel> kernel);
  ~ProxyController();
  // Lists and watches until `stop`; programs every pass. Blocks.
  void Run(const std::atomic<bool>& stop);
  ProxyMetrics& metrics() { return metrics_; }
  ControlPlaneStats& stats();
  // Compares the kernel's table with the model's at the next pass (now, not
  // at the resync): weftd saw part of table inet weft-services deleted.
  // Thread-safe.
  void CheckKernelSoon();
  // ProxyKernel::SentBy: a notification of weftd's own commit.
  bool OwnCommit(uint32_t portid) const;
  // Called with true right before the whole table is sent and with false
  // once the kernel answered (weftd's agent listens to no nftables
  // notification meanwhile, as for the NetworkPolicy table: agent.h).
  // REQUIRES: set before Run.
  void SetFullSyncHook(std::function<void(bool begin)> hook);
  // For weftd's status server (GET /services/ruleset, /services/explain):
  // runs `read` over the model between two passes, so it sees what the last
  // pass programmed or is about to; false (not run) before Run built the
  // model. Thread-safe; `read` must not call back into the controller.
  bool ReadModel(const std::function<void(const Model&)>& read) const;

 private:
  struct Impl;
  ProxyMetrics metrics_;  // before impl_: Impl holds a reference to it from its construction on
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::services
