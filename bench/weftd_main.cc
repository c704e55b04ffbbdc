// weft-bench-weftd: section 4 of the benchmark, weftd at scale (the method of
// tests/e2e/scale_test.cc). Run by bench/weftd_hook, which weft-bench runs:
//
//   weft-bench-weftd --out DIR --prefix P --build-dir B [--quick] [--peers 100,1000]
//
// For each peer count N (100, 1000, 5000; --quick: 100): an underlay netns
// with a bridge and a real etcd on it, N fake peer subnets registered in etcd
// (transactions of 250 puts), then a fresh node netns on the bridge and weftd
// started in it (--control-plane etcd --backend vxlan). Timed from the start
// of weftd until the kernel of the node has all N peer routes, seen from
// RTM_NEWROUTE notifications (no polling); then memory (RSS, PSS and USS from
// smaps_rollup, per mapping from smaps, VmHWM) and CPU
// (utime+stime) of weftd; then peers joining and leaving one at a time, timed
// from the etcd write until the kernel announces the route added or removed.
//
// Prints one JSON object on stdout (everything else goes to stderr); exit 1
// when the measurement itself failed. Everything is named with the prefix and
// removed at the end, on failure and on SIGINT/SIGTERM.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/etcd.h"
#include "base/strings.h"
#include "bench/cluster.h"
#include "bench/ns.h"
#include "bench/stats.h"
#include "sys/files.h"
#include "sys/http.h"
#include "sys/netlink.h"
#include "sys/netns.h"

namespace weft::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kUnderlayIp[] = "192.0.2.254";

struct Args {
  bool quick = false;
  std::string out, prefix, build_dir;
  std::vector<int> peers;
  int changes = 0;  // joins and leaves timed at each count
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--quick") a->quick = true;
    else if (k == "--out") a->out = val();
    else if (k == "--prefix") a->prefix = val();
    else if (k == "--build-dir") a->build_dir = val();
    else if (k == "--changes") a->changes = std::atoi(val().c_str());
    else if (k == "--peers") {
      std::stringstream ss(val());
      for (std::string p; std::getline(ss, p, ',');)
        if (!p.empty()) a->peers.push_back(std::atoi(p.c_str()));
    } else {
      return false;
    }
  }
  if (a->peers.empty()) a->peers = a->quick ? std::vector<int>{100} : std::vector<int>{100, 1000, 5000};
  if (a->changes <= 0) a->changes = a->quick ? 1 : 5;
  // The prefix is what makes cleanup safe: it must be the benchmark's own.
  return !a->out.empty() && !a->build_dir.empty() && a->prefix.rfind("wb", 0) == 0 && a->prefix.size() > 3;
}

// Peer i's subnet key and record, as in tests/e2e/scale_test.cc: subnets
// 10.1.0.0/24 upwards (weftd claims 10.0.0.0/24 for itself), host IPs in
// 198.18.0.0/15 (no packet is ever sent to them: they only fill the FDB).
std::string PeerKey(const std::string& etcd_prefix, int i) {
  return etcd_prefix + "/subnets/10." + std::to_string(1 + i / 256) + "." + std::to_string(i % 256) + ".0-24";
}
std::string PeerDst(int i) { return "10." + std::to_string(1 + i / 256) + "." + std::to_string(i % 256) + ".0/24"; }

std::string PeerValue(int i) {
  char mac[32];
  std::snprintf(mac, sizeof mac, "0a:01:%02x:%02x:00:01", (i >> 8) & 0xff, i & 0xff);
  return json{{"node", "fake" + std::to_string(i)},
              {"hostIP", "198.18." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1)},
              {"vtepMAC", mac},
              {"backend", "vxlan"}}
      .dump();
}

// Runs `fn` with an etcd client made inside the underlay netns.
Status WithEtcd(const sys::Netns& ul, const std::function<Status(etcd::EtcdClient&)>& fn) {
  return sys::RunInNetns(ul, [&] {
    etcd::EtcdClient c({std::string("http://") + kUnderlayIp + ":2379"}, {});
    return fn(c);
  });
}

