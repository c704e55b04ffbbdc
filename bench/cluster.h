#pragma once
// The pieces of the e2e virtual cluster (tests/e2e/cluster.h) the benchmark
// needs, without gtest and named with the run's prefix instead of the test
// prefix: long-running children (etcd, weftd) started inside a node netns,
// etcd's health, weftd's standard flags and conflist, process statistics, and
// an event-driven watch on weftd's peer routes. Nothing here touches the root
// netns; every child dies with the benchmark (PR_SET_PDEATHSIG) and is
// SIGKILLed by its destructor.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::bench {

// A child process that joined the netns at `netns_path` (setns, then execve:
// pid() is the program's own pid, so /proc/<pid> describes it) with stdout
// and stderr appended to `log_path`. Move-only.
class Daemon {
 public:
  static Result<Daemon> Start(const std::string& netns_path, const std::vector<std::string>& argv,
                              const std::string& log_path);
  Daemon() = default;
  ~Daemon() { Stop(9, 0); }
  Daemon(Daemon&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  Daemon& operator=(Daemon&& o) noexcept;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  pid_t pid() const { return pid_; }
  // True while the process has not exited (reaps it when it has).
  bool Running();
  // Sends `sig`, waits up to `ms` for the exit, then SIGKILLs and reaps.
  void Stop(int sig = 15, int ms = 3000);

 private:
  explicit Daemon(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// etcd 3.4 listening for clients on http://<ip>:2379 inside the netns (peer
// traffic on 127.0.0.1:2380), data under `dir`, log `dir`/etcd.log.
Result<Daemon> StartEtcd(const std::string& netns_path, const std::string& ip, const std::string& dir);
// Polls <url>/health from inside the netns (curl, 100 ms apart) until etcd
// says it is healthy or `timeout_ms` passes.
bool WaitEtcdHealthy(const std::string& netns_path, const std::string& url, int timeout_ms = 20000);

// weftd's argv with the flags every bench node uses (as WeftNode::StartWeftd
// in the e2e harness, at log level info): node name, conf/state/plugin data
// dirs and logs under `dir`, metrics on 127.0.0.1:9641 of the node, then
// `extra`.
std::vector<std::string> WeftdArgv(const std::string& weftd_bin, const std::string& node_name, const std::string& dir,
                                   const std::vector<std::string>& extra);
// The conflist weftd wrote under `dir` (see WeftdArgv).
Result<nlohmann::json> ReadConflist(const std::string& dir);

struct ProcStats {
  double rss_mb = 0;   // VmRSS
  double hwm_mb = 0;   // VmHWM (peak RSS)
  double cpu_s = 0;    // utime + stime
};
Result<ProcStats> ReadProcStats(pid_t pid);

// Full memory accounting from /proc/<pid>/smaps_rollup (MB): Rss, Pss
// (shared pages divided among their users) and USS (Private_Clean +
// Private_Dirty: what the process alone holds), plus VmHWM.
struct MemStats {
  double rss_mb = 0, pss_mb = 0, uss_mb = 0, anon_mb = 0, hwm_mb = 0;
};
Result<MemStats> ReadMemStats(pid_t pid);
nlohmann::json ToJson(const MemStats& m);

// Where a process's resident memory is (MB, from /proc/<pid>/smaps):
// {"heap": brk heap, "anon": other anonymous mappings (malloc's per-thread
// arenas, big allocations, thread stacks), "files": mapped files (the
// binary and its shared libraries; "files_private": their private pages),
// "other": [stack], [vdso], ...}.
nlohmann::json MemBreakdown(pid_t pid);

// The same smaps summed per mapping name (a file's path, "[heap]", "[anon]"
// for nameless anonymous mappings: malloc arenas, thread stacks, big
// allocations; "[stack]", ...), each {"name", "rss_mb", "pss_mb", "uss_mb"},
// largest USS first, at most `top` entries (the rest summed as "(others)").
nlohmann::json MemByMapping(pid_t pid, size_t top = 20);

// An underlay netns `name` holding bridge br0 with `ip`/24.
Status MakeUnderlay(const std::string& name, const std::string& ip);
// A node netns whose uplink veth up0 (192.0.2.<octet>/24, default route via
// `gw`) has its far end as a port of the underlay's bridge.
Status MakeNodeOnUnderlay(const std::string& node, const std::string& underlay, int octet, const std::string& gw);

// weftd's peer routes in one netns (IPv4, main table, protocol 201 with a
// gateway: what the agent owns, cf. overlay::IsAgentRoute), kept from
// RTM_NEWROUTE/RTM_DELROUTE multicast notifications on a netlink socket
// opened in that netns, so waiting costs no route dumps and the time a
// change is seen is when the kernel announced it, not the next poll tick.
// On a receive-buffer overflow (ENOBUFS) it re-reads the table with one dump.
class RouteWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // Subscribes, then takes the current table with one dump.
  static Result<RouteWatch> Open(const std::string& netns_path);

  // Reads notifications until `pred(routes())` holds; returns the time the
  // notification that made it hold was received. An error (Reason::kInternal)
  // after `timeout`; throws Interrupted (bench/ns.h) on SIGINT/SIGTERM.
  Result<Clock::time_point> WaitUntil(const std::function<bool(const std::set<std::string>&)>& pred,
                                      std::chrono::milliseconds timeout);
  // Destinations ("10.1.2.0/24") currently routed by weftd.
  const std::set<std::string>& routes() const { return routes_; }
  int overflows() const { return overflows_; }
  // Seen so far: the time the first peer route appeared (epoch if never).
  Clock::time_point first_route() const { return first_; }

 private:
  RouteWatch(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  Status Resync();
  void Apply(const void* msg, size_t len);
  UniqueFd fd_;
  std::string path_;
  std::set<std::string> routes_;
  int overflows_ = 0;
  Clock::time_point first_{};
};

}  // namespace weft::bench
