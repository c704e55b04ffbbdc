#include "bench/datapath.h"

#include <arpa/inet.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <latch>
#include <thread>

#include "base/strings.h"
#include "base/unique_fd.h"
#include "bench/cluster.h"
#include "bench/ns.h"
#include "bench/stats.h"
#include "sys/exec.h"
#include "sys/files.h"
#include "sys/netlink.h"
#include "sys/sysctl.h"

namespace weft::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {


// Two endpoints: the client netns sends to `server_ip` in the server netns.
struct Topology {
  std::string key, label, baseline;  // baseline: key of the row it is compared with
  std::string client_ns, server_ns, server_ip;
  std::string reason;  // non-empty: not measured
  std::vector<std::string> netns;  // to delete
  std::unique_ptr<Node> node;  // plugin topologies
  std::vector<Pod> pods;
  const NetConfig* cfg = nullptr;
  // weft with its source guard removed from the node after the pods were
  // added (issue 22: the guard's cost, measured beside the same config).
  bool guard_off = false;
  // weft VXLAN or host-gw with the overlay filter (table inet weft-overlay,
  // issue 22 §2; host-gw's check is in it too) removed after the pods were
  // added, the weftds stopped first so no resync puts it back: the filter's
  // cost beside the same topology.
  bool filter_off = false;
  // weft on two nodes: the second node and its pod, etcd and the weftds
  // (stopped before the namespaces go), scratch dirs.
  std::unique_ptr<Node> node2;
  std::vector<Pod> pods2;
  std::vector<Daemon> daemons;
  std::vector<std::string> dirs;
  json setup;  // same-node plugin rows: DescribeSameNode after the setup
};

Result<UniqueFd> SocketIn(const std::string& ns_name) {
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(ns_name)));
  int fd = -1;
  WEFT_RETURN_IF_ERROR(sys::RunInNetns(ns, [&] {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return fd < 0 ? Status::FromErrno(Reason::kFailed, Domain::kFile, "socket", errno) : Status::Ok();
  }));
  return UniqueFd(fd);
}

sockaddr_in Addr(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

Status PinAndSchedule(const std::vector<int>& cpus, size_t which, bool fifo) {
  if (which < cpus.size()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[which], &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0)
      return Status::FromErrno(Reason::kFailed, Domain::kKernel, "sched_setaffinity", errno);
  }
  if (fifo) {
    // Children (nft) start as ordinary processes again.
    sched_param sp{};
    sp.sched_priority = 10;
    if (::sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) != 0)
      return Status::FromErrno(Reason::kFailed, Domain::kKernel, "sched_setscheduler SCHED_FIFO", errno);
  }
  return Status::Ok();
}

void Unschedule() {
  sched_param sp{};
  (void)::sched_setscheduler(0, SCHED_OTHER, &sp);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < CPU_SETSIZE; ++i) CPU_SET(i, &set);
  (void)::sched_setaffinity(0, sizeof set, &set);
}

}  // namespace