Status RegisterPeers(const sys::Netns& ul, const std::string& etcd_prefix, int n) {
  return WithEtcd(ul, [&](etcd::EtcdClient& c) -> Status {
    WEFT_RETURN_IF_ERROR(c.Put(etcd_prefix + "/config", R"({"network":"10.0.0.0/8","subnetLen":24})"));
    for (int start = 0; start < n; start += 250) {
      json ops = json::array();
      for (int i = start; i < std::min(n, start + 250); ++i)
        ops.push_back({{"request_put",
                        {{"key", weft::Base64Encode(PeerKey(etcd_prefix, i))},
                         {"value", weft::Base64Encode(PeerValue(i))}}}});
      WEFT_ASSIGN_OR_RETURN(bool ok, c.Txn(json{{"success", ops}}.dump()));
      if (!ok) return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "etcd txn of peers failed");
    }
    return Status::Ok();
  });
}

// Permanent ARP and FDB entries on weft.1 (each peer needs one of each).
json CountNeighbours(const std::string& node) {
  auto ns = sys::Netns::Open(NetnsPath(node));
  if (!ns.ok()) return nullptr;
  auto nl = sys::Netlink::OpenIn(*ns);
  if (!nl.ok()) return nullptr;
  auto idx = LinkIndex(*nl, "weft.1");
  if (!idx.ok()) return nullptr;
  auto arp = nl->ListNeighs(*idx, false);
  auto fdb = nl->ListNeighs(*idx, true);
  return {{"arp", arp.ok() ? static_cast<int>(arp->size()) : -1}, {"fdb", fdb.ok() ? static_cast<int>(fdb->size()) : -1}};
}

