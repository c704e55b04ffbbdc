#include "e2e/cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "sys/netns.h"

namespace weft::testing {

Child::Child(const std::string& netns, const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<std::string> full = {"/usr/sbin/ip", "netns", "exec", netns};
  full.insert(full.end(), argv.begin(), argv.end());
  std::vector<char*> args;
  for (auto& a : full) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
    if (::getppid() != parent) ::_exit(127);
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    char* envp[] = {const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), nullptr};
    ::execve(args[0], args.data(), envp);
    ::_exit(127);
  }
}

Child::~Child() { Stop(SIGKILL, 5000); }

void Child::Signal(int sig) {
  if (!reaped_ && pid_ > 0) ::kill(pid_, sig);
}

bool Child::Running() {
  if (reaped_ || pid_ <= 0) return false;
  if (::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

int Child::Stop(int sig, int ms) {
  if (pid_ <= 0) return -1;
  if (!reaped_) {
    ::kill(pid_, sig);
    if (sig == SIGSTOP) return 0;
    ::kill(pid_, SIGCONT);
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!reaped_) {
      if (::waitpid(pid_, &status_, WNOHANG) == pid_) {
        reaped_ = true;
        break;
      }
      if (std::chrono::steady_clock::now() > end) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status_, 0);
        reaped_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return status_;
}

bool WaitFor(const std::function<bool()>& pred, int timeout_ms, int step_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
}

Status InNetns(const TestNetns& ns, const std::function<Status()>& fn) {
  auto n = sys::Netns::Open(ns.path());
  if (!n.ok()) return n.status();
  return sys::RunInNetns(*n, fn);
}

Underlay::Underlay(const std::string& suffix) : TestNetns(suffix) {
  // The bridge's own MAC is set, never left to the kernel: a bridge whose
  // address was not set takes the lowest MAC of its ports and changes it as
  // ports join. A node that resolved 192.0.2.254 to the old address (another
  // node's port) then has its frames dropped as PACKET_OTHERHOST until its
  // neighbour entry is re-resolved: at once if etcd has something to send it
  // (the bridge ARPs for it with the new address), else 20-50 s later. That
  // was issue 25's "one weftd cannot reach the restarted etcd": the newest
  // node's random port MAC sorted lowest while the other node was between
  // connections. A switch or a host NIC does not change its MAC when another
  // host joins the segment.
  Cmd({"ip", "-n", name(), "link", "add", "br0", "address", kMac, "type", "bridge"});
  Cmd({"ip", "-n", name(), "addr", "add", std::string(kIp) + "/24", "dev", "br0"});
  Cmd({"ip", "-n", name(), "link", "set", "br0", "up"});
}

void Underlay::Attach(const TestNetns& node, int octet) {
  // Appended, not `"p" + to_string()`: GCC 12's -Wrestrict misfires on that at -O3 (PR105329).
  std::string port = "p";
  port += std::to_string(octet);
  Cmd({"ip", "-n", node.name(), "link", "set", "up1", "down"});
  Cmd({"ip", "-n", node.name(), "link", "set", "up1", "name", port});
  if (Cmd({"ip", "-n", node.name(), "link", "set", port, "netns", name()}) != 0)
    throw std::runtime_error("cannot move " + port + " to the underlay");
  Cmd({"ip", "-n", name(), "link", "set", port, "master", "br0"});
  Cmd({"ip", "-n", name(), "link", "set", port, "up"});
  // The bridge forwards through the new port only once the kernel's link
  // watcher has processed its carrier (rate-limited to once a second): until
  // then frames from the node are dropped and a weftd started right away
  // pays a 1 s SYN retransmission that a real node, whose uplink is long up,
  // never sees. Wait for the port to forward.
  WaitFor(
      [&] {
        std::string out;
        Cmd({"bridge", "-n", name(), "link", "show", "dev", port}, &out);
        return out.find("state forwarding") != std::string::npos;
      },
      3000, 10);
}

void Underlay::EnableIpv6() {
  Cmd({"ip", "-n", name(), "addr", "add", std::string(kIp6) + "/64", "dev", "br0", "nodad"});
}

Etcd::Etcd(const TestNetns& ns, std::string dir, std::string host)
    : ns_(ns), dir_(std::move(dir)), host_(std::move(host)) {}

std::string Etcd::endpoint() const {
  return host_.find(':') == std::string::npos ? "http://" + host_ + ":2379" : "http://[" + host_ + "]:2379";
}
Etcd::~Etcd() { proc_.reset(); }

void Etcd::Start() {
  proc_.reset();
  ++starts_;
  proc_ = std::make_unique<Child>(
      ns_.name(),
      std::vector<std::string>{"/usr/bin/etcd", "--name", "e0", "--data-dir", dir_ + "/data",
                               "--listen-client-urls", endpoint(), "--advertise-client-urls",
                               endpoint(), "--listen-peer-urls", "http://127.0.0.1:2380",
                               "--initial-advertise-peer-urls", "http://127.0.0.1:2380", "--initial-cluster",
                               "e0=http://127.0.0.1:2380", "--max-txn-ops", "1024", "--log-level", "warn"},
      dir_ + "/etcd.log");
}

void Etcd::Stop(int sig) {
  if (proc_) proc_->Stop(sig);
  proc_.reset();
}

bool Etcd::WaitHealthy(int timeout_ms) {
  return WaitFor(
      [&] {
        std::string out;
        ns_.Exec({"curl", "-s", "-g", "-m", "1", endpoint() + "/health"}, &out);
        return out.find("\"true\"") != std::string::npos;
      },
      timeout_ms, 100);
}

WeftNode::WeftNode(Underlay& ul, const std::string& n, int o, const std::string& root_dir)
    : name(n), octet(o), ns(n, o), dir(root_dir + "/" + n) {
  Cmd({"mkdir", "-p", dir});
  ul.Attach(ns, o);
}

void WeftNode::StartWeftd(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {BinaryPath("weftd"),
                                   "--node-name", name,
                                   "--cni-conf-dir", conf_dir(),
                                   "--state-dir", dir + "/state",
                                   "--plugin-data-dir", dir + "/ipam",
                                   "--plugin-log-file", dir + "/plugin.log",
                                   "--log-level", "debug",
                                   "--log-file", log()};
  // The loopback unless the case listens elsewhere (on the node's address).
  if (std::find(extra.begin(), extra.end(), "--metrics-addr") == extra.end())
    argv.insert(argv.end(), {"--metrics-addr", "127.0.0.1:9641"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  weftd = std::make_unique<Child>(ns.name(), argv, dir + "/weftd.out");
}

void WeftNode::StopWeftd(int sig) {
  if (weftd) weftd->Stop(sig);
  weftd.reset();
}

std::string WeftNode::LogTail(size_t max_bytes) const {
  std::ifstream f(log());
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = s.substr(s.size() - max_bytes);
  return "---- " + name + " weftd log (tail) ----\n" + s + "\n";
}

std::string WeftNode::PluginConf() const {
  std::ifstream f(conf_dir() + "/10-weft.conflist");
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    auto list = nlohmann::json::parse(ss.str());
    auto conf = list["plugins"][0];
    conf["name"] = list["name"];
    conf["cniVersion"] = list["cniVersion"];
    return conf.dump();
  } catch (...) {
    return "";
  }
}

std::string WeftNode::Http(const std::string& path, int* code) const {
  std::string out;
  ns.Exec({"curl", "-s", "-m", "2", "-w", "\n%{http_code}", "http://127.0.0.1:9641" + path}, &out);
  size_t nl = out.rfind('\n');
  if (code) *code = nl == std::string::npos ? 0 : std::atoi(out.c_str() + nl + 1);
  return nl == std::string::npos ? "" : out.substr(0, nl);
}

double WeftNode::Metric(const std::string& metric) const {
  std::string body = Http("/metrics");
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(metric + " ", 0) == 0 || line.rfind(metric + "{", 0) == 0)
      return std::atof(line.substr(line.rfind(' ') + 1).c_str());
  }
  return -1;
}

std::vector<std::string> WeftNode::AgentRoutes() const {
  std::vector<std::string> out;
  for (const auto& r : ns.IpJson({"route", "show", "proto", "201"})) {
    if (!r.contains("gateway")) continue;
    out.push_back(r.value("dst", "") + " via " + r.value("gateway", "") + " dev " + r.value("dev", ""));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Pod::Pod(WeftNode& n, const std::string& name, std::string args, nlohmann::json rc)
    : node(n), cid(n.name + "-" + name), ns(n.name + "-" + name), cni_args(std::move(args)), runtime_config(std::move(rc)) {
  std::string conf = Conf();
  if (conf.empty()) {
    add_error = "no conflist in " + node.conf_dir();
    return;
  }
  auto r = RunPlugin(BinaryPath("weft"), node.ns, Env("ADD"), conf);
  if (r.exit_code != 0) {
    add_error = "ADD exit " + std::to_string(r.exit_code) + ": " + r.out + r.err;
    return;
  }
  try {
    std::string a = r.Json()["ips"][0]["address"];
    ip = a.substr(0, a.find('/'));
  } catch (...) {
    add_error = "no IP in result: " + r.out;
  }
}

Pod::~Pod() {
  std::string conf = Conf();
  if (!conf.empty()) RunPlugin(BinaryPath("weft"), node.ns, Env("DEL"), conf);
}

std::string Pod::Conf() const {
  std::string conf = node.PluginConf();
  if (conf.empty() || runtime_config.is_null()) return conf;
  auto j = nlohmann::json::parse(conf);
  j["runtimeConfig"] = runtime_config;
  return j.dump();
}

std::map<std::string, std::string> Pod::Env(const std::string& cmd) const {
  auto env = CniEnv(cmd, cid, ns.path());
  if (!cni_args.empty()) env["CNI_ARGS"] = cni_args;
  return env;
}

}  // namespace weft::testing
