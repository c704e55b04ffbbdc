#include "bench/cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "bench/ns.h"
#include "sys/exec.h"
#include "sys/files.h"
#include "sys/netlink.h"
#include "sys/netns.h"

namespace weft::bench {

using Clock = std::chrono::steady_clock;

// --- Daemon --------------------------------------------------------------------

Result<Daemon> Daemon::Start(const std::string& netns_path, const std::vector<std::string>& argv,
                             const std::string& log_path) {
  if (argv.empty()) return Status::Error(Reason::kInternal, Domain::kNone, "Daemon::Start: empty argv");
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(netns_path));
  UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (log.get() < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "open " + log_path, errno);
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null.get() < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "open /dev/null", errno);
  // Everything the child touches is prepared before fork: between fork and
  // execve it makes only async-signal-safe system calls.
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::string path_env = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path_env.data(), nullptr};
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno(Reason::kFailed, Domain::kExec, "fork", errno);
  if (pid == 0) {
    // Dies with the thread that started it (the benchmark's main thread).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (::setns(ns.fd(), CLONE_NEWNET) != 0) ::_exit(126);
    ::dup2(null.get(), 0);
    ::dup2(log.get(), 1);
    ::dup2(log.get(), 2);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(cargv[0], cargv.data(), envp);
    ::_exit(127);
  }
  return Daemon(pid);
}

Daemon& Daemon::operator=(Daemon&& o) noexcept {
  if (this != &o) {
    Stop(9, 0);
    pid_ = o.pid_;
    o.pid_ = -1;
  }
  return *this;
}

bool Daemon::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void Daemon::Stop(int sig, int ms) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) != pid_) {
    if (Clock::now() >= end) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
}

// --- etcd and weftd ----------------------------------------------------------------

Result<Daemon> StartEtcd(const std::string& netns_path, const std::string& ip, const std::string& dir) {
  const std::string client = "http://" + ip + ":2379";
  return Daemon::Start(netns_path,
                       {"/usr/bin/etcd", "--name", "e0", "--data-dir", dir + "/data", "--listen-client-urls", client,
                        "--advertise-client-urls", client, "--listen-peer-urls", "http://127.0.0.1:2380",
                        "--initial-advertise-peer-urls", "http://127.0.0.1:2380", "--initial-cluster",
                        "e0=http://127.0.0.1:2380", "--max-txn-ops", "1024", "--log-level", "warn"},
                       dir + "/etcd.log");
}

bool WaitEtcdHealthy(const std::string& netns_path, const std::string& url, int timeout_ms) {
  auto ns = sys::Netns::Open(netns_path);
  auto curl = sys::FindInPath("curl", {"/usr/bin", "/bin"});
  if (!ns.ok() || !curl.ok()) return false;
  auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < end) {
    sys::ExecRequest req;
    req.path = *curl;
    req.argv = {"curl", "-s", "-m", "1", url + "/health"};
    req.env = {"PATH=/usr/bin:/bin"};
    req.netns_fd = ns->fd();
    req.timeout = std::chrono::seconds(3);
    auto r = sys::Exec(req);
    if (r.ok() && r->out.find("\"true\"") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::vector<std::string> WeftdArgv(const std::string& weftd_bin, const std::string& node_name, const std::string& dir,
                                   const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {weftd_bin,
                                   "--node-name", node_name,
                                   "--cni-conf-dir", dir + "/net.d",
                                   "--state-dir", dir + "/state",
                                   "--plugin-data-dir", dir + "/ipam",
                                   "--plugin-log-file", dir + "/plugin.log",
                                   "--metrics-addr", "127.0.0.1:9641",
                                   "--log-level", "info",
                                   "--log-file", dir + "/weftd.log"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

Result<nlohmann::json> ReadConflist(const std::string& dir) {
  const std::string path = dir + "/net.d/10-weft.conflist";
  WEFT_ASSIGN_OR_RETURN(std::string text, sys::ReadFile(path, 1 << 20));
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone, path + ": " + e.what());
  }
}

Result<ProcStats> ReadProcStats(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  WEFT_ASSIGN_OR_RETURN(std::string status, sys::ReadFile(base + "/status", 1 << 16));
  WEFT_ASSIGN_OR_RETURN(std::string stat, sys::ReadFile(base + "/stat", 1 << 16));
  ProcStats p;
  std::istringstream in(status);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) p.rss_mb = std::atof(line.c_str() + 6) / 1024.0;
    if (line.rfind("VmHWM:", 0) == 0) p.hwm_mb = std::atof(line.c_str() + 6) / 1024.0;
  }
  // Fields after the command name (which may hold spaces): state is field 3,
  // utime 14 and stime 15, in clock ticks.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return Status::Error(Reason::kMalformed, Domain::kNone, base + "/stat: no ')'");
  std::istringstream fields(stat.substr(close + 2));
  std::vector<std::string> f;
  for (std::string s; fields >> s;) f.push_back(s);
  if (f.size() < 13) return Status::Error(Reason::kMalformed, Domain::kNone, base + "/stat: too few fields");
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  p.cpu_s = (std::atof(f[11].c_str()) + std::atof(f[12].c_str())) / tick;
  return p;
}