std::string Tail(const std::string& path, size_t n = 2000) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  return s.size() > n ? s.substr(s.size() - n) : s;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One peer count on a fresh node: convergence, RSS, CPU, joins and leaves.
Result<json> MeasureCount(const Args& a, const sys::Netns& ul, const std::string& ul_name, int n, int idx) {
  const std::string etcd_prefix = "/weft/bench" + std::to_string(n);
  const std::string node = a.prefix + "-n" + std::to_string(idx);
  const std::string dir = a.out + "/weftd-" + std::to_string(n);
  ::mkdir(dir.c_str(), 0755);
  ::unlink((dir + "/weftd.log").c_str());
  ::unlink((dir + "/weftd.out").c_str());
  std::cerr << "[weftd] " << n << " peers: registering in etcd\n";
  WEFT_RETURN_IF_ERROR(RegisterPeers(ul, etcd_prefix, n));
  // Fresh state each count: weftd must not find a remembered subnet.
  std::string state = MakeTempDir(a.prefix, "state" + std::to_string(n));
  if (state.empty()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "mkdtemp", errno);
  WEFT_RETURN_IF_ERROR(MakeNodeOnUnderlay(node, ul_name, 11 + idx, kUnderlayIp));
  // Subscribed before weftd starts, so no route can be missed.
  WEFT_ASSIGN_OR_RETURN(RouteWatch watch, RouteWatch::Open(NetnsPath(node)));

  std::vector<std::string> extra = {"--control-plane", "etcd", "--etcd-endpoints",
                                    std::string("http://") + kUnderlayIp + ":2379", "--etcd-prefix", etcd_prefix,
                                    "--backend", "vxlan", "--resync-period", "30"};
  auto argv = WeftdArgv(a.build_dir + "/cmd/weftd/weftd", "bench-node", dir, extra);
  // Everything but the log and the conflist is throwaway state under /tmp.
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--state-dir") argv[i + 1] = state + "/state";
    if (argv[i] == "--plugin-data-dir") argv[i + 1] = state + "/ipam";
  }
  std::cerr << "[weftd] " << n << " peers: starting weftd\n";
  const auto t0 = Clock::now();
  WEFT_ASSIGN_OR_RETURN(Daemon weftd, Daemon::Start(NetnsPath(node), argv, dir + "/weftd.out"));
  auto all = watch.WaitUntil([&](const std::set<std::string>& r) { return static_cast<int>(r.size()) >= n; },
                             std::chrono::seconds(n > 1000 ? 180 : 60));
  if (!all.ok())
    return Status::Error(Reason::kInternal, Domain::kNone,
                         std::to_string(n) + " peers never converged: " + all.status().ToString() +
                                              (weftd.Running() ? "" : " (weftd exited)") + "; weftd log tail:\n" +
                                              Tail(dir + "/weftd.log"));
  json r = {{"peers", n},
            {"converge_s", Ms(*all - t0) / 1000.0},
            {"first_route_s", Ms(watch.first_route() - t0) / 1000.0}};
  // The kernel state is complete besides the routes: ARP and FDB per peer.
  r["neighbours"] = CountNeighbours(node);
  // RSS once the burst is over (allocator settled), peak, CPU spent so far.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  WEFT_ASSIGN_OR_RETURN(ProcStats ps, ReadProcStats(weftd.pid()));
  WEFT_ASSIGN_OR_RETURN(MemStats mem, ReadMemStats(weftd.pid()));
  r["rss_mb"] = mem.rss_mb;
  r["pss_mb"] = mem.pss_mb;
  r["uss_mb"] = mem.uss_mb;
  r["peak_rss_mb"] = ps.hwm_mb;
  r["cpu_s"] = ps.cpu_s;
  r["rss_by_kind"] = MemBreakdown(weftd.pid());
  r["by_mapping"] = MemByMapping(weftd.pid());
  // The whole smaps, for whoever wants to look further.
  if (auto smaps = sys::ReadFile("/proc/" + std::to_string(weftd.pid()) + "/smaps", 64 << 20); smaps.ok())
    std::ofstream(dir + "/smaps.txt") << *smaps;

  // Peers joining (new subnets past the N) and leaving (original ones), one
  // at a time; each timed from the etcd write being sent until the kernel
  // has announced the route added, resp. removed.
  std::vector<double> join, leave;
  for (int k = 0; k < a.changes; ++k) {
    CheckInterrupt();
    const int j = n + k;
    auto t1 = Clock::now();
    WEFT_RETURN_IF_ERROR(
        WithEtcd(ul, [&](etcd::EtcdClient& c) { return c.Put(PeerKey(etcd_prefix, j), PeerValue(j)); }));
    WEFT_ASSIGN_OR_RETURN(auto seen, watch.WaitUntil([&](const std::set<std::string>& s) { return s.count(PeerDst(j)) > 0; },
                                                     std::chrono::seconds(20)));
    join.push_back(Ms(seen - t1));
    const int l = 7 + k;
    auto t2 = Clock::now();
    WEFT_RETURN_IF_ERROR(WithEtcd(ul, [&](etcd::EtcdClient& c) { return c.Delete(PeerKey(etcd_prefix, l)); }));
    WEFT_ASSIGN_OR_RETURN(seen, watch.WaitUntil([&](const std::set<std::string>& s) { return s.count(PeerDst(l)) == 0; },
                                                std::chrono::seconds(20)));
    leave.push_back(Ms(seen - t2));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // one change at a time
  }
  r["join_ms"] = {{"median", Median(join)}, {"max", *std::max_element(join.begin(), join.end())}, {"runs", join}};
  r["leave_ms"] = {{"median", Median(leave)}, {"max", *std::max_element(leave.begin(), leave.end())}, {"runs", leave}};
  r["notification_overflows"] = watch.overflows();
  r["weftd_running"] = weftd.Running();
  weftd.Stop(SIGTERM);
  DeleteNetns(node);
  RemoveTree(state);
  std::cerr << "[weftd] " << n << " peers: converged in " << r["converge_s"].get<double>() << " s, RSS "
            << mem.rss_mb << " MB, PSS " << mem.pss_mb << " MB, USS " << mem.uss_mb << " MB\n";
  return r;
}

