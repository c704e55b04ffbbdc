#include "agent/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/log.h"

namespace weft::agent {

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

bool ParseHostPort(const std::string& addr, sockaddr_storage* ss, socklen_t* len) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = addr.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(addr.substr(colon + 1));
  } catch (...) {
    return false;
  }
  if (port < 0 || port > 65535) return false;
  std::memset(ss, 0, sizeof *ss);
  if (!host.empty() && host.front() == '[' && host.back() == ']') {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &s6->sin6_addr) != 1) return false;
    *len = sizeof *s6;
    return true;
  }
  auto* s4 = reinterpret_cast<sockaddr_in*>(ss);
  s4->sin_family = AF_INET;
  s4->sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty()) host = "0.0.0.0";
  if (inet_pton(AF_INET, host.c_str(), &s4->sin_addr) != 1) return false;
  *len = sizeof *s4;
  return true;
}

const char* Reason(int code) {
  switch (code) {
    case 200: return "OK";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    default: return "Service Unavailable";
  }
}

}  // namespace

Result<std::unique_ptr<StatusServer>> StatusServer::Start(const std::string& addr, Handler handler) {
  sockaddr_storage ss;
  socklen_t len = 0;
  if (!ParseHostPort(addr, &ss, &len))
    return Status::Error(Code::kInvalidConfig, "metrics address \"" + addr + "\" is not host:port");
  UniqueFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Status::FromErrno(Code::kIo, "socket for " + addr, errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    return Status::FromErrno(Code::kIo, "bind " + addr, errno);
  if (::listen(fd.get(), 16) != 0) return Status::FromErrno(Code::kIo, "listen " + addr, errno);
  sockaddr_storage bound;
  socklen_t blen = sizeof bound;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &blen);
  int port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<StatusServer>(new StatusServer(std::move(fd), port, std::move(handler)));
}

StatusServer::StatusServer(UniqueFd fd, int port, Handler h)
    : fd_(std::move(fd)), port_(port), handler_(std::move(h)) {
  thread_ = std::thread([this] { Serve(); });
}

StatusServer::~StatusServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void StatusServer::Serve() {
  while (!stop_.load()) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    UniqueFd c(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c.valid()) continue;
    // One short request at a time; a client gets 2 s to send its headers.
    std::string req;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 8192) {
      pollfd cp{c.get(), POLLIN, 0};
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now())
                                      .count());
      if (left <= 0 || ::poll(&cp, 1, left) <= 0) break;
      char buf[2048];
      ssize_t n = ::read(c.get(), buf, sizeof buf);
      if (n <= 0) break;
      req.append(buf, static_cast<size_t>(n));
    }
    size_t sp1 = req.find(' ');
    size_t sp2 = sp1 == std::string::npos ? sp1 : req.find(' ', sp1 + 1);
    HttpAnswer a;
    if (sp2 == std::string::npos) {
      a = {400, "text/plain", "bad request\n"};
    } else if (req.compare(0, sp1, "GET") != 0) {
      a = {405, "text/plain", "only GET\n"};
    } else {
      std::string path = req.substr(sp1 + 1, sp2 - sp1 - 1);
      if (size_t q = path.find('?'); q != std::string::npos) path.resize(q);
      a = handler_(path);
    }
    std::string resp = "HTTP/1.1 " + std::to_string(a.code) + " " + Reason(a.code) +
                       "\r\nContent-Type: " + a.content_type + "\r\nContent-Length: " +
                       std::to_string(a.body.size()) + "\r\nConnection: close\r\n\r\n" + a.body;
    size_t off = 0;
    while (off < resp.size()) {
      ssize_t n = ::send(c.get(), resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }
}

}  // namespace weft::agent