Result<MemStats> ReadMemStats(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  WEFT_ASSIGN_OR_RETURN(std::string rollup, sys::ReadFile(base + "/smaps_rollup", 1 << 16));
  WEFT_ASSIGN_OR_RETURN(ProcStats ps, ReadProcStats(pid));
  MemStats m;
  m.hwm_mb = ps.hwm_mb;
  double priv = 0;
  std::istringstream in(rollup);
  for (std::string line; std::getline(in, line);) {
    auto kb = [&](const char* key) {
      size_t n = std::strlen(key);
      return line.compare(0, n, key) == 0 ? std::atof(line.c_str() + n) / 1024.0 : 0.0;
    };
    m.rss_mb += kb("Rss:");
    m.pss_mb += kb("Pss:");
    m.anon_mb += kb("Anonymous:");
    priv += kb("Private_Clean:") + kb("Private_Dirty:");
  }
  m.uss_mb = priv;
  return m;
}

nlohmann::json ToJson(const MemStats& m) {
  return {{"rss_mb", m.rss_mb}, {"pss_mb", m.pss_mb}, {"uss_mb", m.uss_mb}, {"anon_mb", m.anon_mb},
          {"peak_rss_mb", m.hwm_mb}};
}

namespace {
// A mapping's header line of /proc/PID/smaps ("start-end perms offset dev
// inode [path]"): true and its path ("" for anonymous memory).
bool SmapsMappingPath(const std::string& line, std::string* path) {
  if (!std::isxdigit(static_cast<unsigned char>(line[0])) || !(line.find('-') < line.find(' '))) return false;
  std::istringstream h(line);
  std::string range, perms, off, dev, inode;
  h >> range >> perms >> off >> dev >> inode;
  std::getline(h, *path);
  path->erase(0, path->find_first_not_of(' '));
  return true;
}
}  // namespace

nlohmann::json MemBreakdown(pid_t pid) {
  auto smaps = sys::ReadFile("/proc/" + std::to_string(pid) + "/smaps", 64 << 20);
  if (!smaps.ok()) return nullptr;
  double heap = 0, anon = 0, files = 0, files_private = 0, other = 0;
  std::string kind;
  std::istringstream in(*smaps);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (std::string path; SmapsMappingPath(line, &path)) {
      kind = path.empty() ? "anon" : path == "[heap]" ? "heap" : path[0] == '/' ? "files" : "other";
      continue;
    }
    double kb = 0;
    if (line.rfind("Rss:", 0) == 0) kb = std::atof(line.c_str() + 4);
    else if (kind == "files" && (line.rfind("Private_Clean:", 0) == 0 || line.rfind("Private_Dirty:", 0) == 0))
      files_private += std::atof(line.c_str() + 14) / 1024.0;
    if (kb == 0) continue;
    double mb = kb / 1024.0;
    if (kind == "heap") heap += mb;
    else if (kind == "anon") anon += mb;
    else if (kind == "files") files += mb;
    else other += mb;
  }
  return {{"heap_mb", heap}, {"anon_mb", anon}, {"files_mb", files}, {"files_private_mb", files_private},
          {"other_mb", other}};
}

