#include "services/health_server.h"

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

#include "base/log.h"

namespace weft::services {

HealthAnswer ServiceHealthAnswer(const HealthCheck& check, bool proxy_healthy) {
  HealthAnswer a;
  a.code = check.local_endpoints != 0 && proxy_healthy ? 200 : 503;
  // kube-proxy's template, dedented; the names quoted as JSON strings.
  a.body = "{\n\t\"service\": {\n\t\t\"namespace\": " + nlohmann::json(check.ns).dump() +
           ",\n\t\t\"name\": " + nlohmann::json(check.name).dump() +
           "\n\t},\n\t\"localEndpoints\": " + std::to_string(check.local_endpoints) +
           ",\n\t\"serviceProxyHealthy\": " + (proxy_healthy ? "true" : "false") + "\n}";
  a.headers = {{"Content-Type", "application/json"}, {"X-Content-Type-Options", "nosniff"}};
  return a;
}

std::optional<std::pair<uint16_t, HealthCheck>> HealthCheckOf(const Service& svc,
                                                              const std::vector<const EndpointSlice*>& slices,
                                                              const NodeTopology& node) {
  if (!svc.skip.empty() || !svc.ExternalLocal() || svc.health_check_node_port == 0) return std::nullopt;
  size_t count = 0;
  for (bool v6 : {false, true}) {
    std::set<IpAddress> ready;  // kube-proxy's getLocalReadyEndpointIPs: by address, whatever the port
    for (const ServicePort& port : svc.ports)
      for (const PortEndpoint& ep : MergeEndpoints(slices, port, v6, node))
        if (ep.local && ep.ready) ready.insert(ep.ip);
    count = std::max(count, ready.size());
  }
  return std::make_pair(svc.health_check_node_port, HealthCheck{svc.ns, svc.name, static_cast<int>(count)});
}

// One port's server: its accept loop runs on `thread`, its requests on the
// server's pool. Destroying it stops accepting, waits for the requests in
// progress and joins every thread.
struct HealthServer::Listener {
  httplib::Server server;
  std::atomic<bool> ended{false};  // the accept loop returned
  std::thread thread;
  std::string address;

  ~Listener() {
    server.stop();
    if (thread.joinable()) thread.join();
  }
};

namespace {

// Binds `svr` to `host`:`port`; the errno of the failure, 0 on success.
int Bind(httplib::Server& svr, const char* host, uint16_t port) {
  errno = 0;
  if (svr.bind_to_port(host, port)) return 0;
  return errno ? errno : EADDRINUSE;
}

}  // namespace

HealthServer::HealthServer() : HealthServer(Options{}) {}
HealthServer::HealthServer(Options opts) : opts_(std::move(opts)) {}

HealthServer::~HealthServer() {
  std::lock_guard<std::mutex> l(sync_mu_);
  listeners_.clear();  // each joins its threads
}

bool HealthServer::ProxyHealthy() const { return !opts_.proxy_healthy || opts_.proxy_healthy(); }

HealthAnswer HealthServer::AnswerFor(uint16_t port) const {
  std::optional<HealthCheck> check;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = checks_.find(port); it != checks_.end()) check = it->second;
  }
  // A port closing under this request: no Service to name (kube-proxy
  // writes nothing then); 503 tells a load balancer the same as none.
  if (!check) return HealthAnswer{503, "", {{"X-Content-Type-Options", "nosniff"}}};
  return ServiceHealthAnswer(*check, ProxyHealthy());
}