// One byte each way per transaction, as netperf TCP_RR does by default.
Result<json> MeasureRr(const PodPair& t, int seconds, const std::vector<int>& cpus) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd lfd, SocketIn(t.server_ns));
  int one = 1;
  ::setsockopt(lfd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa = Addr(t.server_ip, kRrPort);
  if (::bind(lfd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "bind " + t.server_ip, errno);
  if (::listen(lfd.get(), 1) != 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "listen", errno);
  WEFT_ASSIGN_OR_RETURN(UniqueFd cfd, SocketIn(t.client_ns));
  std::thread server([&] {
    (void)PinAndSchedule(cpus, 1, false);
    int c = ::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char b;
    while (::read(c, &b, 1) == 1 && ::write(c, &b, 1) == 1) {
    }
    ::close(c);
  });
  ::setsockopt(cfd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{5, 0};
  ::setsockopt(cfd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  Status st;
  std::vector<double> us;
  if (!cpus.empty()) (void)PinAndSchedule(cpus, 0, false);  // undone below
  if (::connect(cfd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    st = Status::FromErrno(Reason::kFailed, Domain::kFile, "connect " + t.server_ip, errno);
    ::shutdown(lfd.get(), SHUT_RDWR);  // unblocks accept
  } else {
    auto end = Clock::now() + std::chrono::seconds(seconds);
    us.reserve(200000);
    char b = 'x';
    for (auto now = Clock::now(); now < end;) {
      if (::write(cfd.get(), &b, 1) != 1 || ::read(cfd.get(), &b, 1) != 1) {
        st = Status::FromErrno(Reason::kFailed, Domain::kFile, "request/response", errno);
        break;
      }
      auto after = Clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(after - now).count());
      now = after;
    }
    ::shutdown(cfd.get(), SHUT_RDWR);
  }
  if (!cpus.empty()) Unschedule();
  server.join();
  if (!st.ok()) return st;
  json j = {{"trans_per_s", static_cast<double>(us.size()) / seconds},
            {"p50_us", Percentile(us, 50)},
            {"p99_us", Percentile(us, 99)}};
  return j;
}

Result<json> MeasureCrr(const PodPair& t, int seconds, int port) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd lfd, SocketIn(t.server_ns));
  int one = 1;
  ::setsockopt(lfd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa = Addr(t.server_ip, port);
  if (::bind(lfd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "bind " + t.server_ip, errno);
  if (::listen(lfd.get(), 128) != 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "listen", errno);
  std::atomic<bool> done{false};
  std::thread server([&] {
    while (!done.load()) {
      int c = ::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      char b;
      if (::read(c, &b, 1) == 1) (void)!::write(c, &b, 1);
      ::close(c);
    }
  });
  std::vector<double> us;
  WEFT_ASSIGN_OR_RETURN(auto cns, sys::Netns::Open(NetnsPath(t.client_ns)));
  // Every client socket is made on a thread inside the client netns.
  Status st = sys::RunInNetns(cns, [&]() -> Status {
    auto end = Clock::now() + std::chrono::seconds(seconds);
    us.reserve(100000);
    for (auto now = Clock::now(); now < end;) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "socket", errno);
      UniqueFd c(fd);
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      timeval tv{2, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      // Closed with a RST: no TIME_WAIT, so a run never runs out of ports.
      linger lg{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      char b = 'x';
      if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
        return Status::FromErrno(Reason::kFailed, Domain::kFile,
                                 "connect " + t.server_ip + ":" + std::to_string(port), errno);
      if (::write(fd, &b, 1) != 1 || ::read(fd, &b, 1) != 1)
        return Status::FromErrno(Reason::kFailed, Domain::kFile, "connect/request/response", errno);
      auto after = Clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(after - now).count());
      now = after;
    }
    return Status::Ok();
  });
  done.store(true);
  ::shutdown(lfd.get(), SHUT_RDWR);  // unblocks accept
  server.join();
  if (!st.ok()) return st;
  return json{{"conn_per_s", static_cast<double>(us.size()) / seconds},
              {"p50_us", Percentile(us, 50)},
              {"p99_us", Percentile(us, 99)}};
}

Result<double> MeasureIperf(const PodPair& t, int seconds, const std::vector<int>& cpus) {
  WEFT_ASSIGN_OR_RETURN(auto sns, sys::Netns::Open(NetnsPath(t.server_ns)));
  WEFT_ASSIGN_OR_RETURN(auto cns, sys::Netns::Open(NetnsPath(t.client_ns)));
  const std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
  Result<sys::ExecResult> server_res = Status::Error(Reason::kFailed, Domain::kExec, "not run");
  std::thread server([&] {
    sys::ExecRequest req;
    req.path = "/usr/bin/iperf3";
    req.argv = {"iperf3", "-s", "-1", "-B", t.server_ip, "-p", std::to_string(kIperfPort)};
    if (cpus.size() >= 2) req.argv.insert(req.argv.end(), {"-A", std::to_string(cpus[1])});
    req.env = env;
    req.netns_fd = sns.fd();
    req.timeout = std::chrono::seconds(seconds + 30);
    server_res = sys::Exec(req);
  });
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{server};
  std::string last;
  Result<double> out = Status::Error(Reason::kFailed, Domain::kExec, "iperf3 client never connected");
  for (int attempt = 0; attempt < 50; ++attempt) {
    sys::ExecRequest req;
    req.path = "/usr/bin/iperf3";
    req.argv = {"iperf3", "-c", t.server_ip, "-p", std::to_string(kIperfPort), "-t", std::to_string(seconds), "-J"};
    if (!cpus.empty()) req.argv.insert(req.argv.end(), {"-A", std::to_string(cpus[0])});
    req.env = env;
    req.netns_fd = cns.fd();
    req.timeout = std::chrono::seconds(seconds + 20);
    auto r = sys::Exec(req);
    if (!r.ok()) {
      out = r.status();
      break;
    }
    json j;
    try {
      j = json::parse(r->out);
    } catch (...) {
    }
    const json::json_pointer bps("/end/sum_received/bits_per_second");
    if (r->exit_code == 0 && j.contains(bps) && j[bps].is_number()) {
      out = j[bps].get<double>() / 1e9;
      break;
    }
    last = j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>()
                                                          : r->out.substr(0, 200) + r->err.substr(0, 200);
    out = Status::Error(Reason::kFailed, Domain::kExec, "iperf3: " + last);
    if (last.find("refused") == std::string::npos && last.find("connect") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  if (!out.ok()) {
    // The one-off server is still waiting: end it by its own netns.
    for (int i = 0; i < 1; ++i) {
      sys::ExecRequest req;
      req.path = "/usr/bin/iperf3";
      req.argv = {"iperf3", "-c", t.server_ip, "-p", std::to_string(kIperfPort), "-t", "1"};
      req.env = env;
      req.netns_fd = cns.fd();
      (void)sys::Exec(req);
    }
  }
  return out;
}

namespace {

Status VethPair(const std::string& a, const std::string& b, const std::string& ifname, const std::string& ip_a,
                const std::string& ip_b, int mtu) {
  WEFT_ASSIGN_OR_RETURN(auto nsa, sys::Netns::Open(NetnsPath(a)));
  WEFT_ASSIGN_OR_RETURN(auto nsb, sys::Netns::Open(NetnsPath(b)));
  WEFT_ASSIGN_OR_RETURN(auto nla, sys::Netlink::OpenIn(nsa));
  WEFT_ASSIGN_OR_RETURN(auto nlb, sys::Netlink::OpenIn(nsb));
  WEFT_RETURN_IF_ERROR(nla.CreateVeth(ifname, ifname, nsb.fd(), mtu));
  WEFT_RETURN_IF_ERROR(AddrUp(nla, ifname, ip_a));
  return AddrUp(nlb, ifname, ip_b);
}

Status Vxlan(const std::string& ns_name, const std::string& local, const std::string& remote,
             const std::string& overlay) {
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(ns_name)));
  WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::OpenIn(ns));
  WEFT_ASSIGN_OR_RETURN(int up0, LinkIndex(nl, "up0"));
  WEFT_RETURN_IF_ERROR(nl.CreateVxlan("vxlan0", 42, 4789, *IpAddress::Parse(local), up0, 1450));
  WEFT_ASSIGN_OR_RETURN(int vx, LinkIndex(nl, "vxlan0"));
  // Default FDB entry: flood everything to the one remote VTEP.
  WEFT_RETURN_IF_ERROR(nl.AddNeigh({vx, *IpAddress::Parse(remote), "00:00:00:00:00:00", true}));
  return AddrUp(nl, "vxlan0", overlay);
}

// Removes weft's source guard (both tables) from `node`: the "-noguard"
// rows measure the same datapath without it. An error when a guard table is
// still there afterwards.
Status DropGuard(const Node& node) {
  auto nft = [&](std::vector<std::string> argv) {
    sys::ExecRequest req;
    req.path = "/usr/sbin/nft";
    req.argv = std::move(argv);
    req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    req.netns_fd = node.ns.fd();
    return sys::Exec(req);
  };
  for (const char* table : {"weft-guard", "weft-guard-bridge"})
    (void)nft({"nft", "delete", "table", "netdev", table});  // a mode installs one of the two
  WEFT_ASSIGN_OR_RETURN(auto r, nft({"nft", "list", "tables"}));
  if (r.exit_code != 0 || r.out.find("weft-guard") != std::string::npos)
    return Status::Error(Reason::kFailed, Domain::kFirewall, node.name + ": the source guard is still there: " + r.out + r.err);
  return Status::Ok();
}

// Removes the overlay filter from `node` (its weftd already stopped).
Status DropOverlayFilter(const Node& node) {
  sys::ExecRequest req;
  req.path = "/usr/sbin/nft";
  req.argv = {"nft", "delete", "table", "inet", "weft-overlay"};
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  req.netns_fd = node.ns.fd();
  WEFT_ASSIGN_OR_RETURN(auto r, sys::Exec(req));
  if (r.exit_code != 0)
    return Status::Error(Reason::kFailed, Domain::kFirewall, node.name + ": cannot remove the overlay filter: " + r.err);
  return Status::Ok();
}

// What a same-node row's packets cross and what they meet, read back from
// the kernel after the setup, so rows can be compared like with like: every
// link on the path (the node's links but lo and its uplink pair, each pod's
// eth0) with its MTU and offloads, the node's sysctls that routing and the
// pod ports depend on, and the node's firewall tables (nftables, which
// includes iptables-nft's). The report flags rows whose MTUs or offloads
// differ; the tables and port sysctls are the plugin's own.
std::string Offloads(int fd, const std::string& ifname) {
  static const std::pair<uint32_t, const char*> kFeatures[] = {{ETHTOOL_GRXCSUM, "rx-csum"}, {ETHTOOL_GTXCSUM, "tx-csum"},
                                                               {ETHTOOL_GSG, "sg"},          {ETHTOOL_GTSO, "tso"},
                                                               {ETHTOOL_GGSO, "gso"},        {ETHTOOL_GGRO, "gro"}};
  std::string out;
  for (const auto& [cmd, name] : kFeatures) {
    ethtool_value v{};
    v.cmd = cmd;
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname.c_str());
    ifr.ifr_data = reinterpret_cast<char*>(&v);
    const bool ok = ::ioctl(fd, SIOCETHTOOL, &ifr) == 0;
    out += std::string(out.empty() ? "" : " ") + (!ok ? "?" : v.data ? "" : "-") + name;
  }
  return out;  // "rx-csum tx-csum sg tso gso -gro": '-' off, '?' unknown
}

// The path links of one netns: all but lo, and (in the node) up0/up1.
Result<json> DescribeLinks(const std::string& ns_name, const std::string& role, bool node) {
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(ns_name)));
  WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::OpenIn(ns));
  WEFT_ASSIGN_OR_RETURN(auto links, nl.ListLinks());
  json out = json::array();
  WEFT_RETURN_IF_ERROR(sys::RunInNetns(ns, [&]() -> Status {
    UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "socket", errno);
    for (const auto& l : links) {
      if (l.name == "lo" || (node && (l.name == "up0" || l.name == "up1"))) continue;
      if (!node && l.name != "eth0") continue;
      json j = {{"in", role}, {"name", l.name}, {"kind", l.kind}, {"mtu", l.mtu}, {"offloads", Offloads(fd.get(), l.name)}};
      if (node && l.kind == "veth") {
        // Per-port sysctls a plugin sets (a '.' in a name would need '/').
        for (const char* k : {"rp_filter", "proxy_arp", "forwarding"}) {
          auto v = sys::ReadSysctl("net/ipv4/conf/" + l.name + "/" + k);
          j[k] = v.ok() ? std::string(Trim(*v)) : "?";
        }
        auto v6 = sys::ReadSysctl("net/ipv6/conf/" + l.name + "/disable_ipv6");
        j["disable_ipv6"] = v6.ok() ? std::string(Trim(*v6)) : "?";
      }
      out.push_back(std::move(j));
    }
    return Status::Ok();
  }));
  return out;
}

