// weft-bench-netpol: the NetworkPolicy section of the benchmark (issue 12,
// "Per-packet cost and scale"). Run by bench/netpol_hook, which weft-bench
// runs:
//
//   weft-bench-netpol --out DIR --prefix P --build-dir B [--quick]
//                     [--namespaces N] [--pods-per-ns N | --pods N] [--local-pods N]
//                     [--nodes N] [--policies N]
//                     [--iterations N] [--add-samples N] [--dp-rounds N] [--dp-seconds S]
//                     [--events-only] [--profile] [--cnp N]
//
// --cnp N adds N ClusterNetworkPolicies of both tiers (issue 23, a mix from
// netpol_cluster.h) after the policies, with the CRD installed in the
// stand-in: everything below is then measured with the tiers in force.
// A virtual cluster on the stand-in API server (HTTPS, token): 100
// namespaces x 100 pods (10,000 Pod objects, 110 on the measured node, the
// rest on 99 fake nodes) and 1,000 policies of a realistic mix
// (bench/netpol_cluster.h); --quick: 10 namespaces, 1,000 pods, 100
// policies, 11 local pods. weftd runs in a node netns with
// --control-plane kubernetes --network-policy true. Measured, never
// asserted:
//
//   * full resync: weftd's start until its first full table is in the
//     kernel, seen from outside: a NFNLGRP_NFTABLES listener in the node
//     netns takes the time the transaction's NEWGEN arrives (bench/nftwatch.h);
//     then weftd's RSS, PSS and USS (smaps_rollup).
//   * event to enforcement: a policy created / updated / deleted, a pod
//     relabelled (remote and local), a namespace relabelled (and back), one
//     at a time; each timed from sending the API write until the nftables
//     transaction that carries its change (its comment, its port, or its pod
//     addresses) is committed.
//   * CNI ADD of the real plugin on that node, with the pod's namespace listed
//     last in a 1,000-line namespaces file vs without networkPolicy,
//     interleaved.
//   * datapath: two real pods on the node, the server selected by a policy
//     whose peer set holds every pod of the cluster (the client among them),
//     the client egress-isolated too; iperf3, TCP_RR and connections/s with
//     the table vs without it (weftd stopped, table deleted / restored),
//     interleaved rounds.
//
// Prints one JSON object on stdout (progress on stderr); exit 1 when the
// measurement itself failed. Everything is named with the prefix and removed
// at the end, on failure and on SIGINT/SIGTERM.

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/netfilter/nf_tables.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "bench/cluster.h"
#include "bench/control.h"
#include "bench/datapath.h"
#include "bench/kubeapi.h"
#include "bench/netpol_cluster.h"
#include "bench/nftwatch.h"
#include "bench/ns.h"
#include "bench/stats.h"
#include "sys/exec.h"
#include "sys/files.h"
#include "sys/http.h"
#include "sys/netns.h"
#include "sys/nft_fake.h"
#include "sys/nft_json.h"
#include "sys/nft_kernel.h"

namespace weft::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using netpol::BenchPod;
using netpol::Cluster;

constexpr char kUnderlayIp[] = "192.0.2.254";
constexpr char kTable[] = "weft-netpol";
constexpr int kCrrPort = 7002;
constexpr int kDeniedPort = 7003;

struct Args {
  bool quick = false;
  std::string out, prefix, build_dir;
  netpol::Scale scale;
  int iterations = 0;   // rounds of the 7 event kinds
  int add_samples = 0;  // ADD+DEL pairs per variant
  int dp_rounds = 0, dp_seconds = 0;
  bool profile = false;      // perf record weftd until its first table (DIR/netpol/perf-resync.data) and during
                             // the events (DIR/netpol/perf.data)
  bool events_only = false;  // skip the CNI ADD and datapath parts
  // Time the first full table with the NFNLGRP_NFTABLES listener already
  // subscribed (as before 2026-11-28): the kernel then builds a notification
  // for every element of the transaction, which at 100,000 pods was 65 % of
  // the resync. By default the listener subscribes after the first table
  // and the resync is timed from weftd's own log lines, as a node without
  // a listener (no `nft monitor`) runs it.
  bool resync_listened = false;
  int cnp = 0;               // ClusterNetworkPolicies beside the NetworkPolicies (issue 23)
};

bool ParseArgs(int argc, char** argv, Args* a) {
  int ns = 0, per = 0, local = 0, pods = 0, nodes = 0, policies = 0;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    auto num = [&]() { return std::atoi(val().c_str()); };
    if (k == "--quick")
      a->quick = true;
    else if (k == "--out")
      a->out = val();
    else if (k == "--prefix")
      a->prefix = val();
    else if (k == "--build-dir")
      a->build_dir = val();
    else if (k == "--namespaces")
      ns = num();
    else if (k == "--pods-per-ns")
      per = num();
    else if (k == "--local-pods")
      local = num();
    else if (k == "--pods")
      pods = num();
    else if (k == "--nodes")
      nodes = num();
    else if (k == "--policies")
      policies = num();
    else if (k == "--iterations")
      a->iterations = num();
    else if (k == "--add-samples")
      a->add_samples = num();
    else if (k == "--dp-rounds")
      a->dp_rounds = num();
    else if (k == "--dp-seconds")
      a->dp_seconds = num();
    else if (k == "--profile")
      a->profile = true;
    else if (k == "--cnp")
      a->cnp = num();
    else if (k == "--events-only")
      a->events_only = true;
    else if (k == "--resync-listened")
      a->resync_listened = true;
    else
      return false;
  }
  if (a->quick) a->scale = {10, 100, 11, 9};
  if (ns > 0) a->scale.namespaces = ns;
  if (per > 0) a->scale.pods_per_ns = per;
  if (local > 0) a->scale.local_pods = local;
  // The issue's way of naming a scale: --pods 100000 --policies 10000
  // --namespaces 1000 --nodes 1000 (policies are ten per namespace; nodes
  // count the measured one).
  if (pods > 0) {
    if (pods % a->scale.namespaces != 0) {
      std::cerr << "weft-bench-netpol: --pods " << pods << " is not a multiple of --namespaces\n";
      return false;
    }
    a->scale.pods_per_ns = pods / a->scale.namespaces;
  }
  if (policies > 0 && policies != 10 * a->scale.namespaces) {
    std::cerr << "weft-bench-netpol: --policies must be 10 x --namespaces (ten per namespace), not " << policies << "\n";
    return false;
  }
  if (nodes > 0) a->scale.fake_nodes = nodes - 1;
  if (a->scale.fake_nodes > 1023) {  // 10.240.0.0/14 for the fake ones; 10.244.0.0/24 is the measured node's
    std::cerr << "weft-bench-netpol: at most 1,024 nodes\n";
    return false;
  }
  if (a->iterations <= 0) a->iterations = a->quick ? 10 : 50;
  // 300 pairs: the p99 of 60 was their largest sample, one scheduling hiccup.
  if (a->add_samples <= 0) a->add_samples = a->quick ? 8 : 300;
  if (a->dp_rounds <= 0) a->dp_rounds = a->quick ? 1 : 5;
  if (a->dp_seconds <= 0) a->dp_seconds = a->quick ? 1 : 3;
  // The prefix is what makes cleanup safe: it must be the benchmark's own.
  return !a->out.empty() && !a->build_dir.empty() && a->prefix.rfind("wb", 0) == 0 && a->prefix.size() > 3;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string Tail(const std::string& path, size_t n = 2000) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  return s.size() > n ? s.substr(s.size() - n) : s;
}