int Main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: weft-bench-weftd --out DIR --prefix wbNNN-x --build-dir DIR [--quick] [--peers 100,1000] "
                 "[--changes N]\n");
    return 2;
  }
  if (Status st = StartBenchDriver(a.out, a.build_dir, {"/cmd/weftd/weftd"}); !st.ok()) {
    std::fprintf(stderr, "weft-bench-weftd: %s\n", st.msg().c_str());
    return 1;
  }
  if (!sys::InitHttp().ok()) {
    std::fprintf(stderr, "weft-bench-weftd: cannot initialise the HTTP client\n");
    return 1;
  }

  json out = {{"backend", "vxlan"},
              {"control_plane", "etcd"},
              {"peer_counts", a.peers},
              {"changes_per_count", a.changes},
              {"wait", "RTM_NEWROUTE/RTM_DELROUTE multicast notifications in the node netns (no polling)"},
              {"counts", json::array()}};
  Status failed;
  CleanupPrefix(a.prefix);  // a leftover of a crashed run with this pid
  const std::string ul_name = a.prefix + "-ul";
  {
    // Scoped so etcd is stopped before its netns and dirs are removed.
    Daemon etcd;
    auto run = [&]() -> Status {
      WEFT_RETURN_IF_ERROR(MakeUnderlay(ul_name, kUnderlayIp));
      std::string etcd_dir = MakeTempDir(a.prefix, "etcd");
      if (etcd_dir.empty()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "mkdtemp", errno);
      WEFT_ASSIGN_OR_RETURN(etcd, StartEtcd(NetnsPath(ul_name), kUnderlayIp, etcd_dir));
      if (!WaitEtcdHealthy(NetnsPath(ul_name), std::string("http://") + kUnderlayIp + ":2379"))
        return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                             "etcd did not come up; log tail:\n" + Tail(etcd_dir + "/etcd.log"));
      WEFT_ASSIGN_OR_RETURN(auto ul, sys::Netns::Open(NetnsPath(ul_name)));
      for (size_t i = 0; i < a.peers.size(); ++i) {
        CheckInterrupt();
        WEFT_ASSIGN_OR_RETURN(json c, MeasureCount(a, ul, ul_name, a.peers[i], static_cast<int>(i)));
        out["counts"].push_back(c);
        Settle(a.prefix, a.peers[i]);
      }
      return Status::Ok();
    };
    try {
      failed = run();
    } catch (const Interrupted&) {
      etcd.Stop(SIGKILL);
      CleanupPrefix(a.prefix);
      return 130;
    }
    etcd.Stop(SIGTERM);
  }
  CleanupPrefix(a.prefix);
  if (!failed.ok()) {
    std::fprintf(stderr, "weft-bench-weftd: %s\n", failed.ToString().c_str());
    return 1;
  }

  // The flat keys weft-bench evaluates and tabulates.
  for (const auto& c : out["counts"]) {
    // (Appended, not `"_" + ...`: GCC 12's -Wrestrict false positive.)
    std::string s = "_";
    s += std::to_string(c["peers"].get<int>());
    s += "_peers";
    out["rss_mb" + s] = c["rss_mb"];
    out["pss_mb" + s] = c["pss_mb"];
    out["uss_mb" + s] = c["uss_mb"];
    out["peak_rss_mb" + s] = c["peak_rss_mb"];
    out["cpu_s" + s] = c["cpu_s"];
    out["converge_s" + s] = c["converge_s"];
    out["peer_join_ms" + s] = c["join_ms"]["median"];
    out["peer_leave_ms" + s] = c["leave_ms"]["median"];
  }
  // The target's "peer change": the slower of join and leave (medians), at
  // 1000 peers, or at the largest count measured below that (--quick: 100).
  const json* ref = nullptr;
  for (const auto& c : out["counts"])
    if (c["peers"].get<int>() <= 1000 && (!ref || c["peers"].get<int>() > (*ref)["peers"].get<int>())) ref = &c;
  if (ref) {
    out["peer_change_ms"] = std::max((*ref)["join_ms"]["median"].get<double>(), (*ref)["leave_ms"]["median"].get<double>());
    out["peer_change_at_peers"] = (*ref)["peers"];
  }
  if (!out.contains("rss_mb_1000_peers"))
    out["reason"] = "1000 peers not measured in this mode (--quick: 100 peers only)";
  std::ofstream(a.out + "/weftd.json") << out.dump(2) << "\n";
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace weft::bench

int main(int argc, char** argv) {
  return weft::bench::RunDriverMain("weft-bench-weftd", argc, argv, weft::bench::Main);
}