Result<json> DescribeSameNode(const Topology& t) {
  json links = json::array();
  WEFT_ASSIGN_OR_RETURN(json node_links, DescribeLinks(t.node->name, "node", true));
  for (auto& l : node_links) links.push_back(std::move(l));
  for (const auto& [ns, role] : {std::pair{t.client_ns, "client"}, std::pair{t.server_ns, "server"}}) {
    WEFT_ASSIGN_OR_RETURN(json pl, DescribeLinks(ns, role, false));
    for (auto& l : pl) links.push_back(std::move(l));
  }
  // The veths' offloads are compared across rows; a bridge's (its own
  // defaults: GRO on, no rx checksum) belong to the bridge topology.
  std::set<int> mtus;
  std::set<std::string> offloads, other_offloads;
  for (const auto& l : links) {
    mtus.insert(l["mtu"].get<int>());
    (l["kind"] == "veth" ? offloads : other_offloads).insert(l["kind"].get<std::string>() + ": " +
                                                               l["offloads"].get<std::string>());
  }
  json sysctls = json::object();
  WEFT_RETURN_IF_ERROR(sys::RunInNetns(t.node->ns, [&]() -> Status {
    for (const char* k : {"net/ipv4/ip_forward", "net/ipv4/conf/all/rp_filter", "net/ipv4/conf/default/rp_filter",
                          "net/ipv4/conf/all/proxy_arp"}) {
      auto v = sys::ReadSysctl(k);
      sysctls[sys::SysctlName(k)] = v.ok() ? std::string(Trim(*v)) : "?";
    }
    return Status::Ok();
  }));
  sys::ExecRequest req;
  req.path = "/usr/sbin/nft";
  req.argv = {"nft", "list", "tables"};
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  req.netns_fd = t.node->ns.fd();
  WEFT_ASSIGN_OR_RETURN(auto r, sys::Exec(req));
  json tables = json::array();
  std::stringstream ss(r.out);
  for (std::string line; std::getline(ss, line);)
    if (line.rfind("table ", 0) == 0) tables.push_back(line.substr(6));
  return json{{"mtus", mtus},   {"offloads", offloads},        {"other_offloads", other_offloads},
              {"links", links}, {"node_sysctls", sysctls}, {"node_tables", tables}};
}

// After the rounds: connections the node's conntrack holds (0 when no
// table in the node asks for conntrack; each measured connection leaves
// one entry for a while after it closes).
std::string ConntrackCount(const Node& node) {
  std::string out = "?";
  (void)sys::RunInNetns(node.ns, [&]() -> Status {
    auto v = sys::ReadSysctl("net/netfilter/nf_conntrack_count");
    if (v.ok()) out = std::string(Trim(*v));
    return Status::Ok();
  });
  return out;
}

// Two nodes joined by the same veth underlay as the "underlay" baseline
// (192.0.2.1/24 and .2/24 on up0), etcd on node a's underlay address, weftd
// on both with `backend`, and one pod on each node attached by the real weft
// plugin with the conflist its node's weftd wrote. Client: the pod on a.
Status SetupWeft(Topology& t, const DatapathOptions& opt, const Runner& runner, const std::string& p,
                 const std::string& backend) {
  const std::string a = p + "a", b = p + "b";
  t.netns = {a, b};  // also DropNode's, but removed even if a Node never gets made
  for (const auto& n : {a, b}) WEFT_RETURN_IF_ERROR(CreateNetns(n, true));
  // Owned by the Nodes from here on (DropNode removes netns and dir).
  auto node = [&](const std::string& name) -> Result<std::unique_ptr<Node>> {
    WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(name)));
    std::string dir = MakeTempDir(opt.prefix, "wd");
    if (dir.empty()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "mkdtemp", errno);
    return std::make_unique<Node>(Node{name, std::move(ns), dir});
  };
  WEFT_ASSIGN_OR_RETURN(t.node, node(a));
  WEFT_ASSIGN_OR_RETURN(t.node2, node(b));
  WEFT_RETURN_IF_ERROR(VethPair(a, b, "up0", "192.0.2.1/24", "192.0.2.2/24", 1500));

  std::string etcd_dir = MakeTempDir(opt.prefix, "etcd");
  if (etcd_dir.empty()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "mkdtemp", errno);
  t.dirs.push_back(etcd_dir);
  WEFT_ASSIGN_OR_RETURN(Daemon etcd, StartEtcd(NetnsPath(a), "192.0.2.1", etcd_dir));
  t.daemons.push_back(std::move(etcd));
  const std::string url = "http://192.0.2.1:2379";
  if (!WaitEtcdHealthy(NetnsPath(a), url)) return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                                                "etcd did not come up");

  const std::vector<std::string> flags = {"--control-plane", "etcd",  "--etcd-endpoints", url,
                                          "--etcd-prefix",   "/weft/bench", "--cluster-cidr", "10.244.0.0/16",
                                          "--backend",       backend, "--iface", "up0", "--resync-period", "30"};
  std::vector<RouteWatch> watches;
  for (const Node* n : {t.node.get(), t.node2.get()}) {
    WEFT_ASSIGN_OR_RETURN(RouteWatch w, RouteWatch::Open(NetnsPath(n->name)));
    watches.push_back(std::move(w));
    WEFT_ASSIGN_OR_RETURN(Daemon d, Daemon::Start(NetnsPath(n->name), WeftdArgv(opt.weftd_bin, n->name, n->data_dir, flags),
                                                  n->data_dir + "/weftd.out"));
    t.daemons.push_back(std::move(d));
  }
  // Each node routes to the other's pod CIDR, and has written its conflist.
  std::vector<NetConfig> cfgs;
  for (size_t i = 0; i < watches.size(); ++i) {
    const Node& n = i == 0 ? *t.node : *t.node2;
    auto seen = watches[i].WaitUntil([](const std::set<std::string>& r) { return !r.empty(); },
                                     std::chrono::seconds(30));
    if (!seen.ok()) return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                         n.name + ": weftd never routed to the peer node (" +
                                                                  seen.status().ToString() + "); see " + n.data_dir +
                                                                  "/weftd.log");
    WEFT_ASSIGN_OR_RETURN(nlohmann::json list, ReadConflist(n.data_dir));
    NetConfig c;
    c.key = t.key;
    c.label = t.label;
    c.weft = true;
    for (const auto& plugin : list.value("plugins", nlohmann::json::array())) c.plugins.push_back(plugin);
    if (c.plugins.empty()) return Status::Error(Reason::kMalformed, Domain::kNone,
                                                n.name + ": conflist without plugins");
    cfgs.push_back(std::move(c));
  }
  for (int i = 0; i < 2; ++i) {
    Pod pod;
    pod.id = p + "-" + std::to_string(i);
    pod.netns = pod.id;
    WEFT_RETURN_IF_ERROR(CreateNetns(pod.netns, true));
    auto r = runner.Add(cfgs[i], i == 0 ? *t.node : *t.node2, pod);
    (i == 0 ? t.pods : t.pods2).push_back(pod);
    if (!r.ok) return Status::Error(Reason::kFailed, Domain::kExec, r.error);
  }
  t.client_ns = t.pods[0].netns;
  t.server_ns = t.pods2[0].netns;
  t.server_ip = PodIp(t.pods2[0].result);
  if (t.server_ip.empty()) return Status::Error(Reason::kFailed, Domain::kExec, "the ADD result has no IPv4 address");
  if (t.guard_off) {
    WEFT_RETURN_IF_ERROR(DropGuard(*t.node));
    WEFT_RETURN_IF_ERROR(DropGuard(*t.node2));
  }
  if (t.filter_off) {
    for (auto& d : t.daemons) d.Stop(SIGTERM, 2000);
    t.daemons.clear();
    WEFT_RETURN_IF_ERROR(DropOverlayFilter(*t.node));
    WEFT_RETURN_IF_ERROR(DropOverlayFilter(*t.node2));
  }
  return Status::Ok();
}