Result<std::unique_ptr<HealthServer::Listener>> HealthServer::Listen(uint16_t port, const HealthCheck& check) {
  auto l = std::make_unique<Listener>();
  httplib::Server& svr = l->server;
  const int threads = std::max(1, opts_.threads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_read_timeout(opts_.read_timeout);
  svr.set_write_timeout(opts_.write_timeout);
  svr.set_keep_alive_timeout(opts_.keep_alive.count());
  svr.set_payload_max_length(64 * 1024);
  svr.set_tcp_nodelay(true);
  // SO_REUSEADDR (a port closed and wanted again binds despite its
  // TIME_WAIT connections), never SO_REUSEPORT (a second server on the
  // port must fail, not share it); IPv4 on the IPv6 socket too; not
  // inherited by the programs weftd runs.
  svr.set_socket_options([](socket_t sock) {
    int one = 1, zero = 0, domain = 0;
    socklen_t len = sizeof domain;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::getsockopt(sock, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_INET6)
      ::setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  });
  // kube-proxy's handler answers whatever the method and path.
  auto answer = [this, port](const httplib::Request&, httplib::Response& res) {
    HealthAnswer a = AnswerFor(port);
    res.status = a.code;
    std::string type = "text/plain";
    for (const auto& [k, v] : a.headers) {
      if (k == "Content-Type")
        type = v;
      else
        res.set_header(k, v);
    }
    res.set_content(a.body, type.c_str());
  };
  svr.Get(".*", answer);  // and HEAD
  svr.Post(".*", answer);
  svr.Put(".*", answer);
  svr.Patch(".*", answer);
  svr.Delete(".*", answer);
  svr.Options(".*", answer);

  // Both families on one socket; IPv4 alone when [::] cannot be bound.
  int err = Bind(svr, "::", port);
  l->address = "[::]";
  if (err) {
    const int err6 = err;
    err = Bind(svr, "0.0.0.0", port);
    l->address = "0.0.0.0";
    if (err && err6 != EAFNOSUPPORT && err6 != EADDRNOTAVAIL) err = err6;
  }
  if (!err) {
    l->thread = std::thread([&svr, &ended = l->ended] {
      svr.listen_after_bind();
      ended = true;
    });
    // A stop() before the accept loop runs would be lost (and the join hang).
    while (!svr.is_running() && !l->ended.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (l->ended.load()) err = EIO;
  }
  if (err)
    return Status::FromErrno(Reason::kFailed, Domain::kKernel,
                             "health check node port " + std::to_string(port) + " of Service " + check.ns + "/" +
                                 check.name + ": listen",
                             err);
  return l;
}

HealthSyncResult HealthServer::Sync(const std::map<uint16_t, HealthCheck>& desired) {
  std::lock_guard<std::mutex> sync(sync_mu_);
  HealthSyncResult result;
  {
    // New counts first: a port kept answers them from now on.
    std::lock_guard<std::mutex> l(mu_);
    checks_ = desired;
  }
  // Close what is no longer wanted, outside mu_: a request in progress may
  // be waiting for it, and closing waits for the requests.
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (desired.count(it->first)) {
      ++it;
      continue;
    }
    WEFT_LOG(kInfo, "closed a health check node port", {"port", it->first});
    result.closed.push_back(it->first);
    it = listeners_.erase(it);
  }
  std::map<uint16_t, std::string> errors, addresses;
  for (const auto& [port, check] : desired) {
    if (auto it = listeners_.find(port); it != listeners_.end()) {
      addresses[port] = it->second->address;
      continue;
    }
    auto l = Listen(port, check);
    if (!l.ok()) {
      Status st = l.status();
      {
        std::lock_guard<std::mutex> lk(mu_);
        auto before = errors_.find(port);
        if (before == errors_.end() || before->second != st.ToString())
          WEFT_LOG(kWarn, "cannot open a health check node port", {"port", port},
                   {"service", check.ns + "/" + check.name}, {"err", st.ToString()});
      }
      errors[port] = st.ToString();
      result.failed.emplace(port, std::move(st));
      continue;
    }
    WEFT_LOG(kInfo, "opened a health check node port", {"port", port}, {"service", check.ns + "/" + check.name},
             {"address", (*l)->address});
    addresses[port] = (*l)->address;
    result.opened.push_back(port);
    listeners_.emplace(port, std::move(*l));
  }
  std::lock_guard<std::mutex> l(mu_);
  errors_ = std::move(errors);
  addresses_ = std::move(addresses);
  return result;
}

HealthPortState HealthServer::StateLocked(uint16_t port, const HealthCheck& check, bool healthy) const {
  HealthPortState s;
  s.port = port;
  s.check = check;
  if (auto it = addresses_.find(port); it != addresses_.end()) {
    s.listening = true;
    s.address = it->second;
  }
  if (auto it = errors_.find(port); it != errors_.end()) s.error = it->second;
  s.code = ServiceHealthAnswer(check, healthy).code;
  return s;
}

std::vector<HealthPortState> HealthServer::States() const {
  const bool healthy = ProxyHealthy();
  std::vector<HealthPortState> out;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [port, check] : checks_) out.push_back(StateLocked(port, check, healthy));
  return out;
}

std::optional<HealthPortState> HealthServer::StateOf(const std::string& ns, const std::string& name) const {
  const bool healthy = ProxyHealthy();
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [port, check] : checks_)
    if (check.ns == ns && check.name == name) return StateLocked(port, check, healthy);
  return std::nullopt;
}

}  // namespace weft::services