bool Has(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

Result<sys::ExecResult> RunIn(const sys::Netns& ns, const std::string& path, std::vector<std::string> argv,
                              const std::string& input = "") {
  sys::ExecRequest req;
  req.path = path;
  req.argv = std::move(argv);
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  req.stdin_data = input;
  req.netns_fd = ns.fd();
  req.timeout = std::chrono::seconds(120);
  return sys::Exec(req);
}

Status Nft(const sys::Netns& ns, std::vector<std::string> args, const std::string& input = "",
           std::string* out = nullptr) {
  args.insert(args.begin(), "nft");
  WEFT_ASSIGN_OR_RETURN(auto r, RunIn(ns, "/usr/sbin/nft", args, input));
  if (r.exit_code != 0) return Status::Error(Reason::kFailed, Domain::kFirewall,
                                             "nft " + args[1] + " failed", r.err.substr(0, 500));
  if (out) *out = std::move(r.out);
  return Status::Ok();
}

// weft_netpol_* samples of weftd's /metrics (from inside the node).
json NetpolMetrics(const sys::Netns& node) {
  auto r = RunIn(node, "/usr/bin/curl", {"curl", "-s", "-m", "3", "http://127.0.0.1:9641/metrics"});
  json out = json::object();
  if (!r.ok() || r->exit_code != 0) return out;
  std::istringstream in(r->out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("weft_netpol_", 0) != 0) continue;
    auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::atof(line.c_str() + sp + 1);
  }
  return out;
}

// The wall-clock time (s since the epoch) of a weftd log line's ts= field.
std::optional<double> LineTime(const std::string& line) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(line.c_str(), "ts=%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms) != 7)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(::timegm(&tm)) + ms / 1000.0;
}

// The time of the first line of weftd's log containing `needle`.
std::optional<double> LogTime(const std::string& path, const std::string& needle) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (line.find(needle) != std::string::npos)
      if (auto t = LineTime(line)) return t;
  return std::nullopt;
}

// weftd's "network policy synced" lines (the first at info, the rest at
// debug): when, its own wake -> applied time (conntrack flushes included)
// and the change count.
struct SyncLine {
  double wall = 0;
  double ms = 0;
  long changes = 0;
};
std::vector<SyncLine> SyncLines(const std::string& path) {
  std::vector<SyncLine> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (line.find("network policy synced") == std::string::npos) continue;
    auto t = LineTime(line);
    auto d = line.find("duration_us=");
    auto c = line.find("changes=");
    if (!t || d == std::string::npos) continue;
    out.push_back(
        {*t, std::atof(line.c_str() + d + 12) / 1000.0, c == std::string::npos ? 0 : std::atol(line.c_str() + c + 8)});
  }
  return out;
}

double WallNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// A TCP connect from inside `client_ns` to ip:port within `timeout_ms`.
bool TcpConnects(const std::string& client_ns, const std::string& ip, int port, int timeout_ms) {
  auto ns = sys::Netns::Open(NetnsPath(client_ns));
  if (!ns.ok()) return false;
  bool ok = false;
  (void)sys::RunInNetns(*ns, [&] {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) return Status::Ok();
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      ok = true;
      return Status::Ok();
    }
    if (errno != EINPROGRESS) return Status::Ok();
    pollfd p{fd.get(), POLLOUT, 0};
    if (::poll(&p, 1, timeout_ms) == 1) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      ok = err == 0;
    }
    return Status::Ok();
  });
  return ok;
}

// A listening TCP socket on ip:port inside `ns_name` (the kernel completes
// handshakes without accept()).
Result<UniqueFd> Listen(const std::string& ns_name, const std::string& ip, int port) {
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(ns_name)));
  int fd = -1;
  WEFT_RETURN_IF_ERROR(sys::RunInNetns(ns, [&] {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return fd < 0 ? Status::FromErrno(Reason::kFailed, Domain::kFile, "socket", errno) : Status::Ok();
  }));
  UniqueFd l(fd);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 16) != 0)
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "listen " + ip + ":" + std::to_string(port), errno);
  return l;
}