Status Setup(Topology& t, const DatapathOptions& opt, const Runner& runner, int idx) {
  const std::string p = opt.prefix + "-d" + std::to_string(idx);
  if (t.key == "weft-vxlan" || t.key == "weft-vxlan-noguard" || t.key == "weft-vxlan-nofilter")
    return SetupWeft(t, opt, runner, p, "vxlan");
  if (t.key == "weft-host-gw" || t.key == "weft-host-gw-noguard" || t.key == "weft-host-gw-nofilter")
    return SetupWeft(t, opt, runner, p, "host-gw");
  if (t.key == "veth") {
    t.netns = {p + "a", p + "b"};
    for (const auto& n : t.netns) WEFT_RETURN_IF_ERROR(CreateNetns(n, true));
    WEFT_RETURN_IF_ERROR(VethPair(p + "a", p + "b", "eth0", "10.99.0.1/24", "10.99.0.2/24", 1500));
    t.client_ns = p + "a";
    t.server_ns = p + "b";
    t.server_ip = "10.99.0.2";
  } else if (t.key == "underlay" || t.key == "vxlan") {
    t.netns = {p + "a", p + "b"};
    for (const auto& n : t.netns) WEFT_RETURN_IF_ERROR(CreateNetns(n, true));
    WEFT_RETURN_IF_ERROR(VethPair(p + "a", p + "b", "up0", "192.0.2.1/24", "192.0.2.2/24", 1500));
    t.client_ns = p + "a";
    t.server_ns = p + "b";
    t.server_ip = "192.0.2.2";
    if (t.key == "vxlan") {
      WEFT_RETURN_IF_ERROR(Vxlan(p + "a", "192.0.2.1", "192.0.2.2", "10.98.0.1/24"));
      WEFT_RETURN_IF_ERROR(Vxlan(p + "b", "192.0.2.2", "192.0.2.1", "10.98.0.2/24"));
      t.server_ip = "10.98.0.2";
    }
  } else {
    WEFT_ASSIGN_OR_RETURN(Node node, MakeNode(opt.prefix, p + "n", 10));
    t.node = std::make_unique<Node>(std::move(node));
    for (int i = 0; i < 2; ++i) {
      Pod pod;
      pod.id = p + "-" + std::to_string(i);
      pod.netns = pod.id;
      WEFT_RETURN_IF_ERROR(CreateNetns(pod.netns, true));
      auto r = runner.Add(*t.cfg, *t.node, pod);
      t.pods.push_back(pod);
      if (!r.ok) return Status::Error(Reason::kFailed, Domain::kExec, r.error);
    }
    t.client_ns = t.pods[0].netns;
    t.server_ns = t.pods[1].netns;
    t.server_ip = PodIp(t.pods[1].result);
    if (t.server_ip.empty()) return Status::Error(Reason::kFailed, Domain::kExec, "the ADD result has no IPv4 address");
    if (t.guard_off) WEFT_RETURN_IF_ERROR(DropGuard(*t.node));
    auto d = DescribeSameNode(t);
    t.setup = d.ok() ? *d : json{{"error", d.status().ToString()}};
  }
  return Status::Ok();
}

void Teardown(Topology& t) {
  for (auto& d : t.daemons) d.Stop(SIGTERM, 2000);
  t.daemons.clear();
  for (const auto& n : t.netns) DeleteNetns(n);
  if (t.node) DropNode(*t.node, t.pods);
  if (t.node2) DropNode(*t.node2, t.pods2);
  t.node.reset();
  t.node2.reset();
  for (const auto& d : t.dirs) RemoveTree(d);
  t.dirs.clear();
}

}  // namespace

