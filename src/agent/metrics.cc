#include "agent/metrics.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

namespace weft::agent {

std::string RenderBuildInfo(const std::string& version, const std::string& commit) {
  auto label = [](const std::string& v) {
    if (v.empty()) return std::string("unknown");
    std::string out;
    for (char c : v) {
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out;
  };
  return "# HELP weft_build_info The release and commit weftd was built from (always 1).\n"
         "# TYPE weft_build_info gauge\n"
         "weft_build_info{version=\"" + label(version) + "\",commit=\"" + label(commit) + "\"} 1\n";
}

std::string RenderMetrics(const AgentMetrics& m, const ControlPlaneStats& cp, const std::string& control_plane,
                          const AuthHealth* auth, std::chrono::milliseconds auth_bound) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, const std::string& value,
                    const std::string& labels = "") {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + labels +
           " " + value + "\n";
  };
  auto u = [](uint64_t v) { return std::to_string(v); };
  auto secs = [](uint64_t us) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(us) / 1e6);
    return std::string(buf);
  };
  metric("weft_peers", "gauge", "Peers the node routes to.", u(m.peers.load()));
  out += "# HELP weft_peers_by_mode Peers the node routes to, by how: over VXLAN or directly (host-gw).\n"
         "# TYPE weft_peers_by_mode gauge\n";
  out += "weft_peers_by_mode{mode=\"vxlan\"} " + u(m.vxlan_peers.load()) + "\n";
  out += "weft_peers_by_mode{mode=\"direct\"} " + u(m.direct_peers.load()) + "\n";
  out += "# HELP weft_peers_by_family Peers whose pod CIDR of the family the node routes to.\n"
         "# TYPE weft_peers_by_family gauge\n";
  out += "weft_peers_by_family{family=\"ipv4\"} " + u(m.peers_v4.load()) + "\n";
  out += "weft_peers_by_family{family=\"ipv6\"} " + u(m.peers_v6.load()) + "\n";
  metric("weft_peers_skipped", "gauge", "Peers left out (no MAC yet, not on link, overlapping CIDR).",
         u(m.skipped_peers.load()));
  metric("weft_reconcile_total", "counter", "Reconcile passes.", u(m.reconciles.load()));
  metric("weft_reconcile_errors_total", "counter", "Reconcile passes with at least one failed kernel change.",
         u(m.reconcile_errors.load()));
  metric("weft_reconcile_kernel_reads_total", "counter",
         "Reconcile passes that read the kernel (start, resync, after a failed incremental pass).",
         u(m.kernel_reads.load()));
  metric("weft_reconcile_changes_total", "counter", "Kernel routes, neighbours and FDB entries changed.",
         u(m.changes.load()));
  out += "# HELP weft_reconcile_duration_seconds Time spent in reconcile passes.\n"
         "# TYPE weft_reconcile_duration_seconds summary\n";
  out += "weft_reconcile_duration_seconds_sum " + secs(m.duration_us_sum.load()) + "\n";
  out += "weft_reconcile_duration_seconds_count " + u(m.reconciles.load()) + "\n";
  metric("weft_reconcile_last_duration_seconds", "gauge", "Duration of the last reconcile pass.",
         secs(m.last_duration_us.load()));
  metric("weft_controlplane_reconnects_total", "counter", "Watch streams re-opened after an error.",
         u(cp.reconnects.load()), "{backend=\"" + control_plane + "\"}");
  metric("weft_controlplane_relists_total", "counter", "Full lists of the peers.", u(cp.relists.load()),
         "{backend=\"" + control_plane + "\"}");
  metric("weft_controlplane_events_total", "counter", "Watch events applied.", u(cp.events.load()),
         "{backend=\"" + control_plane + "\"}");
  metric("weft_controlplane_errors_total", "counter", "Failed control-plane requests.", u(cp.errors.load()),
         "{backend=\"" + control_plane + "\"}");
  if (auth) {
    char since[32];
    std::snprintf(since, sizeof since, "%.3f", auth->SecondsSinceSuccess());
    metric("weft_controlplane_auth_failures_total", "counter",
           "Control-plane requests refused: HTTP 401/403 or a rejected TLS certificate.", u(auth->refusals()),
           "{backend=\"" + control_plane + "\"}");
    metric("weft_controlplane_seconds_since_success", "gauge",
           "Seconds since a control-plane request was last answered with anything but a refusal (or a watch "
           "delivered a line).",
           since, "{backend=\"" + control_plane + "\"}");
    metric("weft_controlplane_auth_failing", "gauge",
           "1 while every request has been refused for longer than --auth-failure-timeout (/healthz fails).",
           auth->Failing(auth_bound) ? "1" : "0", "{backend=\"" + control_plane + "\"}");
  }
  metric("weft_ready", "gauge", "1 once the first reconcile after a complete list succeeded.",
         m.ready.load() ? "1" : "0");
  return out;
}