// CPU time of `pid` itself and of its waited-for children (weftd's nft and
// conntrack runs), ms (clock-tick resolution), and `precise`: the time its
// threads ran, from the scheduler's nanosecond accounting (the first field
// of each /proc/<pid>/task/<tid>/schedstat; -1 when the kernel has none).
// A tick (10 ms here) is as long as a whole event's work, so the tick
// counts put each event at 0, 10, 20 or 30 ms and their p99 on a step.
struct CpuMs {
  double self = 0, children = 0, precise = -1;
};
// The /proc/<pid>/task/<tid> directories of `pid`'s threads (none when it
// is gone).
std::vector<std::string> TaskDirs(pid_t pid) {
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  std::vector<std::string> out;
  if (DIR* d = ::opendir(task.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.push_back(task + "/" + e->d_name);
    ::closedir(d);
  }
  return out;
}
double ReadSchedCpuMs(pid_t pid) {
  double ns = 0;
  bool any = false;
  for (const auto& dir : TaskDirs(pid)) {
    auto st = sys::ReadFile(dir + "/schedstat", 256);
    if (!st.ok()) continue;
    ns += std::atof(st->c_str());
    any = true;
  }
  return any ? ns / 1e6 : -1;
}
CpuMs ReadCpu(pid_t pid) {
  CpuMs c;
  c.precise = ReadSchedCpuMs(pid);
  auto stat = sys::ReadFile("/proc/" + std::to_string(pid) + "/stat", 1 << 16);
  if (!stat.ok()) return c;
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return c;
  std::istringstream fields(stat->substr(close + 2));
  std::vector<std::string> f;
  for (std::string x; fields >> x;) f.push_back(x);
  if (f.size() < 15) return c;
  const double tick_ms = 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  c.self = (std::atof(f[11].c_str()) + std::atof(f[12].c_str())) * tick_ms;
  c.children = (std::atof(f[13].c_str()) + std::atof(f[14].c_str())) * tick_ms;
  return c;
}

// Waits until `pid` has had no child process (weftd's nft and conntrack
// runs) and used no CPU for 100 ms in a row, up to `cap`; returns when it
// went quiet. (On a loaded machine a gap between two children can be long,
// hence the window and the CPU check.)
Clock::time_point WaitIdle(pid_t pid, std::chrono::milliseconds cap) {
  const auto end = Clock::now() + cap;
  auto quiet_since = Clock::now();
  double cpu_at = -1;
  while (Clock::now() < end) {
    bool children = false;
    for (const auto& dir : TaskDirs(pid)) {
      auto c = sys::ReadFile(dir + "/children", 1 << 16);
      if (c.ok() && c->find_first_not_of(" \n") != std::string::npos) children = true;
    }
    const auto now = Clock::now();
    const CpuMs cpu = ReadCpu(pid);
    if (children || cpu.self + cpu.children != cpu_at) {
      cpu_at = cpu.self + cpu.children;
      quiet_since = now;
    } else if (now - quiet_since >= std::chrono::milliseconds(100)) {
      return quiet_since;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return Clock::now();
}

json Spread(const std::vector<double>& v) {
  if (v.empty()) return {{"n", 0}};
  return {{"median", Median(v)},
          {"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())},
          {"runs", v}};
}

class Bench {
 public:
  explicit Bench(const Args& a)
      : a_(a), c_(netpol::MakeCluster(a.scale)), cnps_(netpol::ClusterPolicies(a.cnp, a.scale.namespaces)) {}
  Result<json> Run();
  void Kill() {
    weftd_.Stop(SIGKILL, 0);
    api_.reset();
  }

 private:
  Status Populate();
  Status StartWeftd();
  Result<json> Resync();
  Result<json> ResyncFromLog();
  json ResyncMemory(json r);
  Result<json> Events();
  Result<json> CniAdd();
  Result<json> Datapath();
  json Memory();
  json TableCheck();

  // One event: `write` sends it (returning when the API answered);
  // `match` recognises the transaction that enforces it.
  json TimeEvent(const std::string& kind, const std::string& target, const std::function<Result<ApiReply>()>& write,
                 const std::function<bool(const NftMsg&)>& match);
  NetConfig PluginConfig(bool with_netpol, const std::string& namespaces_file) const;

  const Args& a_;
  Cluster c_;
  std::string ul_, node_, dir_, state_;
  std::unique_ptr<KubeApi> api_;
  std::optional<sys::Netns> node_ns_;
  std::optional<NftWatch> watch_;
  Daemon weftd_;
  Clock::time_point weftd_start_{};
  double weftd_start_wall_ = 0;
  json conf_;  // the plugin config weftd wrote
  double list_pods_s_ = 0, list_pods_mb_ = 0;
  std::vector<json> cnps_;  // --cnp
};

Status Bench::Populate() {
  const auto t0 = Clock::now();
  for (const auto& ns : c_.namespaces) WEFT_RETURN_IF_ERROR(api_->Create(ns));
  for (const auto& n : c_.nodes) WEFT_RETURN_IF_ERROR(api_->Store(n));
  size_t done = 0;
  for (const auto& p : c_.pods) {
    CheckInterrupt();
    WEFT_RETURN_IF_ERROR(api_->Store(c_.PodObject(p)));
    if (++done % 2000 == 0) std::cerr << "[netpol]   " << done << " pods\n";
  }
  for (const auto& p : c_.policies) WEFT_RETURN_IF_ERROR(api_->Create(p));
  if (!cnps_.empty()) {
    WEFT_ASSIGN_OR_RETURN(ApiReply r, api_->Request("POST", "/_test/crds", R"({"install":["clusternetworkpolicies"]})"));
    if (r.status != 200) return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "install the CRD: " + r.body);
    for (const auto& p : cnps_) WEFT_RETURN_IF_ERROR(api_->Create(p));
  }
  // How long the stand-in server takes to serve what weftd lists first (all
  // pods, pages of 500 as weftd asks): part of weftd's start-up that a real
  // API server would serve at its own speed.
  const auto l0 = Clock::now();
  size_t bytes = 0;
  for (std::string cont;;) {
    WEFT_ASSIGN_OR_RETURN(ApiReply r,
                          api_->Request("GET", "/api/v1/pods?limit=500" + (cont.empty() ? "" : "&continue=" + cont)));
    if (r.status != 200) return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                              "list pods: HTTP " + std::to_string(r.status));
    bytes += r.body.size();
    try {
      cont = json::parse(r.body)["metadata"].value("continue", "");
    } catch (...) {
      cont.clear();
    }
    if (cont.empty()) break;
  }
  list_pods_s_ = Ms(Clock::now() - l0) / 1000;
  list_pods_mb_ = static_cast<double>(bytes) / 1e6;
  std::cerr << "[netpol] populated " << c_.namespaces.size() << " namespaces, " << c_.nodes.size() << " nodes, "
            << c_.pods.size() << " pods, " << c_.policies.size() << " policies, " << cnps_.size()
            << " ClusterNetworkPolicies in " << Ms(Clock::now() - t0) / 1000
            << " s\n";
  return Status::Ok();
}

Status Bench::StartWeftd() {
  std::vector<std::string> extra = {
      "--control-plane",    "kubernetes", "--kubeconfig", api_->kubeconfig(), "--cluster-cidr",
      netpol::ClusterCidr(a_.scale), "--backend",  "vxlan",        "--network-policy", "true",
      "--resync-period",    "30"};
  auto argv = WeftdArgv(a_.build_dir + "/cmd/weftd/weftd", netpol::kNode, dir_, extra);
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--state-dir") argv[i + 1] = state_ + "/state";
    if (argv[i] == "--plugin-data-dir") argv[i + 1] = state_ + "/ipam";
  }
  weftd_start_wall_ = WallNow();
  weftd_start_ = Clock::now();
  WEFT_ASSIGN_OR_RETURN(weftd_, Daemon::Start(NetnsPath(node_), argv, dir_ + "/weftd.out"));
  return Status::Ok();
}

json Bench::Memory() {
  json m = json::object();
  if (auto s = ReadMemStats(weftd_.pid()); s.ok()) m = ToJson(*s);
  if (auto p = ReadProcStats(weftd_.pid()); p.ok()) m["cpu_s"] = p->cpu_s;
  m["rss_by_mapping"] = MemBreakdown(weftd_.pid());
  return m;
}

Result<json> Bench::Resync() {
  // The first transaction that creates the table is weftd's first full sync.
  auto txn = watch_->WaitTxn([](const NftMsg& m) { return m.type == NFT_MSG_NEWTABLE; }, std::chrono::minutes(3));
  if (!txn.ok())
    return Status::Error(Reason::kInternal, Domain::kNone,
                         "weftd's first table never reached the kernel: " + txn.status().ToString() +
                                              (weftd_.Running() ? "" : " (weftd exited)") + "; log tail:\n" +
                                              Tail(dir_ + "/weftd.log"));
  const double table_s = Ms(txn->at - weftd_start_) / 1000;
  json r = {{"start_to_table_s", table_s},
            {"table",
             {{"chains", txn->new_chains},
              {"rules", txn->new_rules},
              {"sets", txn->new_sets},
              {"elements", txn->new_elements},
              {"notification_bytes", txn->bytes}}}};
  if (auto lists = LogTime(dir_ + "/weftd.log", "network policy: lists complete")) {
    const double lists_s = *lists - weftd_start_wall_;
    r["start_to_lists_s"] = lists_s;
    r["lists_to_table_s"] = table_s - lists_s;
  }
  r["observed_by"] = "the NFNLGRP_NFTABLES listener (--resync-listened): the kernel notified every element";
  return ResyncMemory(std::move(r));
}

json Bench::ResyncMemory(json r) {
  r["cpu_s_at_table"] = Memory().value("cpu_s", 0.0);
  // Memory once the burst is over (weftd trims the heap after its first sync).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  r["memory"] = Memory();
  std::cerr << "[netpol] first full table in the kernel " << r.value("start_to_table_s", 0.0)
            << " s after weftd's start (" << r["table"].value("rules", 0) << " rules, "
            << r["table"].value("elements", 0) << " elements); RSS " << r["memory"].value("rss_mb", 0.0) << " MB\n";
  return r;
}

// The first full table timed without a listener on NFNLGRP_NFTABLES: from
// weftd's "network policy: lists complete" to its first "network policy
// synced" (logged once the transaction is committed), both weftd's wall
// clock in ms; the table's size read back from the kernel after it.
Result<json> Bench::ResyncFromLog() {
  const std::string log = dir_ + "/weftd.log";
  std::optional<double> synced;
  for (auto end = Clock::now() + std::chrono::minutes(3); !synced;) {
    CheckInterrupt();
    synced = LogTime(log, "network policy synced");
    if (synced) break;
    if (Clock::now() > end || !weftd_.Running())
      return Status::Error(Reason::kInternal, Domain::kNone,
                           std::string("weftd's first table never reached the kernel") +
                               (weftd_.Running() ? "" : " (weftd exited)") + "; log tail:\n" + Tail(log));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double table_s = *synced - weftd_start_wall_;
  json check = TableCheck();
  json r = {{"start_to_table_s", table_s},
            {"table",
             {{"chains", check.value("chains_kernel", 0)},
              {"rules", check.value("rules_kernel", 0)},
              {"sets", check.value("sets_kernel", 0)},
              {"elements", check.value("elements_kernel", 0)}}},
            {"observed_by", "weftd's log (lists complete -> synced, ms); no NFNLGRP_NFTABLES listener until after it"}};
  if (auto lists = LogTime(log, "network policy: lists complete")) {
    const double lists_s = *lists - weftd_start_wall_;
    r["start_to_lists_s"] = lists_s;
    r["lists_to_table_s"] = *synced - *lists;
  }
  return ResyncMemory(std::move(r));
}

json Bench::TimeEvent(const std::string& kind, const std::string& target,
                      const std::function<Result<ApiReply>()>& write, const std::function<bool(const NftMsg&)>& match) {
  json e = {{"kind", kind}, {"target", target}};
  watch_->Drain();
  const CpuMs cpu0 = ReadCpu(weftd_.pid());
  auto reply = write();
  if (!reply.ok()) {
    e["error"] = reply.status().ToString();
    return e;
  }
  e["api_ms"] = Ms(reply->answered - reply->sent);
  if (reply->retries > 0) e["api_retries"] = reply->retries;
  auto txn = watch_->WaitTxn(match, std::chrono::seconds(10));
  if (!txn.ok()) {
    e["error"] = txn.status().ToString();
    return e;
  }
  e["ms"] = Ms(txn->at - reply->sent);
  e["txn"] = {{"messages", txn->messages},
              {"rules_added", txn->new_rules},
              {"rules_deleted", txn->del_rules},
              {"elements_added", txn->new_elements},
              {"elements_deleted", txn->del_elements}};
  // A full replace (the resync check's, or a retry) that happened to carry it.
  if (txn->new_tables > 0) e["full_replace"] = true;
  // What weftd still does after the transaction (conntrack flushes): the
  // next event waits for it.
  const auto idle = WaitIdle(weftd_.pid(), std::chrono::seconds(60));
  e["busy_after_ms"] = std::max(0.0, Ms(idle - txn->at));
  // What the event cost weftd, from the write until it was idle again.
  const CpuMs cpu1 = ReadCpu(weftd_.pid());
  e["weftd_cpu_ms"] = cpu1.self - cpu0.self;
  e["children_cpu_ms"] = cpu1.children - cpu0.children;
  // weftd's threads as the scheduler counted them (no child runs now); a
  // thread that ended within the event is missing from it.
  if (cpu0.precise >= 0 && cpu1.precise >= 0) e["weftd_cpu_precise_ms"] = cpu1.precise - cpu0.precise;
  return e;
}

Result<json> Bench::Events() {
  std::vector<BenchPod>& pods = c_.pods;
  json raw = json::array();
  auto ip_match = [](const std::vector<std::string>& ips) {
    std::vector<std::string> pats;
    for (const auto& ip : ips) pats.push_back(Ipv4Bytes(ip));
    return [pats](const NftMsg& m) {
      for (const auto& p : pats)
        if (Has(m.attrs, p)) return true;
      return false;
    };
  };
  auto relabel_pod = [&](BenchPod& p, const std::string& kind) {
    p.tier = netpol::NextTier(p.tier);
    const std::string path = KubeApi::ObjectPath("Pod", p.namespace_name, p.name);
    return TimeEvent(
        kind, p.namespace_name + "/" + p.name,
        [&, path] {
          return api_->MergePatch(path, {{"metadata", {{"labels", {{"tier", p.tier}}}}}});
        },
        ip_match({p.ip}));
  };
  auto ns_ips = [&](int n) {
    std::vector<std::string> ips;
    for (const auto& p : pods)
      if (p.ns == n) ips.push_back(p.ip);
    return ips;
  };
  // Namespaces that are not prod: relabelled to prod (and out of their
  // team) their app-1 pods enter every namespace's allow-prod-gateways peer
  // set, and their backends leave the team's allow-backend-to-db sets.
  std::vector<int> movable;
  for (int n = 3; n < a_.scale.namespaces; ++n)
    if (n % 3 != 0) movable.push_back(n);
  if (movable.empty()) movable.push_back(a_.scale.namespaces - 1);
  (void)WaitIdle(weftd_.pid(), std::chrono::seconds(60));
  for (int i = 0; i < a_.iterations; ++i) {
    CheckInterrupt();
    BenchPod& local = pods[c_.local[static_cast<size_t>(i) % c_.local.size()]];
    BenchPod& remote = pods[c_.remote[(static_cast<size_t>(i) * 37) % c_.remote.size()]];
    const std::string ns = local.namespace_name;
    const std::string name = "bench-lat-" + std::to_string(i);
    const std::string comment = ns + "/" + name + " ingress";
    const int port = 7100 + i, new_port = 17100 + i;
    auto policy = [&](int p, const std::string& app) {
      return json{{"apiVersion", "networking.k8s.io/v1"},
                  {"kind", "NetworkPolicy"},
                  {"metadata", {{"name", name}, {"namespace", ns}}},
                  {"spec",
                   {{"podSelector", json::object()},
                    {"ingress",
                     {{{"from",
                        {{{"podSelector", {{"matchLabels", {{"app", app}}}}}},
                         {{"namespaceSelector", {{"matchLabels", {{"team", "t" + std::to_string(i % 10)}}}}},
                          {"podSelector", {{"matchLabels", {{"tier", "frontend"}}}}}}}},
                       {"ports", {{{"protocol", "TCP"}, {"port", p}}}}}}}}}};
    };
    // 1. A policy selecting every pod of a namespace with local pods.
    raw.push_back(TimeEvent(
        "policy_create", ns + "/" + name,
        [&] {
          return api_->Request("POST", KubeApi::CollectionPath("NetworkPolicy", ns),
                               policy(port, "app-" + std::to_string(i % 10)).dump());
        },
        [&](const NftMsg& m) { return m.type == NFT_MSG_NEWRULE && Has(m.attrs, comment); }));
    // 2. A remote pod changes tier: it leaves some peer sets, enters others.
    raw.push_back(relabel_pod(remote, "pod_relabel"));
    // 3. A namespace turns prod and leaves its team: its pods enter and leave
    //    the peer sets of namespace-selector policies across the cluster.
    const int moved = movable[static_cast<size_t>(i * 7 + 1) % movable.size()];
    const std::string nsname = netpol::NamespaceName(moved);
    raw.push_back(TimeEvent(
        "namespace_relabel", nsname,
        [&] {
          return api_->MergePatch(KubeApi::ObjectPath("Namespace", "", nsname),
                                  {{"metadata", {{"labels", {{"team", "moved"}, {"env", "prod"}}}}}});
        },
        ip_match(ns_ips(moved))));
    // 4. The policy's port and peer change.
    const std::string port_bytes = PortCmpBytes(static_cast<uint16_t>(new_port));
    raw.push_back(TimeEvent(
        "policy_update", ns + "/" + name,
        [&] {
          return api_->Request("PUT", KubeApi::ObjectPath("NetworkPolicy", ns, name),
                               policy(new_port, "app-" + std::to_string((i + 3) % 10)).dump());
        },
        [&](const NftMsg& m) {
          return m.type == NFT_MSG_NEWRULE && Has(m.attrs, comment) && Has(m.attrs, port_bytes);
        }));
    // 5. A local pod changes tier: its own chains change.
    raw.push_back(relabel_pod(local, "pod_relabel_local"));
    // 6. The namespace comes back.
    raw.push_back(TimeEvent(
        "namespace_relabel", nsname,
        [&] {
          json labels = netpol::NamespaceLabels(moved);
          return api_->MergePatch(KubeApi::ObjectPath("Namespace", "", nsname),
                                  {{"metadata", {{"labels", {{"team", labels["team"]}, {"env", labels["env"]}}}}}});
        },
        ip_match(ns_ips(moved))));
    // 7. The policy goes.
    raw.push_back(TimeEvent(
        "policy_delete", ns + "/" + name,
        [&] { return api_->Request("DELETE", KubeApi::ObjectPath("NetworkPolicy", ns, name)); },
        [&](const NftMsg& m) { return m.type == NFT_MSG_DELRULE && Has(m.attrs, comment); }));
    // Events one at a time, each sent once weftd is idle (TimeEvent waited).
    if ((i + 1) % 10 == 0) std::cerr << "[netpol]   " << (i + 1) * 7 << " events\n";
  }
  std::map<std::string, std::vector<double>> by_kind;
  std::vector<double> all, api, busy, cpu, child_cpu, total_cpu, precise_cpu;
  int missed = 0, full_replaces = 0;
  std::string first_error;
  for (const auto& e : raw) {
    if (!e.contains("ms")) {
      ++missed;
      if (first_error.empty())
        first_error = e.value("kind", "") + " " + e.value("target", "") + ": " + e.value("error", "");
      continue;
    }
    std::string k = e["kind"];
    if (k == "pod_relabel_local") k = "pod_relabel";
    by_kind[k].push_back(e["ms"]);
    all.push_back(e["ms"]);
    api.push_back(e["api_ms"]);
    busy.push_back(e.value("busy_after_ms", 0.0));
    cpu.push_back(e.value("weftd_cpu_ms", 0.0));
    child_cpu.push_back(e.value("children_cpu_ms", 0.0));
    total_cpu.push_back(e.value("weftd_cpu_ms", 0.0) + e.value("children_cpu_ms", 0.0));
    if (e.contains("weftd_cpu_precise_ms"))
      precise_cpu.push_back(e["weftd_cpu_precise_ms"].get<double>() + e.value("children_cpu_ms", 0.0));
    if (e.value("full_replace", false)) ++full_replaces;
  }
  json r = {{"count", raw.size()},
            {"missed", missed},
            {"all", Summary(all)},
            {"api_write", Summary(api)},
            {"busy_after", Summary(busy)},
            {"weftd_cpu", Summary(cpu)},
            {"children_cpu", Summary(child_cpu)},
            {"total_cpu", Summary(total_cpu)},  // weftd and every process it ran, per event
            // the same with weftd's own part in nanoseconds (schedstat), not ticks
            {"total_cpu_precise", Summary(precise_cpu)},
            {"carried_by_full_replace", full_replaces}};
  if (!first_error.empty()) r["first_error"] = first_error;
  for (const auto& [k, v] : by_kind) r["by_kind"][k] = Summary(v);
  std::vector<double> policy, label;
  for (const auto& [k, v] : by_kind) {
    auto& into = k.rfind("policy", 0) == 0 ? policy : label;
    into.insert(into.end(), v.begin(), v.end());
  }
  r["policy_events"] = Summary(policy);
  r["label_events"] = Summary(label);
  r["events"] = raw;
  std::cerr << "[netpol] " << all.size() << " events: p50 " << Percentile(all, 50) << " ms, p99 " << Percentile(all, 99)
            << " ms (" << missed << " not seen)\n";
  return r;
}

// Chains, rules and set elements of the kernel's table (read through the
// nftables layer) against the table weftd wants (GET
// /netpol/ruleset?format=json, its full transaction, applied to the
// layer's fake): after the events they must agree.
json Bench::TableCheck() {
  std::map<std::string, size_t> krules, drules, kelems, delems;
  auto count = [](const sys::nft::TableState& t, std::map<std::string, size_t>* rules,
                  std::map<std::string, size_t>* elems) {
    for (const auto& c : t.chains) (*rules)[c.name] += 0;
    for (const auto& r : t.rules) (*rules)[r.chain]++;
    for (const auto& set : t.sets)
      if (!sys::nft::IsAnonymousSetName(set.name))
        (*elems)[set.name] = t.elements.count(set.name) ? t.elements.at(set.name).size() : 0;
  };
  Result<sys::nft::TableState> kernel = sys::nft::OpError("not read", EINVAL);
  Status st = sys::RunInNetns(*node_ns_, [&] {
    kernel = sys::nft::Kernel().Dump(sys::nft::Family::kInet, kTable);
    return Status::Ok();
  });
  if (!st.ok() || !kernel.ok()) return {{"error", "reading the kernel's table failed"}};
  count(*kernel, &krules, &kelems);
  auto r = RunIn(*node_ns_, "/usr/bin/curl",
                 {"curl", "-s", "-m", "10", "http://127.0.0.1:9641/netpol/ruleset?format=json"});
  if (!r.ok() || r->exit_code != 0) return {{"error", "GET /netpol/ruleset?format=json failed"}};
  auto tx = sys::nft::ParseTransactionJson(r->out);
  if (!tx.ok()) return {{"error", "weftd's ruleset: " + tx.status().ToString()}};
  sys::nft::Fake fake;
  if (Status a = fake.Apply(*tx); !a.ok()) return {{"error", "weftd's ruleset does not apply: " + a.ToString()}};
  auto desired = fake.Dump(sys::nft::Family::kInet, kTable);
  if (!desired.ok()) return {{"error", "weftd's ruleset builds no table"}};
  count(*desired, &drules, &delems);
  json out = {{"chains_kernel", krules.size()}, {"chains_desired", drules.size()}};
  size_t kr = 0, dr = 0, ke = 0, de = 0;
  json diffs = json::array();
  for (const auto& [c, n] : krules) kr += n;
  for (const auto& [c, n] : drules) dr += n;
  for (const auto& [c, n] : kelems) ke += n;
  for (const auto& [c, n] : delems) de += n;
  auto compare = [&](const char* what, const std::map<std::string, size_t>& k,
                     const std::map<std::string, size_t>& d) {
    std::set<std::string> names;
    for (const auto& [n, v] : k) names.insert(n);
    for (const auto& [n, v] : d) names.insert(n);
    for (const auto& n : names) {
      size_t kv = k.count(n) ? k.at(n) : SIZE_MAX, dv = d.count(n) ? d.at(n) : SIZE_MAX;
      if (kv != dv && diffs.size() < 10)
        diffs.push_back({{what, n},
                         {"kernel", kv == SIZE_MAX ? json(nullptr) : json(kv)},
                         {"desired", dv == SIZE_MAX ? json(nullptr) : json(dv)}});
    }
  };
  compare("chain", krules, drules);
  compare("set", kelems, delems);
  out["rules_kernel"] = kr;
  out["rules_desired"] = dr;
  out["elements_kernel"] = ke;
  out["elements_desired"] = de;
  out["sets_kernel"] = kelems.size();
  out["sets_desired"] = delems.size();
  out["differences"] = diffs;
  out["agree"] = diffs.empty();
  return out;
}

NetConfig Bench::PluginConfig(bool with_netpol, const std::string& namespaces_file) const {
  json conf = conf_;
  conf["ranges"] = {netpol::kRealPodRange};
  if (with_netpol) {
    if (!namespaces_file.empty()) conf["networkPolicy"]["namespacesFile"] = namespaces_file;
  } else {
    conf.erase("networkPolicy");
  }
  NetConfig c;
  c.key = with_netpol ? "netpol" : "plain";
  c.label = c.key;
  c.weft = true;
  c.plugins = {conf};
  return c;
}

Result<json> Bench::CniAdd() {
  // The pod's namespace is the last of 1,000 lines: the plugin reads them all.
  const std::string file = state_ + "/namespaces-1000";
  std::string content = "# 1,000 namespaces with policies (weft-bench)\n";
  for (int i = 0; i < 999; ++i) content += "team-" + std::to_string(i) + "\n";
  content += "bench-add\n";
  WEFT_RETURN_IF_ERROR(sys::WriteFileAtomic(file, content, 0644));
  const NetConfig with = PluginConfig(true, file), without = PluginConfig(false, "");
  Runner runner({a_.build_dir + "/cmd/weft"});
  WEFT_ASSIGN_OR_RETURN(auto node_netns, sys::Netns::Open(NetnsPath(node_)));
  Node node{node_, std::move(node_netns), state_};
  Settle(a_.prefix, 0);
  std::vector<double> add[2], del[2];
  std::vector<std::string> used;
  int errors = 0;
  std::string first_error;
  for (int s = 0; s < a_.add_samples; ++s) {
    for (int k = 0; k < 2; ++k) {
      CheckInterrupt();
      const int v = (s % 2 == 0) ? k : 1 - k;  // interleaved, alternating which goes first
      Pod p;
      p.id = a_.prefix + "-add" + std::to_string(s) + (v == 0 ? "n" : "p");
      p.netns = p.id;
      p.k8s_ns = "bench-add";
      WEFT_RETURN_IF_ERROR(CreateNetns(p.netns));
      used.push_back(p.netns);
      const NetConfig& cfg = v == 0 ? with : without;
      auto ar = runner.Add(cfg, node, p);
      if (!ar.ok) {
        if (errors++ == 0) first_error = ar.error;
        continue;
      }
      add[v].push_back(ar.ms);
      auto dr = runner.Del(cfg, node, p);
      if (dr.ok)
        del[v].push_back(dr.ms);
      else if (errors++ == 0)
        first_error = dr.error;
    }
  }
  for (const auto& n : used) DeleteNetns(n);
  Settle(a_.prefix, static_cast<int>(used.size()));
  json r = {{"namespaces_file_lines", 1000},
            {"with_netpol", {{"add", Summary(add[0])}, {"del", Summary(del[0])}}},
            {"without", {{"add", Summary(add[1])}, {"del", Summary(del[1])}}},
            {"errors", errors}};
  if (!first_error.empty()) r["first_error"] = first_error;
  if (!add[0].empty() && !add[1].empty()) {
    r["ratio_p50"] = Percentile(add[0], 50) / Percentile(add[1], 50);
    r["ratio_p99"] = Percentile(add[0], 99) / Percentile(add[1], 99);
    // The fastest ADD of each: what the networkPolicy key itself costs, with
    // the least scheduling noise.
    r["ratio_min"] = *std::min_element(add[0].begin(), add[0].end()) / *std::min_element(add[1].begin(), add[1].end());
  }
  std::cerr << "[netpol] CNI ADD p50 " << Percentile(add[0], 50) << " ms with networkPolicy, " << Percentile(add[1], 50)
            << " ms without\n";
  return r;
}

Result<json> Bench::Datapath() {
  Runner runner({a_.build_dir + "/cmd/weft"});
  WEFT_ASSIGN_OR_RETURN(auto node_netns, sys::Netns::Open(NetnsPath(node_)));
  Node node{node_, std::move(node_netns), state_};
  const NetConfig cfg = PluginConfig(true, "");  // weftd's own namespaces file
  const std::string client_ns = netpol::NamespaceName(3), server_ns = netpol::NamespaceName(4);
  Pod client, server;
  client.id = client.netns = a_.prefix + "-dpc";
  client.k8s_ns = client_ns;
  server.id = server.netns = a_.prefix + "-dps";
  server.k8s_ns = server_ns;
  for (Pod* p : {&client, &server}) {
    WEFT_RETURN_IF_ERROR(CreateNetns(p->netns, true));
    auto r = runner.Add(cfg, node, *p);
    if (!r.ok) return Status::Error(Reason::kFailed, Domain::kExec, "datapath pod " + p->id + ": " + r.error);
  }
  const std::string cip = PodIp(client.result), sip = PodIp(server.result);
  auto pod_object = [&](const std::string& ns, const std::string& name, const std::string& ip, const json& labels) {
    BenchPod b;
    b.ns = ns == client_ns ? 3 : 4;
    b.j = 9000;
    b.namespace_name = ns;
    b.name = name;
    b.node = netpol::kNode;
    b.ip = ip;
    b.local = true;
    b.app = labels["app"];
    b.tier = "none";
    json o = c_.PodObject(b);
    o["metadata"]["labels"] = labels;
    return o;
  };
  WEFT_RETURN_IF_ERROR(api_->Store(pod_object(client_ns, "dp-client", cip, {{"app", "dp-client"}})));
  WEFT_RETURN_IF_ERROR(api_->Store(pod_object(server_ns, "dp-server", sip, {{"app", "dp-server"}})));
  // The server admits every pod of the cluster (one peer set of all of
  // them) on the measured ports; kDeniedPort stays closed.
  WEFT_RETURN_IF_ERROR(api_->Create({{"apiVersion", "networking.k8s.io/v1"},
                                     {"kind", "NetworkPolicy"},
                                     {"metadata", {{"name", "bench-datapath"}, {"namespace", server_ns}}},
                                     {"spec",
                                      {{"podSelector", {{"matchLabels", {{"app", "dp-server"}}}}},
                                       {"ingress",
                                        {{{"from", {{{"namespaceSelector", json::object()}}}},
                                          {"ports",
                                           {{{"protocol", "TCP"}, {"port", kIperfPort}},
                                            {{"protocol", "TCP"}, {"port", kRrPort}},
                                            {{"protocol", "TCP"}, {"port", kCrrPort}}}}}}}}}}));
  const PodPair pair{client.netns, server.netns, sip};
  auto check = [&](bool table) -> Status {
    WEFT_ASSIGN_OR_RETURN(UniqueFd allowed, Listen(server.netns, sip, kRrPort));
    WEFT_ASSIGN_OR_RETURN(UniqueFd denied, Listen(server.netns, sip, kDeniedPort));
    const auto end = Clock::now() + std::chrono::seconds(10);
    while (!TcpConnects(client.netns, sip, kRrPort, 300))
      if (Clock::now() > end) return Status::Error(Reason::kInternal, Domain::kNone,
                                                   "client cannot reach the server's allowed port");
    bool denied_open = TcpConnects(client.netns, sip, kDeniedPort, 300);
    if (denied_open == table)
      return Status::Error(Reason::kInternal, Domain::kNone, std::string("port ") + std::to_string(kDeniedPort) +
                                                (table ? " is open with the policy table in force"
                                                       : " is closed without the policy table"));
    return Status::Ok();
  };
  WEFT_RETURN_IF_ERROR(check(true));
  // weftd would put the table back; the table stays in the kernel without it.
  weftd_.Stop(SIGTERM, 5000);
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(node_)));
  std::string saved;
  WEFT_RETURN_IF_ERROR(Nft(ns, {"list", "table", "inet", kTable}, "", &saved));
  // The largest set the client's address is in (the dispatch and local
  // sets aside): the peer set the server's rule looks it up in.
  size_t peer_set = 0;
  {
    std::string listing;
    if (Nft(ns, {"-j", "list", "table", "inet", kTable}, "", &listing).ok()) {
      try {
        for (const auto& e : json::parse(listing).value("nftables", json::array())) {
          if (!e.contains("set") || !e["set"].contains("elem")) continue;
          const json& elems = e["set"]["elem"];
          if (e["set"].value("name", "") == "local4") continue;
          for (const auto& el : elems)
            if (el.is_string() && el.get<std::string>() == cip) peer_set = std::max(peer_set, elems.size());
        }
      } catch (...) {
      }
    }
  }
  bool table = true;
  auto set_table = [&](bool want) -> Status {
    if (want == table) return Status::Ok();
    if (want)
      WEFT_RETURN_IF_ERROR(Nft(ns, {"-f", "-"}, saved));
    else
      WEFT_RETURN_IF_ERROR(Nft(ns, {"delete", "table", "inet", kTable}));
    table = want;
    return check(want);
  };
  std::vector<double> gbps[2], rr[2], rr_p50[2], crr[2];
  std::string first_error;
  for (int round = 0; round < a_.dp_rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const int mode = round % 2 == 0 ? k : 1 - k;  // 0 = with the table
      CheckInterrupt();
      WEFT_RETURN_IF_ERROR(set_table(mode == 0));
      auto g = MeasureIperf(pair, a_.dp_seconds);
      if (g.ok())
        gbps[mode].push_back(*g);
      else if (first_error.empty())
        first_error = g.status().ToString();
      auto r = MeasureRr(pair, std::max(1, a_.dp_seconds / 2 + 1));
      if (r.ok()) {
        rr[mode].push_back((*r)["trans_per_s"]);
        rr_p50[mode].push_back((*r)["p50_us"]);
      } else if (first_error.empty()) {
        first_error = r.status().ToString();
      }
      auto c = MeasureCrr(pair, std::max(1, a_.dp_seconds / 2 + 1), kCrrPort);
      if (c.ok())
        crr[mode].push_back((*c)["conn_per_s"]);
      else if (first_error.empty())
        first_error = c.status().ToString();
    }
  }
  WEFT_RETURN_IF_ERROR(set_table(true));
  json r = {{"client", client_ns + "/dp-client " + cip},
            {"server", server_ns + "/dp-server " + sip},
            {"rounds", a_.dp_rounds},
            {"seconds", a_.dp_seconds},
            {"client_peer_set_elements", peer_set},
            {"with_table",
             {{"gbps", Spread(gbps[0])},
              {"rr_per_s", Spread(rr[0])},
              {"rr_p50_us", Spread(rr_p50[0])},
              {"crr_per_s", Spread(crr[0])}}},
            {"without_table",
             {{"gbps", Spread(gbps[1])},
              {"rr_per_s", Spread(rr[1])},
              {"rr_p50_us", Spread(rr_p50[1])},
              {"crr_per_s", Spread(crr[1])}}}};
  auto ratio = [](const std::vector<double>& a, const std::vector<double>& b) -> json {
    if (a.empty() || b.empty()) return nullptr;
    return Median(a) / Median(b);
  };
  r["gbps_ratio"] = ratio(gbps[0], gbps[1]);
  r["rr_ratio"] = ratio(rr[0], rr[1]);
  r["crr_ratio"] = ratio(crr[0], crr[1]);
  if (!first_error.empty()) r["error"] = first_error;
  DeleteNetns(client.netns);
  DeleteNetns(server.netns);
  std::cerr << "[netpol] datapath with/without the table: throughput " << r["gbps_ratio"].dump() << "x, TCP_RR "
            << r["rr_ratio"].dump() << "x, connections/s " << r["crr_ratio"].dump() << "x\n";
  return r;
}