json RunDatapath(const DatapathOptions& opt, const Runner& runner, const std::vector<NetConfig>& configs,
                 const json& control) {
  std::vector<Topology> topo;
  auto add = [&](std::string key, std::string label, std::string baseline) {
    Topology t;
    t.key = std::move(key);
    t.label = std::move(label);
    t.baseline = std::move(baseline);
    topo.push_back(std::move(t));
  };
  add("veth", "same node: bare veth pair (baseline)", "");
  for (const auto& c : configs) {
    if (!c.datapath) continue;
    for (bool guard_off : {false, true}) {
      if (guard_off && !c.weft) continue;
      // weft twice: as shipped, and with its source guard removed (the
      // guard's cost is the first row over the second, in one run).
      add(guard_off ? c.key + "-noguard" : c.key,
          "same node: " + c.label + (guard_off ? ", source guard off" : ""), guard_off ? c.key : "veth");
      topo.back().cfg = &c;
      topo.back().guard_off = guard_off;
      for (const auto& r : control)
        if (r.value("key", "") == c.key && !r.value("available", false))
          topo.back().reason = "not available yet: " + r.value("reason", "");
    }
  }
  if (!opt.same_node_only) {
    add("underlay", "two nodes: underlay veth (baseline)", "");
    add("vxlan", "two nodes: bare kernel VXLAN (baseline)", "underlay");
    add("weft-vxlan", "two nodes: weft VXLAN (weftd)", "vxlan");
    add("weft-vxlan-noguard", "two nodes: weft VXLAN (weftd), source guard off", "weft-vxlan");
    topo.back().guard_off = true;
    add("weft-vxlan-nofilter", "two nodes: weft VXLAN, overlay filter off (weftd stopped)", "weft-vxlan");
    topo.back().filter_off = true;
    add("weft-host-gw", "two nodes: weft host-gw (weftd)", "underlay");
    add("weft-host-gw-noguard", "two nodes: weft host-gw (weftd), source guard off", "weft-host-gw");
    topo.back().guard_off = true;
    add("weft-host-gw-nofilter", "two nodes: weft host-gw, overlay filter off (weftd stopped)", "weft-host-gw");
    topo.back().filter_off = true;
  }
  for (auto& t : topo)
    if (t.key.rfind("weft-vxlan", 0) == 0 || t.key.rfind("weft-host-gw", 0) == 0)
      if (::access(opt.weftd_bin.c_str(), X_OK) != 0)
      t.reason = "not available: " + opt.weftd_bin + " is not built";

  // Setup all, measure round-robin (noise from other load lands on every row
  // alike), tear down all.
  for (size_t i = 0; i < topo.size(); ++i) {
    if (!topo[i].reason.empty()) continue;
    Status st = Setup(topo[i], opt, runner, static_cast<int>(i));
    if (!st.ok()) topo[i].reason = "setup failed: " + st.ToString();
  }
  std::vector<std::vector<double>> gbps(topo.size()), tps(topo.size()), p50(topo.size()), p99(topo.size());
  std::vector<std::string> errs(topo.size());
  std::vector<std::string> conntrack(topo.size());
  try {
    for (int round = 0; round < opt.rounds; ++round) {
      // Odd rounds run the rows in reverse order, so no row always follows
      // the same one (a row's teardown-free neighbour still leaves softirq
      // and page-cache state behind) or sits at the same point of a round.
      for (size_t k = 0; k < topo.size(); ++k) {
        const size_t i = round % 2 == 0 ? k : topo.size() - 1 - k;
        CheckInterrupt();
        if (!topo[i].reason.empty()) continue;
        const PodPair pair{topo[i].client_ns, topo[i].server_ns, topo[i].server_ip};
        auto g = MeasureIperf(pair, opt.seconds, opt.cpus);
        if (g.ok()) gbps[i].push_back(*g);
        else errs[i] = g.status().ToString();
        CheckInterrupt();
        auto rr = MeasureRr(pair, std::max(1, opt.seconds / 2 + 1), opt.cpus);
        if (rr.ok()) {
          tps[i].push_back((*rr)["trans_per_s"]);
          p50[i].push_back((*rr)["p50_us"]);
          p99[i].push_back((*rr)["p99_us"]);
        } else {
          errs[i] = rr.status().ToString();
        }
      }
    }
  } catch (const Interrupted&) {
    for (auto& t : topo) Teardown(t);
    throw;
  }
  for (size_t i = 0; i < topo.size(); ++i)
    if (topo[i].reason.empty() && topo[i].node && topo[i].cfg) conntrack[i] = ConntrackCount(*topo[i].node);
  for (auto& t : topo) Teardown(t);

  json rows = json::array();
  for (size_t i = 0; i < topo.size(); ++i) {
    json r = {{"key", topo[i].key}, {"label", topo[i].label}, {"baseline", topo[i].baseline}};
    if (!topo[i].reason.empty()) {
      r["available"] = false;
      r["reason"] = topo[i].reason;
    } else {
      r["available"] = !gbps[i].empty() || !tps[i].empty();
      r["gbps"] = Median(gbps[i]);
      r["gbps_runs"] = gbps[i];
      r["rr_trans_per_s"] = Median(tps[i]);
      r["rr_runs"] = tps[i];
      r["rr_p50_us"] = Median(p50[i]);
      r["rr_p99_us"] = Median(p99[i]);
      if (!errs[i].empty()) r["error"] = errs[i];
      if (!topo[i].setup.is_null()) {
        r["setup"] = topo[i].setup;
        r["setup"]["node_conntrack_entries_after"] = conntrack[i];
      }
    }
    rows.push_back(r);
  }
  return {{"seconds", opt.seconds},
          {"rounds", opt.rounds},
          {"cpus", opt.cpus},
          {"order", "rows in table order on even rounds (0, 2, ...), reversed on odd ones"},
          {"rows", rows}};
}


// ---- The source guard's paired A/B (issue 22 §1) ----

std::array<double, 3> MedianWithCi(const std::vector<double>& ratios) {
  if (ratios.empty()) return {0, 0, 0};
  std::mt19937 rng(22);
  std::uniform_int_distribution<size_t> pick(0, ratios.size() - 1);
  std::vector<double> medians, sample(ratios.size());
  for (int i = 0; i < 2000; ++i) {
    for (auto& x : sample) x = ratios[pick(rng)];
    medians.push_back(Median(sample));
  }
  return {Median(ratios), Percentile(medians, 2.5), Percentile(medians, 97.5)};
}