namespace {

// "host:port" to httplib's host ("" = any IPv4, "[::]" = any) and port.
bool ParseHostPort(const std::string& addr, std::string* host, int* port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return false;
  *host = addr.substr(0, colon);
  std::string p = addr.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  *port = std::stoi(p);
  if (*port > 65535) return false;
  if (host->empty()) *host = "0.0.0.0";
  if (host->front() == '[') {
    if (host->back() != ']') return false;
    *host = host->substr(1, host->size() - 2);
    in6_addr a6;
    return inet_pton(AF_INET6, host->c_str(), &a6) == 1;
  }
  in_addr a4;
  return inet_pton(AF_INET, host->c_str(), &a4) == 1;
}

}  // namespace

struct StatusServer::Impl {
  httplib::Server server;
  std::atomic<bool> ended{false};  // the accept loop returned
  std::thread thread;
};

Result<std::unique_ptr<StatusServer>> StatusServer::Start(const std::string& addr, Handler handler) {
  return Start(addr, std::move(handler), Options{});
}

Result<std::unique_ptr<StatusServer>> StatusServer::Start(const std::string& addr, Handler handler, Options opts) {
  std::string host;
  int port = 0;
  if (!ParseHostPort(addr, &host, &port))
    return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                         "metrics address \"" + addr + "\" is not host:port");
  auto impl = std::make_unique<Impl>();
  httplib::Server& svr = impl->server;
  int threads = std::max(1, opts.threads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_read_timeout(opts.read_timeout);
  svr.set_write_timeout(opts.write_timeout);
  svr.set_keep_alive_timeout(opts.keep_alive.count());
  svr.set_payload_max_length(64 * 1024);
  // Without it a client that keeps its connection (Prometheus, the e2e's
  // explain checks) waits for Nagle's delayed ACK: ~28 ms per answer.
  svr.set_tcp_nodelay(true);
  // The listening socket must not leak into the tools weftd runs (nft).
  svr.set_socket_options([](socket_t sock) {
    int one = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  });
  svr.Get(".*", [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    StatusServer::Request r;
    r.path = req.path;
    r.query = StatusServer::Query(req.params.begin(), req.params.end());
    r.remote_addr = req.remote_addr;
    r.local_addr = req.local_addr;
    r.authorization = req.get_header_value("Authorization");
    HttpAnswer a = handler(r);
    res.status = a.code;
    if (!a.www_authenticate.empty()) res.set_header("WWW-Authenticate", a.www_authenticate);
    res.set_content(a.body, a.content_type.c_str());
  });
  auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("only GET\n", "text/plain");
  };
  svr.Post(".*", not_allowed);
  svr.Put(".*", not_allowed);
  svr.Patch(".*", not_allowed);
  svr.Delete(".*", not_allowed);
  svr.Options(".*", not_allowed);
  errno = 0;
  if (port == 0) {
    port = svr.bind_to_any_port(host);
    if (port < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile,
                                           "bind " + addr, errno ? errno : EADDRNOTAVAIL);
  } else if (!svr.bind_to_port(host, port)) {
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "bind " + addr, errno ? errno : EADDRINUSE);
  }
  impl->thread = std::thread([&svr, &ended = impl->ended] {
    svr.listen_after_bind();
    ended = true;
  });
  // A stop() before the accept loop runs would be lost (and the join hang).
  while (!svr.is_running() && !impl->ended.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (impl->ended.load()) {
    impl->thread.join();
    return Status::Error(Reason::kFailed, Domain::kFile, "listen " + addr + ": the server ended at once");
  }
  return std::unique_ptr<StatusServer>(new StatusServer(std::move(impl), port));
}

StatusServer::StatusServer(std::unique_ptr<Impl> impl, int port) : impl_(std::move(impl)), port_(port) {}

StatusServer::~StatusServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace weft::agent
