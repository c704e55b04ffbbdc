#pragma once
// Prometheus text exposition for the agent, and the tiny HTTP server that
// serves /metrics, /healthz and /readyz.
//
// The server opens its own listening socket here rather than in src/sys: it
// is the agent's only socket besides libcurl's and netlink's, serves three
// fixed paths on a single thread, and wrapping it behind a sys:: seam would
// only move ~80 lines without making anything testable that is not already
// (the integration tests scrape it).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "agent/control_plane.h"
#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::agent {

// Written by the reconcile loop, read by the server thread.
struct AgentMetrics {
  std::atomic<uint64_t> peers{0};           // peers in the last desired state
  std::atomic<uint64_t> peers_v4{0};        // of those, with their IPv4 pod CIDR routed
  std::atomic<uint64_t> peers_v6{0};        // with their IPv6 pod CIDR routed
  std::atomic<uint64_t> vxlan_peers{0};
  std::atomic<uint64_t> direct_peers{0};
  std::atomic<uint64_t> skipped_peers{0};
  std::atomic<uint64_t> reconciles{0};
  std::atomic<uint64_t> reconcile_errors{0};
  std::atomic<uint64_t> kernel_reads{0};    // passes that dumped the kernel (full passes)
  std::atomic<uint64_t> changes{0};         // kernel entries added/replaced/removed
  std::atomic<uint64_t> duration_us_sum{0};
  std::atomic<uint64_t> last_duration_us{0};
  std::atomic<int64_t> last_reconcile_unix_ms{0};
  std::atomic<int64_t> heartbeat_unix_ms{0};  // the loop is alive
  std::atomic<bool> ready{false};
};

// `auth` (may be null): the control plane's credential health; `auth_bound`
// is the time after which refusals fail /healthz (weft_controlplane_auth_failing).
std::string RenderMetrics(const AgentMetrics& m, const ControlPlaneStats& cp, const std::string& control_plane,
                          const AuthHealth* auth = nullptr,
                          std::chrono::milliseconds auth_bound = std::chrono::minutes(2));

struct HttpAnswer {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class StatusServer {
 public:
  using Handler = std::function<HttpAnswer(const std::string& path)>;
  // Listens on "host:port" ("0.0.0.0:9641", "127.0.0.1:0", "[::]:9641") and
  // serves on its own thread until destroyed.
  static Result<std::unique_ptr<StatusServer>> Start(const std::string& addr, Handler handler);
  ~StatusServer();
  int port() const { return port_; }

 private:
  StatusServer(UniqueFd fd, int port, Handler h);
  void Serve();
  UniqueFd fd_;
  int port_;
  Handler handler_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace weft::agent
