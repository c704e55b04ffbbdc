#pragma once
// The healthCheckNodePort servers (kube-proxy's pkg/proxy/healthcheck
// service_health.go): for each Service with externalTrafficPolicy Local and
// a healthCheckNodePort, an HTTP server on that port, on every address of
// the node in both families, that tells a cloud load balancer whether this
// node has endpoints of the Service to send its traffic to. Any method, any
// path: 200 with this node's ready local endpoint count when there is one,
// 503 when there is none (only terminating ones count as none), the body
// and headers as kube-proxy writes them.
//
// The port and count a Service needs (HealthCheckOf) and the answer for a
// count (ServiceHealthAnswer) are pure functions; the HealthServer keeps one cpp-httplib server per port and is told the whole
// desired set at each Sync (level-triggered): ports no longer wanted close,
// new ones open, counts change in place without touching a listener.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "services/endpoints.h"
#include "services/service_types.h"

namespace weft::services {

// One healthCheckNodePort as the proxy wants it served.
struct HealthCheck {
  std::string ns, name;  // the Service
  // This node's ready endpoints of the Service, counted by address across
  // its ports (kube-proxy's LocalReadyEndpoints: 10.0.0.1:80 and
  // 10.0.0.1:443 are one); serving-but-terminating ones are not counted.
  int local_endpoints = 0;
  auto operator<=>(const HealthCheck&) const = default;
};

// The health check `svc` needs on this node, from its `slices` (as
// MergeEndpoints takes them): none unless the proxy serves it, its
// externalTrafficPolicy Local counts (an externally accessible Service) and
// it has a healthCheckNodePort. The count is kube-proxy's: this node's
// ready endpoints of any of its ports, by address. kube-proxy runs one
// proxier per family and reports the family that synced last; here it is
// the larger of the two families' counts (a dual-stack pod is one endpoint,
// as in either family).
std::optional<std::pair<uint16_t, HealthCheck>> HealthCheckOf(const Service& svc,
                                                              const std::vector<const EndpointSlice*>& slices,
                                                              const NodeTopology& node);

// What a request to a health check port gets.
struct HealthAnswer {
  int code = 0;  // 200 or 503
  std::string body;
  // The headers kube-proxy sets, in its order (the server adds the
  // framing ones: Content-Length, Connection, Keep-Alive).
  std::vector<std::pair<std::string, std::string>> headers;
};

// The answer for `check`: 200 when it has local endpoints and the proxy is
// healthy, else 503, and kube-proxy's body, byte for byte:
//   {
//   <TAB>"service": {
//   <TAB><TAB>"namespace": "default",
//   <TAB><TAB>"name": "web"
//   <TAB>},
//   <TAB>"localEndpoints": 2,
//   <TAB>"serviceProxyHealthy": true
//   }
// with no newline at the end. Content-Type application/json and
// X-Content-Type-Options nosniff.
HealthAnswer ServiceHealthAnswer(const HealthCheck& check, bool proxy_healthy = true);

// What one port serves now, for `weftctl service explain` and the logs.
struct HealthPortState {
  uint16_t port = 0;
  HealthCheck check;
  bool listening = false;
  std::string address;  // what it listens on: "[::]" (both families) or "0.0.0.0"; "" when not listening
  std::string error;    // why it is not listening (the last bind's failure), "" when it is
  int code = 0;         // what a request gets now (ServiceHealthAnswer's code)
};

// The result of one Sync.
struct HealthSyncResult {
  std::vector<uint16_t> opened;  // listening since this Sync
  std::vector<uint16_t> closed;  // no longer wanted, closed
  // Wanted but not listening (in use by another program, no permission):
  // logged, not fatal; tried again at every later Sync.
  std::map<uint16_t, Status> failed;
};

// Thread-safe: Sync, States and StateOf may be called from any thread; the
// answers are given on the servers' own threads (one accept thread and
// `threads` workers per port).
class HealthServer {
 public:
  struct Options {
    int threads = 2;  // requests served at once per port; more wait
    std::chrono::milliseconds read_timeout{std::chrono::seconds(2)};
    std::chrono::milliseconds write_timeout{std::chrono::seconds(2)};
    std::chrono::seconds keep_alive{5};
    // Whether the proxy itself is healthy (kube-proxy's healthz: synced
    // recently); none: always. Called on the servers' threads.
    std::function<bool()> proxy_healthy;
  };
  HealthServer();
  explicit HealthServer(Options opts);
  // Closes every port and joins every thread it started.
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  // Makes `desired` (port -> Service and count) what is served: the new
  // counts answer at once; ports not in it close; ports new in it, or that
  // failed before, are bound on every address of the calling thread's
  // network namespace (IPv6 and IPv4 on one socket, or IPv4 alone where the
  // namespace has no IPv6).
  HealthSyncResult Sync(const std::map<uint16_t, HealthCheck>& desired);

  // Every wanted port, by port.
  std::vector<HealthPortState> States() const;
  // The port of Service `ns`/`name`, if it has one.
  std::optional<HealthPortState> StateOf(const std::string& ns, const std::string& name) const;

 private:
  struct Listener;
  // A server on `port`, listening and serving; destroying it closes it.
  Result<std::unique_ptr<Listener>> Listen(uint16_t port, const HealthCheck& check);
  bool ProxyHealthy() const;
  HealthAnswer AnswerFor(uint16_t port) const;
  HealthPortState StateLocked(uint16_t port, const HealthCheck& check, bool healthy) const;  // REQUIRES: mu_

  Options opts_;
  std::mutex sync_mu_;  // one Sync at a time; guards listeners_
  std::map<uint16_t, std::unique_ptr<Listener>> listeners_;
  mutable std::mutex mu_;  // guards checks_ and errors_, read by the answering threads
  std::map<uint16_t, HealthCheck> checks_;
  std::map<uint16_t, std::string> errors_;
  std::map<uint16_t, std::string> addresses_;  // of the listening ports
};

}  // namespace weft::services