Result<json> Bench::Run() {
  const netpol::Scale& s = a_.scale;
  if (s.local_pods > 127 || s.local_pods < 1 || s.fake_nodes < 1 ||
      (s.total_pods() - s.local_pods) > 252 * s.fake_nodes)
    return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                         "scale out of range: at most 127 local pods and 252 per fake node");
  ul_ = a_.prefix + "-ul";
  node_ = a_.prefix + "-node";
  dir_ = a_.out + "/netpol";
  ::mkdir(dir_.c_str(), 0755);
  for (const char* f : {"/weftd.log", "/weftd.out", "/apiserver.log", "/plugin.log"}) ::unlink((dir_ + f).c_str());
  state_ = MakeTempDir(a_.prefix, "np");
  if (state_.empty()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "mkdtemp", errno);
  WEFT_RETURN_IF_ERROR(MakeUnderlay(ul_, kUnderlayIp));
  std::cerr << "[netpol] starting the stand-in API server\n";
  WEFT_ASSIGN_OR_RETURN(api_,
                        KubeApi::Start(NetnsPath(ul_), kUnderlayIp, state_,
                                       std::string(WEFT_SOURCE_DIR) + "/tests/integration/agent/fake_apiserver.py"));
  WEFT_RETURN_IF_ERROR(Populate());
  WEFT_RETURN_IF_ERROR(MakeNodeOnUnderlay(node_, ul_, 11, kUnderlayIp));
  if (a_.resync_listened) {
    WEFT_ASSIGN_OR_RETURN(NftWatch w, NftWatch::Open(NetnsPath(node_), kTable));
    watch_.emplace(std::move(w));
  }
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(node_)));
  node_ns_.emplace(std::move(ns));

  json out = {{"control_plane", "kubernetes (stand-in API server, HTTPS)"},
              {"scale",
               {{"namespaces", s.namespaces},
                {"pods", s.total_pods()},
                {"local_pods", s.local_pods},
                {"nodes", c_.nodes.size()},
                {"policies", c_.policies.size()},
                {"cluster_network_policies", cnps_.size()}}},
              {"enforced",
               "the nftables transaction carrying the change is committed: its NEWGEN seen by a NFNLGRP_NFTABLES "
               "listener in the node netns"}};
  out["at_target_scale"] = s.total_pods() >= 10000 && c_.policies.size() >= 1000 && s.local_pods >= 110;
  // Issue 24 §2's second row: 100,000 pods, 10,000 policies, 1,000
  // namespaces and nodes, 110 on the node (its own targets).
  out["at_large_scale"] = s.total_pods() >= 100000 && c_.policies.size() >= 10000 && s.namespaces >= 1000 &&
                          s.fake_nodes + 1 >= 1000 && s.local_pods >= 110;
  std::cerr << "[netpol] starting weftd\n";
  WEFT_RETURN_IF_ERROR(StartWeftd());
  // --profile: weftd from its start until its first full table is in
  // (the lists, the engine's first build, the apply), then the events apart.
  Daemon perf_resync;
  if (a_.profile) {
    auto p = Daemon::Start("/proc/self/ns/net",
                           {"/usr/bin/perf", "record", "-F", "999", "-g", "-p", std::to_string(weftd_.pid()), "-o",
                            dir_ + "/perf-resync.data"},
                           dir_ + "/perf-resync.log");
    if (p.ok()) perf_resync = std::move(*p);
  }
  auto resync = watch_ ? Resync() : ResyncFromLog();
  perf_resync.Stop(SIGINT, 10000);
  if (!resync.ok()) return resync.status();
  if (!watch_) {  // the events are timed by the listener
    WEFT_ASSIGN_OR_RETURN(NftWatch w, NftWatch::Open(NetnsPath(node_), kTable));
    watch_.emplace(std::move(w));
  }
  out["resync"] = std::move(*resync);
  out["resync"]["apiserver_list_pods_s"] = list_pods_s_;
  out["resync"]["apiserver_list_pods_mb"] = list_pods_mb_;
  // The conflist (the plugin's config with weftd's namespaces file).
  for (auto end = Clock::now() + std::chrono::seconds(20);;) {
    auto l = ReadConflist(dir_);
    if (l.ok() && l->contains("plugins") && !(*l)["plugins"].empty()) {
      conf_ = (*l)["plugins"][0];
      break;
    }
    if (Clock::now() > end) return Status::Error(Reason::kInternal, Domain::kNone,
                                                 "weftd wrote no conflist under " + dir_);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cerr << "[netpol] events (" << a_.iterations * 7 << ")\n";
  Daemon perf;
  if (a_.profile) {
    auto p = Daemon::Start(
        "/proc/self/ns/net",
        {"/usr/bin/perf", "record", "-F", "999", "-g", "-p", std::to_string(weftd_.pid()), "-o", dir_ + "/perf.data"},
        dir_ + "/perf.log");
    if (p.ok()) perf = std::move(*p);
  }
  WEFT_ASSIGN_OR_RETURN(json ev, Events());
  perf.Stop(SIGINT, 10000);
  json events = ev;
  events.erase("events");
  out["events"] = events;
  (void)WaitIdle(weftd_.pid(), std::chrono::seconds(60));
  out["table_check_after_events"] = TableCheck();
  // weftd's own account of its first (full) sync: wake -> applied.
  if (auto syncs = SyncLines(dir_ + "/weftd.log"); !syncs.empty())
    out["resync"]["weftd_reported_sync_s"] = syncs.front().ms / 1000;
  out["memory_after_events"] = Memory();
  out["weftd_metrics"] = NetpolMetrics(*node_ns_);
  std::ofstream(dir_ + "/events.json") << ev["events"].dump(1) << "\n";
  // The flat keys weft-bench evaluates.
  out["resync_s"] = out["resync"].value("lists_to_table_s", out["resync"]["start_to_table_s"].get<double>());
  out["rss_mb"] =
      std::max(out["resync"]["memory"].value("rss_mb", 0.0), out["memory_after_events"].value("rss_mb", 0.0));
  out["enforce_p50_ms"] = out["events"]["all"]["p50"];
  out["enforce_p99_ms"] = out["events"]["all"]["p99"];
  // The scheduler's nanoseconds where the kernel keeps them, else ticks.
  const bool precise = out["events"]["total_cpu_precise"].value("n", 0) > 0;
  out["cpu_per_event_p99_ms"] = out["events"][precise ? "total_cpu_precise" : "total_cpu"]["p99"];
  out["cpu_per_event_p50_ms"] = out["events"][precise ? "total_cpu_precise" : "total_cpu"]["p50"];
  if (a_.events_only) return out;
  std::cerr << "[netpol] CNI ADD\n";
  WEFT_ASSIGN_OR_RETURN(out["cni_add"], CniAdd());
  std::cerr << "[netpol] datapath\n";
  WEFT_ASSIGN_OR_RETURN(out["datapath"], Datapath());
  out["notification_overflows"] = watch_->overflows();

  if (out["cni_add"].contains("ratio_p50")) out["add_ratio_p50"] = out["cni_add"]["ratio_p50"];
  if (out["cni_add"].contains("ratio_p99")) out["add_ratio_p99"] = out["cni_add"]["ratio_p99"];
  out["dp_gbps_ratio"] = out["datapath"]["gbps_ratio"];
  out["dp_rr_ratio"] = out["datapath"]["rr_ratio"];
  return out;
}