nlohmann::json MemByMapping(pid_t pid, size_t top) {
  auto smaps = sys::ReadFile("/proc/" + std::to_string(pid) + "/smaps", 64 << 20);
  if (!smaps.ok()) return nullptr;
  struct Sum {
    double rss = 0, pss = 0, uss = 0;
  };
  std::map<std::string, Sum> by;
  Sum* cur = nullptr;
  std::istringstream in(*smaps);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (std::string path; SmapsMappingPath(line, &path)) {
      cur = &by[path.empty() ? "[anon]" : path];
      continue;
    }
    if (!cur) continue;
    auto kb = [&](const char* key) {
      size_t n = std::strlen(key);
      return line.compare(0, n, key) == 0 ? std::atof(line.c_str() + n) / 1024.0 : 0.0;
    };
    cur->rss += kb("Rss:");
    cur->pss += kb("Pss:");
    cur->uss += kb("Private_Clean:") + kb("Private_Dirty:");
  }
  std::vector<std::pair<std::string, Sum>> v(by.begin(), by.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.uss != b.second.uss ? a.second.uss > b.second.uss : a.second.rss > b.second.rss; });
  nlohmann::json out = nlohmann::json::array();
  Sum rest;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i < top) {
      out.push_back({{"name", v[i].first}, {"rss_mb", v[i].second.rss}, {"pss_mb", v[i].second.pss}, {"uss_mb", v[i].second.uss}});
    } else {
      rest.rss += v[i].second.rss;
      rest.pss += v[i].second.pss;
      rest.uss += v[i].second.uss;
    }
  }
  if (v.size() > top) out.push_back({{"name", "(others)"}, {"rss_mb", rest.rss}, {"pss_mb", rest.pss}, {"uss_mb", rest.uss}});
  return out;
}

Status MakeUnderlay(const std::string& name, const std::string& ip) {
  WEFT_RETURN_IF_ERROR(CreateNetns(name, true));
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(name)));
  WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::OpenIn(ns));
  WEFT_RETURN_IF_ERROR(nl.CreateBridge("br0", 1500));
  return AddrUp(nl, "br0", ip + "/24");
}

Status MakeNodeOnUnderlay(const std::string& node, const std::string& ul, int octet, const std::string& gw) {
  WEFT_RETURN_IF_ERROR(CreateNetns(node, true));
  WEFT_ASSIGN_OR_RETURN(auto nns, sys::Netns::Open(NetnsPath(node)));
  WEFT_ASSIGN_OR_RETURN(auto uns, sys::Netns::Open(NetnsPath(ul)));
  WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::OpenIn(nns));
  WEFT_ASSIGN_OR_RETURN(auto ul_nl, sys::Netlink::OpenIn(uns));
  const std::string port = "p" + std::to_string(octet);
  WEFT_RETURN_IF_ERROR(nl.CreateVeth("up0", port, uns.fd(), 1500));
  WEFT_ASSIGN_OR_RETURN(int port_idx, LinkIndex(ul_nl, port));
  WEFT_ASSIGN_OR_RETURN(int br, LinkIndex(ul_nl, "br0"));
  WEFT_RETURN_IF_ERROR(ul_nl.SetMaster(port_idx, br));
  WEFT_RETURN_IF_ERROR(ul_nl.SetUp(port_idx));
  WEFT_RETURN_IF_ERROR(AddrUp(nl, "up0", "192.0.2." + std::to_string(octet) + "/24"));
  WEFT_ASSIGN_OR_RETURN(int up0, LinkIndex(nl, "up0"));
  sys::RouteSpec def{*IpPrefix::Parse("0.0.0.0/0"), IpAddress::Parse(gw), up0, 0};
  return nl.AddRoute(def);
}

