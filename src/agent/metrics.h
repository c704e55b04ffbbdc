#pragma once
// Prometheus text exposition for the agent, and the HTTP server that serves
// /metrics, /healthz, /readyz (and /netpol, /netpol/ruleset,
// /netpol/explain, /drops: Agent::Serve routes the paths).
//
// The server is cpp-httplib (Debian's libcpp-httplib) with a small thread
// pool: a client that holds a connection open or sends its request slowly
// ties up one worker, never the probes behind it. Only weftd links it (the
// CNI plugin never does).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "agent/control_plane.h"
#include "base/auth_health.h"
#include "base/status.h"

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

// weft_build_info{version="0.3.0",commit="3a51fbe1c2d4"} 1: which release
// and commit this weftd is ("" renders as "unknown"). Label values are
// escaped as the exposition format requires.
std::string RenderBuildInfo(const std::string& version, const std::string& commit);

// `auth` (may be null): the control plane's credential health; `auth_bound`
// is the time after which refusals fail /healthz (weft_controlplane_auth_failing).
std::string RenderMetrics(const AgentMetrics& m, const ControlPlaneStats& cp, const std::string& control_plane,
                          const AuthHealth* auth = nullptr,
                          std::chrono::milliseconds auth_bound = std::chrono::minutes(2));

struct HttpAnswer {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string www_authenticate;  // the WWW-Authenticate header of a 401 ("" = none)
};

class StatusServer {
 public:
  // `query`: the request's query parameters, decoded ("/netpol/explain?src=x%2Fa" gives {"src", "x/a"}).
  using Query = std::multimap<std::string, std::string>;
  // What the handler knows of a request: enough to tell a caller on the
  // node's loopback from one on the network, and its credentials.
  struct Request {
    std::string path;
    Query query;
    std::string remote_addr;    // the peer's address, "" when unknown
    std::string local_addr;     // the address the request came to
    std::string authorization;  // the Authorization header as sent ("" = none)
  };
  using Handler = std::function<HttpAnswer(const Request& req)>;
  struct Options {
    int threads = 8;  // connections served at once; more wait for a free worker
    std::chrono::milliseconds read_timeout{std::chrono::seconds(2)};   // per read of a request
    std::chrono::milliseconds write_timeout{std::chrono::seconds(2)};  // per write of an answer
    std::chrono::seconds keep_alive{2};  // an idle kept-alive connection is closed after this
  };
  // Listens on "host:port" ("0.0.0.0:9641", "127.0.0.1:0", "[::]:9641") and
  // serves GET (and HEAD) of any path through `handler`, which must be
  // thread-safe: it runs on several workers at once. Other methods get 405.
  static Result<std::unique_ptr<StatusServer>> Start(const std::string& addr, Handler handler);
  static Result<std::unique_ptr<StatusServer>> Start(const std::string& addr, Handler handler, Options opts);
  // Stops accepting, then waits for the requests in progress.
  ~StatusServer();
  int port() const { return port_; }

 private:
  struct Impl;
  StatusServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_;
};

}  // namespace weft::agent