int Main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: weft-bench-netpol --out DIR --prefix wbNNN-x --build-dir DIR [--quick] [--namespaces N]\n"
                 "                         [--pods-per-ns N | --pods N] [--local-pods N] [--nodes N] [--policies N]\n"
                 "                         [--iterations N] [--add-samples N]\n"
                 "                         [--dp-rounds N] [--dp-seconds S] [--events-only] [--profile] [--cnp N]\n"
                 "                         [--resync-listened]\n");
    return 2;
  }
  if (Status st = StartBenchDriver(a.out, a.build_dir, {"/cmd/weftd/weftd", "/cmd/weft/weft"}); !st.ok()) {
    std::fprintf(stderr, "weft-bench-netpol: %s\n", st.msg().c_str());
    return 1;
  }
  if (!sys::InitHttp().ok()) {
    std::fprintf(stderr, "weft-bench-netpol: cannot initialise the HTTP client\n");
    return 1;
  }
  CleanupPrefix(a.prefix);  // a leftover of a crashed run with this pid
  Result<json> r = Status::Error(Reason::kInternal, Domain::kNone, "not run");
  {
    Bench b(a);
    try {
      r = b.Run();
    } catch (const Interrupted&) {
      b.Kill();
      CleanupPrefix(a.prefix);
      return 130;
    }
  }
  CleanupPrefix(a.prefix);
  if (!r.ok()) {
    std::fprintf(stderr, "weft-bench-netpol: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::ofstream(a.out + "/netpol.json") << r->dump(2) << "\n";
  std::cout << r->dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace weft::bench

int main(int argc, char** argv) {
  return weft::bench::RunDriverMain("weft-bench-netpol", argc, argv, weft::bench::Main);
}