// --- RouteWatch ------------------------------------------------------------------

Result<RouteWatch> RouteWatch::Open(const std::string& netns_path) {
  // 5000 peers announce 5000 routes in a burst; a big buffer keeps that from
  // overflowing (an overflow still works, at the price of one dump).
  WEFT_ASSIGN_OR_RETURN(auto sock, OpenNetlinkListener(netns_path, NETLINK_ROUTE, RTMGRP_IPV4_ROUTE, 64 << 20,
                                                       "netlink RTMGRP_IPV4_ROUTE"));
  RouteWatch w(std::move(sock), netns_path);
  WEFT_RETURN_IF_ERROR(w.Resync());
  return w;
}

Status RouteWatch::Resync() {
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(path_));
  WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::OpenIn(ns));
  WEFT_ASSIGN_OR_RETURN(auto list, nl.ListRoutes(AF_INET));
  routes_.clear();
  for (const auto& r : list)
    if (r.protocol == sys::kRouteProtoWeft && r.gw && r.table == RT_TABLE_MAIN) routes_.insert(r.dst.ToString());
  if (!routes_.empty() && first_ == Clock::time_point{}) first_ = Clock::now();
  return Status::Ok();
}

void RouteWatch::Apply(const void* data, size_t len) {
  const auto now = Clock::now();
  int left = static_cast<int>(len);
  for (auto* h = static_cast<const nlmsghdr*>(data); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
    if (h->nlmsg_type != RTM_NEWROUTE && h->nlmsg_type != RTM_DELROUTE) continue;
    const auto* rtm = static_cast<const rtmsg*>(NLMSG_DATA(h));
    if (rtm->rtm_family != AF_INET || rtm->rtm_protocol != sys::kRouteProtoWeft) continue;
    unsigned table = rtm->rtm_table;
    bool gw = false;
    in_addr dst{};
    int alen = static_cast<int>(RTM_PAYLOAD(h));
    for (auto* a = RTM_RTA(rtm); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
      if (a->rta_type == RTA_GATEWAY) gw = true;
      if (a->rta_type == RTA_TABLE) std::memcpy(&table, RTA_DATA(a), sizeof table);
      if (a->rta_type == RTA_DST) std::memcpy(&dst, RTA_DATA(a), sizeof dst);
    }
    if (!gw || table != RT_TABLE_MAIN) continue;
    char ip[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &dst, ip, sizeof ip);
    std::string key = std::string(ip) + "/" + std::to_string(rtm->rtm_dst_len);
    if (h->nlmsg_type == RTM_NEWROUTE) {
      routes_.insert(key);
      if (first_ == Clock::time_point{}) first_ = now;
    } else {
      routes_.erase(key);
    }
  }
}

Result<Clock::time_point> RouteWatch::WaitUntil(const std::function<bool(const std::set<std::string>&)>& pred,
                                                std::chrono::milliseconds timeout) {
  if (pred(routes_)) return Clock::now();
  const auto end = Clock::now() + timeout;
  std::vector<char> buf(1 << 20);
  for (;;) {
    // Drain whatever is queued, checking after each datagram so the time is
    // that of the notification that completed the condition.
    for (;;) {
      ssize_t n = ::recv(fd_.get(), buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == ENOBUFS) {
        ++overflows_;
        WEFT_RETURN_IF_ERROR(Resync());
      } else if (n < 0) {
        return Status::FromErrno(Reason::kFailed, Domain::kKernel, "recv netlink notifications", errno);
      } else {
        Apply(buf.data(), static_cast<size_t>(n));
      }
      if (pred(routes_)) return Clock::now();
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0)
      return Status::Error(Reason::kInternal, Domain::kNone,
                           "timed out after " + std::to_string(timeout.count()) + " ms with " +
                                                std::to_string(routes_.size()) + " peer routes");
    pollfd p{fd_.get(), POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(std::min<long>(left, 200)));
    CheckInterrupt();  // Ctrl-C ends a long wait within 200 ms
  }
}

}  // namespace weft::bench