namespace {

// Two long-lived connections between the pods: a TCP_RR echo and a bulk
// stream into a sink. The peers run on one thread each in the server pod's
// sockets; the caller's thread is the client. Each Window* runs for `ms` and
// returns the rate over the time it measured.
class PairLoad {
 public:
  static Result<std::unique_ptr<PairLoad>> Open(const PodPair& t, const GuardAbOptions& opt) {
    auto p = std::unique_ptr<PairLoad>(new PairLoad());
    p->opt_ = &opt;
    int one = 1;
    for (int port : {kRrPort, kRrPort + 1}) {
      WEFT_ASSIGN_OR_RETURN(UniqueFd lfd, SocketIn(t.server_ns));
      ::setsockopt(lfd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in sa = Addr(t.server_ip, port);
      if (::bind(lfd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
        return Status::FromErrno(Reason::kFailed, Domain::kFile, "bind " + t.server_ip, errno);
      if (::listen(lfd.get(), 1) != 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "listen", errno);
      WEFT_ASSIGN_OR_RETURN(UniqueFd cfd, SocketIn(t.client_ns));
      ::setsockopt(cfd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      timeval tv{5, 0};
      ::setsockopt(cfd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(cfd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      if (::connect(cfd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
        return Status::FromErrno(Reason::kFailed, Domain::kFile, "connect " + t.server_ip, errno);
      int c = ::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "accept", errno);
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      (port == kRrPort ? p->rr_client_ : p->st_client_) = std::move(cfd);
      (port == kRrPort ? p->rr_server_ : p->st_server_) = UniqueFd(c);
    }
    PairLoad* self = p.get();
    p->echo_ = std::thread([self] {
      (void)PinAndSchedule(self->opt_->cpus, 1, self->opt_->fifo);
      char b;
      while (::read(self->rr_server_.get(), &b, 1) == 1 && ::write(self->rr_server_.get(), &b, 1) == 1) {
      }
    });
    p->sink_ = std::thread([self] {
      (void)PinAndSchedule(self->opt_->cpus, 1, self->opt_->fifo);
      std::vector<char> buf(1 << 17);
      for (;;) {
        ssize_t n = ::read(self->st_server_.get(), buf.data(), buf.size());
        if (n <= 0) return;
        self->received_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      }
    });
    return p;
  }
  ~PairLoad() {
    ::shutdown(rr_client_.get(), SHUT_RDWR);
    ::shutdown(st_client_.get(), SHUT_RDWR);
    ::shutdown(rr_server_.get(), SHUT_RDWR);
    ::shutdown(st_server_.get(), SHUT_RDWR);
    if (echo_.joinable()) echo_.join();
    if (sink_.joinable()) sink_.join();
  }

  // Transactions per second.
  Result<double> WindowRr(int ms) {
    WEFT_ASSIGN_OR_RETURN(auto c, CountRr(ms));
    return c.first / c.second;
  }
  // Transactions made in about `ms`, and the seconds they took.
  Result<std::pair<double, double>> CountRr(int ms) {
    uint64_t n = 0;
    char b = 'x';
    auto start = Clock::now(), end = start + std::chrono::milliseconds(ms);
    Clock::time_point now = start;
    while (now < end) {
      for (int i = 0; i < 32; ++i, ++n)  // the clock read 32x less often
        if (::write(rr_client_.get(), &b, 1) != 1 || ::read(rr_client_.get(), &b, 1) != 1)
          return Status::FromErrno(Reason::kFailed, Domain::kFile, "request/response", errno);
      now = Clock::now();
    }
    return std::pair<double, double>{static_cast<double>(n), std::chrono::duration<double>(now - start).count()};
  }
  // Gbit/s received by the sink.
  Result<double> WindowStream(int ms) {
    static const std::vector<char> buf(1 << 17, 'x');
    // Let the previous window's bytes drain first.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const uint64_t before = received_.load();
    auto start = Clock::now(), end = start + std::chrono::milliseconds(ms);
    Clock::time_point now = start;
    while (now < end) {
      if (::write(st_client_.get(), buf.data(), buf.size()) <= 0)
        return Status::FromErrno(Reason::kFailed, Domain::kFile, "stream write", errno);
      now = Clock::now();
    }
    const uint64_t got = received_.load() - before;
    return got * 8 / 1e9 / std::chrono::duration<double>(now - start).count();
  }

 private:
  PairLoad() = default;
  const GuardAbOptions* opt_ = nullptr;
  UniqueFd rr_client_, rr_server_, st_client_, st_server_;
  std::atomic<uint64_t> received_{0};
  std::thread echo_, sink_;
};

Result<sys::ExecResult> NftIn(const Node& node, std::vector<std::string> argv, std::string in = "") {
  sys::ExecRequest req;
  req.path = "/usr/sbin/nft";
  req.argv = std::move(argv);
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  req.netns_fd = node.ns.fd();
  req.stdin_data = std::move(in);
  return sys::Exec(req);
}

// What each node needs for one state of the A/B.
struct GuardState {
  std::vector<std::string> script;  // per node: nft -f text
  bool rp_filter = false;
};

Status ApplyState(const std::vector<const Node*>& nodes, const GuardState& st) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    WEFT_ASSIGN_OR_RETURN(auto r, NftIn(*nodes[i], {"nft", "-f", "-"}, st.script[i]));
    if (r.exit_code != 0) return Status::Error(Reason::kFailed, Domain::kFirewall, nodes[i]->name + ": nft -f: " + r.err);
    WEFT_RETURN_IF_ERROR(sys::RunInNetns(nodes[i]->ns, [&]() -> Status {
      WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::Open());
      WEFT_ASSIGN_OR_RETURN(auto links, nl.ListLinks());
      for (const auto& l : links)
        if (l.name.rfind("wft", 0) == 0)
          WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv4/conf/" + l.name + "/rp_filter", st.rp_filter ? "1" : "0"));
      return Status::Ok();
    }));
  }
  return Status::Ok();
}

// The node's pod ports and the pod addresses routed to each.
Result<std::vector<GuardPort>> PodPorts(const Node& node) {
  std::vector<GuardPort> out;
  WEFT_RETURN_IF_ERROR(sys::RunInNetns(node.ns, [&]() -> Status {
    WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::Open());
    WEFT_ASSIGN_OR_RETURN(auto links, nl.ListLinks());
    WEFT_ASSIGN_OR_RETURN(auto r4, nl.ListRoutes(AF_INET));
    WEFT_ASSIGN_OR_RETURN(auto r6, nl.ListRoutes(AF_INET6));
    for (const auto& l : links) {
      if (l.name.rfind("wft", 0) != 0) continue;
      GuardPort p{l.name, "", ""};
      for (const auto& r : r4)
        if (r.oif == l.index && r.dst.len() == 32) p.addr4 = r.dst.addr().ToString();
      for (const auto& r : r6)
        if (r.oif == l.index && r.dst.len() == 128) p.addr6 = r.dst.addr().ToString();
      out.push_back(p);
    }
    return Status::Ok();
  }));
  return out;
}

// Removes both guard tables (those of earlier releases, and
// bench/guard_variants/'s), whatever exists.
const char kNoGuard[] =
    "add table netdev weft-guard\ndelete table netdev weft-guard\n"
    "add table netdev weft-guard-bridge\ndelete table netdev weft-guard-bridge\n"
    "add table inet weft-guard\ndelete table inet weft-guard\n"
    "add table bridge weft-guard\ndelete table bridge weft-guard\n"
    "add table ip6 weft-guard6\ndelete table ip6 weft-guard6\n"
    "add table netdev weft-guard-dev\ndelete table netdev weft-guard-dev\n"
    "add table inet weft-guard-ing\ndelete table inet weft-guard-ing\n";

// The two states of the A/B for `nodes`: "on" is what ADD installed,
// listed now (bridge: with the ports' bindings), unless a script replaces
// it. Applies the baseline first. `tables`: what else the nodes hold.
Status PrepareStates(const GuardAbOptions& opt, const std::vector<const Node*>& nodes, GuardState* on_state,
                     GuardState* off_state, json* tables_out) {
  GuardState& on = *on_state;
  GuardState& off = *off_state;
  json& tables = *tables_out;
  on.rp_filter = opt.rp_filter_on;
  off.rp_filter = opt.rp_filter_off;
  for (const Node* n : nodes) {
    WEFT_ASSIGN_OR_RETURN(auto ports, PodPorts(*n));
    if (!opt.baseline_script.empty()) {
      WEFT_ASSIGN_OR_RETURN(auto r, NftIn(*n, {"nft", "-f", "-"}, ExpandPerPort(opt.baseline_script, ports)));
      if (r.exit_code != 0) return Status::Error(Reason::kFailed, Domain::kFirewall, n->name + ": baseline: nft -f: " + r.err);
    }
    std::string listed;
    for (const char* table : {"weft-guard", "weft-guard-bridge"}) {
      auto r = NftIn(*n, {"nft", "list", "table", "netdev", table});
      if (r.ok() && r->exit_code == 0) listed += r->out;
    }
    if (opt.on_script.empty() && listed.empty())
      return Status::Error(Reason::kFailed, Domain::kFirewall, n->name + ": no guard table after ADD");
    // A variant script starts from no guard too (the shipped tables go).
    on.script.push_back(std::string(kNoGuard) + (opt.on_script.empty() ? listed : ExpandPerPort(opt.on_script, ports)));
    off.script.push_back(std::string(kNoGuard) + (opt.off_script.empty() ? "" : ExpandPerPort(opt.off_script, ports)));
    // What the node holds besides the guard, in both states.
    if (auto r = NftIn(*n, {"nft", "list", "tables"}); r.ok() && r->exit_code == 0) {
      std::string line;
      std::stringstream ss(r->out);
      while (std::getline(ss, line))
        if (line.find("weft-guard") == std::string::npos) tables.push_back(n->name + ": " + line);
    }
  }
  return Status::Ok();
}

std::string LoadAvg() {
  auto f = sys::ReadFile("/proc/loadavg", 4096);
  if (!f.ok()) return "";
  return f->substr(0, f->find(' ', f->find(' ', f->find(' ') + 1) + 1));
}

std::string Verdict(double lo, double hi) {
  return lo >= 0.98 ? "met" : hi < 0.98 ? "missed" : "undecided (the interval holds 0.98)";
}

// GuardAbOptions::interleave_ms: the topology `key` twice; TCP_RR, and with
// concurrent_stream the bulk stream too (one row each).
json RunInterleaved(const GuardAbOptions& opt, const Runner& runner, const std::vector<NetConfig>& configs,
                    const std::string& key, int* idx) {
  Topology ts[2];
  const bool two_nodes = key == "weft-vxlan" || key == "weft-host-gw";
  const NetConfig* cfg = nullptr;
  for (const auto& c : configs)
    if (c.key == key) cfg = &c;
  if (!two_nodes && !cfg) return json::array({json{{"topology", key}, {"error", "unknown topology"}}});
  std::vector<std::unique_ptr<PairLoad>> loads;
  auto teardown = [&]() {
    Unschedule();
    loads.clear();
    for (auto& t : ts) Teardown(t);
  };
  DatapathOptions dopt{opt.prefix, 1, 1, opt.weftd_bin};
  std::vector<const Node*> nodes[2];
  GuardState on[2], off[2];
  json tables = json::array();
  Status st;
  for (int k = 0; k < 2 && st.ok(); ++k) {
    ts[k].key = key;
    ts[k].label = key;
    ts[k].cfg = cfg;
    st = Setup(ts[k], dopt, runner, (*idx)++);
    if (!st.ok()) break;
    nodes[k] = {ts[k].node.get()};
    if (ts[k].node2) nodes[k].push_back(ts[k].node2.get());
    st = PrepareStates(opt, nodes[k], &on[k], &off[k], &tables);
    if (!st.ok()) break;
    auto load = PairLoad::Open(PodPair{ts[k].client_ns, ts[k].server_ns, ts[k].server_ip}, opt);
    if (!load.ok()) {
      st = load.status();
      break;
    }
    loads.push_back(std::move(*load));
  }
  if (!st.ok()) {
    teardown();
    return json::array({json{{"topology", key}, {"error", st.ToString()}}});
  }
  std::vector<double> rate_on, rate_off, window_ratio, ratio;
  std::vector<double> st_on, st_off, st_window_ratio, st_ratio;  // concurrent_stream
  const std::string load_start = LoadAvg();
  try {
    // Warm up both pairs, both states.
    for (int w = 0; w < 2 && st.ok(); ++w) {
      if (!(st = ApplyState(nodes[w], on[w])).ok() || !(st = ApplyState(nodes[1 - w], off[1 - w])).ok()) break;
      for (auto& l : loads)
        if (auto r = l->CountRr(opt.window_ms / 4); !r.ok()) st = r.status();
    }
    for (int i = 0; i < 2 * opt.pairs && st.ok(); ++i) {
      CheckInterrupt();
      const int g = i % 2;  // the node (pair of nodes) in the "on" state
      if (!(st = ApplyState(nodes[g], on[g])).ok() || !(st = ApplyState(nodes[1 - g], off[1 - g])).ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(opt.settle_ms));
      if (!(st = PinAndSchedule(opt.cpus, 0, opt.fifo)).ok()) break;
      double n[2] = {0, 0}, secs[2] = {0, 0};
      const auto end = Clock::now() + std::chrono::milliseconds(opt.window_ms);
      for (int slice = 0; Clock::now() < end && st.ok(); ++slice) {
        const int k = (slice + i / 2) % 2;
        auto r = loads[k]->CountRr(opt.interleave_ms);
        if (!r.ok()) st = r.status();
        else {
          n[k] += r->first;
          secs[k] += r->second;
        }
      }
      Unschedule();
      if (!st.ok()) break;
      const double on_rate = n[g] / secs[g], off_rate = n[1 - g] / secs[1 - g];
      rate_on.push_back(on_rate);
      rate_off.push_back(off_rate);
      window_ratio.push_back(on_rate / off_rate);
      std::fprintf(stderr, "[guard-ab] %s interleaved window %d/%d (on: node set %d): TCP_RR %.0f / %.0f = %.3f\n",
                   key.c_str(), i + 1, 2 * opt.pairs, g, on_rate, off_rate, on_rate / off_rate);
      if (g == 1) ratio.push_back(std::sqrt(window_ratio[i - 1] * window_ratio[i]));
      if (!opt.concurrent_stream) continue;
      // Both streams at once, each sender on the client's CPU, fair-shared.
      double gbps[2] = {0, 0};
      Status sst[2];
      std::latch go(2);
      std::vector<std::thread> senders;
      for (int k = 0; k < 2; ++k)
        senders.emplace_back([&, k] {
          (void)PinAndSchedule(opt.cpus, 0, false);
          go.arrive_and_wait();
          auto r = loads[k]->WindowStream(opt.window_ms);
          if (r.ok()) gbps[k] = *r;
          else sst[k] = r.status();
        });
      for (auto& t : senders) t.join();
      for (const auto& x : sst)
        if (!x.ok()) st = x;
      if (!st.ok()) break;
      st_on.push_back(gbps[g]);
      st_off.push_back(gbps[1 - g]);
      st_window_ratio.push_back(gbps[g] / gbps[1 - g]);
      std::fprintf(stderr, "[guard-ab] %s concurrent stream window %d/%d (on: node set %d): %.2f / %.2f Gbit/s = %.3f\n",
                   key.c_str(), i + 1, 2 * opt.pairs, g, gbps[g], gbps[1 - g], gbps[g] / gbps[1 - g]);
      if (g == 1) st_ratio.push_back(std::sqrt(st_window_ratio[i - 1] * st_window_ratio[i]));
    }
  } catch (const Interrupted&) {
    teardown();
    throw;
  }
  // Leave each node as ADD left it.
  for (int k = 0; k < 2; ++k) (void)ApplyState(nodes[k], on[k]);
  teardown();
  auto [m, lo, hi] = MedianWithCi(ratio);
  auto [wm, wlo, whi] = MedianWithCi(window_ratio);
  json j = {{"topology", key},         {"metric", "TCP_RR"},       {"pairs", ratio.size()},
            {"on", Median(rate_on)},   {"off", Median(rate_off)},  {"ratio", m},
            {"ci_low", lo},            {"ci_high", hi},            {"cost_pct", (1 - m) * 100},
            {"target_pct", 2.0},       {"verdict", Verdict(lo, hi)}, {"ratios", ratio},
            {"window_ratios", window_ratio}, {"window_ratio", wm}, {"window_ci", {wlo, whi}},
            {"interleave_ms", opt.interleave_ms},
            {"loadavg_start", load_start}, {"loadavg_end", LoadAvg()},
            {"on_label", opt.on_label}, {"off_label", opt.off_label}, {"node_tables", tables},
            {"on_script", on[0].script}, {"off_script", off[0].script}};
  if (!st.ok()) j["error"] = st.ToString();
  if (!opt.concurrent_stream) return json::array({j});
  auto [sm, slo, shi] = MedianWithCi(st_ratio);
  json s = {{"topology", key},        {"metric", "TCP stream"},   {"pairs", st_ratio.size()},
            {"on", Median(st_on)},    {"off", Median(st_off)},    {"ratio", sm},
            {"ci_low", slo},          {"ci_high", shi},           {"cost_pct", (1 - sm) * 100},
            {"target_pct", 2.0},      {"verdict", Verdict(slo, shi)}, {"ratios", st_ratio},
            {"window_ratios", st_window_ratio}, {"concurrent", true},
            {"loadavg_start", load_start}, {"loadavg_end", LoadAvg()}};
  return json::array({j, s});
}

}  // namespace

std::string ExpandPerPort(const std::string& script, const std::vector<GuardPort>& ports) {
  static const std::string kEach = "@each-port ";
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
    return s;
  };
  std::string out;
  std::stringstream in(script);
  for (std::string line; std::getline(in, line);) {
    const size_t ind = line.find_first_not_of(" \t");
    if (ind == std::string::npos || line.compare(ind, kEach.size(), kEach) != 0) {
      out += line + "\n";
      continue;
    }
    const std::string body = line.substr(0, ind) + line.substr(ind + kEach.size());
    for (const auto& p : ports) {
      if ((body.find("@ADDR4@") != std::string::npos && p.addr4.empty()) ||
          (body.find("@ADDR6@") != std::string::npos && p.addr6.empty()))
        continue;
      out += replace(replace(replace(body, "@PORT@", p.name), "@ADDR4@", p.addr4), "@ADDR6@", p.addr6) + "\n";
    }
  }
  return out;
}

json RunGuardAb(const GuardAbOptions& opt, const Runner& runner, const std::vector<NetConfig>& configs) {
  json rows = json::array();
  int idx = 0;
  for (const auto& key : opt.topologies) {
    if (opt.interleave_ms > 0) {
      for (auto& row : RunInterleaved(opt, runner, configs, key, &idx)) rows.push_back(std::move(row));
      continue;
    }
    Topology t;
    t.key = key;
    t.label = key;
    const bool two_nodes = key == "weft-vxlan" || key == "weft-host-gw";
    if (!two_nodes) {
      for (const auto& c : configs)
        if (c.key == key) t.cfg = &c;
      if (!t.cfg) {
        rows.push_back({{"topology", key}, {"error", "unknown topology"}});
        continue;
      }
    }
    DatapathOptions dopt{opt.prefix, 1, 1, opt.weftd_bin};
    auto fail = [&](const Status& st) {
      rows.push_back({{"topology", key}, {"error", st.ToString()}});
      Unschedule();
      Teardown(t);
    };
    Status st = Setup(t, dopt, runner, idx++);
    if (!st.ok()) {
      fail(st);
      continue;
    }
    std::vector<const Node*> nodes = {t.node.get()};
    if (t.node2) nodes.push_back(t.node2.get());
    GuardState on, off;
    json tables = json::array();
    st = PrepareStates(opt, nodes, &on, &off, &tables);
    if (!st.ok()) {
      fail(st);
      continue;
    }
    const PodPair pair{t.client_ns, t.server_ns, t.server_ip};
    auto load = PairLoad::Open(pair, opt);
    if (!load.ok()) {
      fail(load.status());
      continue;
    }
    std::vector<double> rr_on, rr_off, st_on, st_off, rr_ratio, st_ratio;
    std::string loadavg_start, loadavg_end;
    {
      auto f = sys::ReadFile("/proc/loadavg", 4096);
      if (f.ok()) loadavg_start = f->substr(0, f->find(' ', f->find(' ', f->find(' ') + 1) + 1));
    }
    try {
      // Warm up: one window of each, in each state, not kept.
      for (const GuardState* s : {&on, &off}) {
        if (!(st = ApplyState(nodes, *s)).ok()) break;
        if (auto r = (*load)->WindowRr(opt.window_ms / 2); !r.ok()) st = r.status();
        if (opt.stream)
          if (auto r = (*load)->WindowStream(opt.window_ms / 2); !r.ok()) st = r.status();
      }
      for (int i = 0; i < opt.pairs && st.ok(); ++i) {
        CheckInterrupt();
        double rr[2] = {0, 0}, gb[2] = {0, 0};
        for (int k = 0; k < 2 && st.ok(); ++k) {
          const bool is_on = (k == 0) == (i % 2 == 0);
          if (!(st = ApplyState(nodes, is_on ? on : off)).ok()) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(opt.settle_ms));
          // The client's pinning/priority only for the windows: the nft
          // runs between them stay ordinary.
          if (!(st = PinAndSchedule(opt.cpus, 0, opt.fifo)).ok()) break;
          auto r = (*load)->WindowRr(opt.window_ms);
          Result<double> g = 0.0;
          if (r.ok() && opt.stream) g = (*load)->WindowStream(opt.window_ms);
          Unschedule();
          if (!r.ok()) st = r.status();
          else if (!g.ok()) st = g.status();
          else {
            rr[is_on ? 0 : 1] = *r;
            gb[is_on ? 0 : 1] = *g;
          }
        }
        if (!st.ok()) break;
        rr_on.push_back(rr[0]);
        rr_off.push_back(rr[1]);
        rr_ratio.push_back(rr[0] / rr[1]);
        if (opt.stream) {
          st_on.push_back(gb[0]);
          st_off.push_back(gb[1]);
          st_ratio.push_back(gb[0] / gb[1]);
        }
        std::fprintf(stderr, "[guard-ab] %s pair %d/%d: TCP_RR %.0f / %.0f = %.3f", key.c_str(), i + 1, opt.pairs,
                     rr[0], rr[1], rr[0] / rr[1]);
        if (opt.stream) std::fprintf(stderr, "  stream %.2f / %.2f Gbit/s = %.3f", gb[0], gb[1], gb[0] / gb[1]);
        std::fprintf(stderr, "\n");
      }
    } catch (const Interrupted&) {
      Unschedule();
      load->reset();
      Teardown(t);
      throw;
    }
    {
      auto f = sys::ReadFile("/proc/loadavg", 4096);
      if (f.ok()) loadavg_end = f->substr(0, f->find(' ', f->find(' ', f->find(' ') + 1) + 1));
    }
    // Leave the node as ADD left it (then removed with it).
    (void)ApplyState(nodes, on);
    load->reset();
    Teardown(t);
    auto row = [&](const char* metric, const std::vector<double>& a, const std::vector<double>& b,
                   const std::vector<double>& ratio) {
      auto [m, lo, hi] = MedianWithCi(ratio);
      // The target: the guard costs at most 2 %, i.e. on/off >= 0.98.
      std::string verdict = lo >= 0.98 ? "met" : hi < 0.98 ? "missed" : "undecided (the interval holds 0.98)";
      json j = {{"topology", key},       {"metric", metric},       {"pairs", ratio.size()},
                {"on", Median(a)},       {"off", Median(b)},       {"ratio", m},
                {"ci_low", lo},          {"ci_high", hi},          {"cost_pct", (1 - m) * 100},
                {"target_pct", 2.0},     {"verdict", verdict},     {"ratios", ratio},
                {"loadavg_start", loadavg_start}, {"loadavg_end", loadavg_end},
                {"on_label", opt.on_label}, {"off_label", opt.off_label}, {"node_tables", tables},
                {"on_script", on.script}, {"off_script", off.script}};
      if (!st.ok()) j["error"] = st.ToString();
      rows.push_back(j);
    };
    row("TCP_RR", rr_on, rr_off, rr_ratio);
    if (opt.stream) row("TCP stream", st_on, st_off, st_ratio);
  }
  return {{"window_ms", opt.window_ms}, {"pairs", opt.pairs}, {"rows", rows}};
}

}  // namespace weft::bench
