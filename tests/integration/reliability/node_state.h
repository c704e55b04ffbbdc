#pragma once
// Reliability helpers: run the plugin so that a test can see how it died
// (and kill it at a chosen moment), and take a complete picture of what the
// node's kernel and weft's database hold, to prove that recovering from a
// crash leaves the node exactly as it was.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sys/crash_point.h"
#include "ipam/store.h"
#include "sys/files.h"
#include "testutil/netns_fixture.h"

namespace weft::testing {

using nlohmann::json;

// The crash points compiled into a WEFT_FAULT_INJECTION build of the plugin
// (docs/reliability.md). ADD's points in the order ADD passes them.
inline const std::vector<std::string>& AddCrashPoints() {
  static const std::vector<std::string> k = {"add-after-reserve",   "add-after-portmaps",    "add-after-veth",
                                             "add-after-pod-side",  "add-after-host-side",   "add-after-masquerade",
                                             "add-after-hostports", "add-before-ready",      "add-after-ready"};
  return k;
}
// The teardown's points (DEL, GC, ADD's rollback and reclaim pass them).
inline const std::vector<std::string>& DelCrashPoints() {
  static const std::vector<std::string> k = {"del-after-unmap", "del-after-hostports", "del-after-link-delete",
                                             "del-before-release", "del-after-release"};
  return k;
}

struct WeftRun {
  int exit_code = -1;   // valid when term_signal == 0
  int term_signal = 0;  // SIGKILL for a crash point or a kill -9
  std::string out, err;
  bool killed() const { return term_signal == SIGKILL; }
  json Json() const {
    try {
      return out.empty() ? json::object() : json::parse(out);
    } catch (...) {
      return json::object();
    }
  }
};

namespace detail {
inline std::string ReadAll(int fd) {
  std::string s;
  char buf[8192];
  ::lseek(fd, 0, SEEK_SET);
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}
inline int TmpFile() {
  char t[] = "/tmp/weft-rel-out-XXXXXX";
  int fd = ::mkstemp(t);
  if (fd >= 0) ::unlink(t);
  return fd;
}
}  // namespace detail

// Execs the weft plugin inside `node` with exactly `env` (+PATH) and
// `stdin_data`. With `kill_after`, sends SIGKILL that long after the exec
// (the plugin may have finished by then). Never through a shell.
inline WeftRun RunWeft(const TestNetns& node, const std::map<std::string, std::string>& env,
                       const std::string& stdin_data,
                       std::optional<std::chrono::microseconds> kill_after = std::nullopt) {
  WeftRun run;
  std::string plugin = BinaryPath("weft");
  int ns = ::open(node.path().c_str(), O_RDONLY | O_CLOEXEC);
  int in[2];
  if (ns < 0 || ::pipe2(in, O_CLOEXEC) != 0) return run;
  int out = detail::TmpFile(), err = detail::TmpFile();
  std::vector<std::string> envs = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  // The sanitized plugin (./build-san) halts and fails as the test does.
  for (const char* k : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"})
    if (const char* v = std::getenv(k)) envs.push_back(std::string(k) + "=" + v);
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* argv[] = {plugin.data(), nullptr};
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setns(ns, CLONE_NEWNET) != 0) ::_exit(126);
    ::dup2(in[0], 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execve(plugin.c_str(), argv, envp.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(ns);
  (void)!::write(in[1], stdin_data.data(), stdin_data.size());  // small: fits the pipe
  ::close(in[1]);
  if (kill_after) {
    std::this_thread::sleep_for(*kill_after);
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.term_signal = WTERMSIG(status);
  run.out = detail::ReadAll(out);
  run.err = detail::ReadAll(err);
  ::close(out);
  ::close(err);
  // Whatever the test expects of this run (an error code, a crash at a
  // point): a sanitizer report is a failure.
  if (std::string report = SanitizerReport(run.err); !report.empty())
    ADD_FAILURE() << "the plugin printed a sanitizer report: " << report;
  return run;
}

// Makes this process the reaper of its orphaned descendants, so that after
// killing a plugin a test can wait for the tools it exec'd (nft,
// iptables-restore) to finish before it inspects the node.
inline void BecomeSubreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }
// Waits for every remaining child. REQUIRES: no other thread has children
// in flight (their statuses would be taken here).
inline int ReapOrphans() {
  int n = 0;
  while (::waitpid(-1, nullptr, 0) > 0) ++n;
  return n;
}

// Everything weft can change on a node, as sorted text lines per section.
using NodeState = std::map<std::string, std::vector<std::string>>;

namespace detail {
inline std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}
inline std::string Str(const json& j, const char* k) {
  if (!j.contains(k)) return "-";
  return j[k].is_string() ? j[k].get<std::string>() : j[k].dump();
}
inline std::vector<std::string> Lines(const std::string& text, bool drop_comments) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p < text.size()) {
    size_t e = text.find('\n', p);
    if (e == std::string::npos) e = text.size();
    std::string l = text.substr(p, e - p);
    p = e + 1;
    if (l.empty() || (drop_comments && l[0] == '#')) continue;
    // iptables-save chain counters change with traffic, not with weft.
    if (auto b = l.find(" ["); drop_comments && b != std::string::npos && l[0] == ':') l = l.substr(0, b);
    out.push_back(l);
  }
  return out;
}
}  // namespace detail

// The kernel state of one netns: links, addresses, routes of every table
// (kernel-made ones included), permanent neighbours and FDB entries.
// Turns off IPv6 duplicate address detection for links created from now on
// in `ns` (a netns the test made), so the link-local addresses of veths and
// bridges, and their local routes, appear at once instead of 1-2 s later.
inline void NoDad(const TestNetns& ns) {
  ns.Exec({"sysctl", "-q", "-w", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"});
}

// Waits (up to 3 s) until no IPv6 address in `ns` is still tentative: a link
// weft created gets its link-local address and that address's local route
// only when duplicate address detection ends, ~1-2 s after the link came up.
inline void SettleIpv6(const TestNetns& ns) {
  for (int i = 0; i < 60; ++i) {
    bool tentative = false;
    for (auto& l : ns.IpJson({"-6", "addr", "show", "tentative"}))
      if (!l.value("addr_info", json::array()).empty()) tentative = true;
    if (!tentative) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

namespace detail {
// A snapshot tool's output. A tool that fails (or an `ip -j` that prints
// something that is not JSON) fails the test: two snapshots that both
// missed a table would otherwise compare equal.
inline std::string Tool(const std::vector<std::string>& argv) {
  std::string out, err;
  int rc = Cmd(argv, &out, &err);
  if (rc != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    ADD_FAILURE() << "snapshot: `" << cmd << "` exited " << rc << ": " << err;
  }
  return out;
}
inline json IpJson(const TestNetns& ns, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip", "-n", ns.name(), "-j"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out = Tool(argv);
  if (out.find_first_not_of(" \n") == std::string::npos) return json::array();
  json j = json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) {
    ADD_FAILURE() << "snapshot: `ip -j` printed no JSON array: " << out.substr(0, 200);
    return json::array();
  }
  return j;
}
}  // namespace detail

inline NodeState KernelState(const TestNetns& ns) {
  using detail::Str;
  SettleIpv6(ns);
  NodeState s;
  auto& links = s["links"];
  for (auto& l : detail::IpJson(ns, {"-d", "link", "show"})) {
    std::string kind = l.contains("linkinfo") ? Str(l["linkinfo"], "info_kind") : "-";
    bool up = false;
    for (auto& f : l.value("flags", json::array())) up |= f == "UP";
    links.push_back(Str(l, "ifname") + " kind=" + kind + " master=" + Str(l, "master") + " mtu=" + Str(l, "mtu") +
                    (up ? " up" : " down"));
  }
  auto& addrs = s["addresses"];
  for (auto& l : detail::IpJson(ns, {"addr", "show"}))
    for (auto& a : l.value("addr_info", json::array()))
      addrs.push_back(Str(l, "ifname") + " " + Str(a, "local") + "/" + Str(a, "prefixlen"));
  auto& routes = s["routes"];
  for (const char* fam : {"-4", "-6"})
    for (auto& r : detail::IpJson(ns, {fam, "route", "show", "table", "all"}))
      routes.push_back(std::string(fam) + " " + Str(r, "type") + " " + Str(r, "dst") + " dev=" + Str(r, "dev") +
                       " via=" + Str(r, "gateway") + " table=" + Str(r, "table") + " proto=" + Str(r, "protocol"));
  auto& neigh = s["neighbours"];
  for (auto& n : detail::IpJson(ns, {"neigh", "show", "nud", "permanent"}))
    neigh.push_back(Str(n, "dst") + " dev=" + Str(n, "dev") + " lladdr=" + Str(n, "lladdr"));
  std::string fdb = detail::Tool({"bridge", "-n", ns.name(), "fdb", "show"});
  s["fdb"] = detail::Lines(fdb, false);
  // The test's own uplink (up0/up1) finishes IPv6 autoconfiguration at its
  // own pace (link-local address, its routes, multicast FDB entries); weft
  // never touches it, so its IPv6 link-local churn is not compared.
  for (const char* k : {"addresses", "routes", "fdb"}) {
    auto& v = s[k];
    std::erase_if(v, [](const std::string& l) {
      bool uplink = l.find("dev=up0") != std::string::npos || l.find("dev=up1") != std::string::npos ||
                    l.find("dev up0") != std::string::npos || l.find("dev up1") != std::string::npos ||
                    l.rfind("up0 ", 0) == 0 || l.rfind("up1 ", 0) == 0;
      bool v6ll = l.find("fe80") != std::string::npos || l.find("33:33:") != std::string::npos ||
                  l.find("ff00::/8") != std::string::npos;
      return uplink && v6ll;
    });
  }
  for (auto& [k, v] : s) v = detail::Sorted(v);
  return s;
}

namespace detail {
// `nft list ruleset` without the source guard's tables (fw/source_guard.h),
// except their set elements and their ports' chains: the first ADD installs
// the guard for good (node infrastructure, like ip_forward), but what it
// holds per pod (a port's chain, a bridge port's binding, an opt-out) must
// go with the pod.
inline std::string WithoutGuardSkeleton(const std::string& nft) {
  std::string out;
  bool in_guard = false, in_elements = false;
  size_t p = 0;
  while (p < nft.size()) {
    size_t e = nft.find('\n', p);
    if (e == std::string::npos) e = nft.size();
    const std::string l = nft.substr(p, e - p);
    p = e + 1;
    if (l.rfind("table ", 0) == 0)
      in_guard = l.find(" weft-guard {") != std::string::npos || l.find(" weft-guard-bridge {") != std::string::npos;
    if (!in_guard) {
      out += l + "\n";
      continue;
    }
    if (const size_t c = l.find("chain wft"); c != std::string::npos) out += "weft-guard chain: " + l.substr(c) + "\n";
    if (l.find("elements = {") != std::string::npos) in_elements = true;
    if (in_elements) out += "weft-guard element: " + l + "\n";
    if (in_elements && l.find('}') != std::string::npos) in_elements = false;
  }
  return out;
}
}  // namespace detail

// The node's firewall: the whole nftables ruleset (the source guard's tables
// only by their elements) and both iptables dumps.
inline NodeState FirewallState(const TestNetns& node) {
  NodeState s;
  const std::string nft = detail::Tool({"ip", "netns", "exec", node.name(), "nft", "list", "ruleset"});
  const std::string ipt = detail::Tool({"ip", "netns", "exec", node.name(), "iptables-save"});
  const std::string ip6t = detail::Tool({"ip", "netns", "exec", node.name(), "ip6tables-save"});
  s["nftables"] = detail::Lines(detail::WithoutGuardSkeleton(nft), false);
  s["iptables"] = detail::Lines(ipt, true);
  s["ip6tables"] = detail::Lines(ip6t, true);
  return s;
}

// The database: every attachment row and every port mapping.
inline NodeState DbState(const std::string& data_dir) {
  NodeState s;
  auto& rows = s["db-rows"];
  auto& maps = s["db-portmaps"];
  if (!sys::PathExists(data_dir + "/ipam.db")) return s;
  auto store = ipam::Store::Open(data_dir);
  if (!store.ok()) {
    ADD_FAILURE() << "snapshot: cannot open the database in " << data_dir << ": " << store.status().ToString();
    rows.push_back("cannot open: " + store.status().ToString());
    return s;
  }
  auto pods = store->ListPods("");
  if (pods.ok()) {
    for (const auto& p : *pods)
      rows.push_back(p.container_id + "/" + p.ifname + " " + p.state + " v4=" +
                     (p.ip_v4 ? p.ip_v4->ToString() : "-") + " v6=" + (p.ip_v6 ? p.ip_v6->ToString() : "-") +
                     " host=" + p.host_ifname);
  } else {
    ADD_FAILURE() << "snapshot: cannot list the database's rows: " << pods.status().ToString();
    rows.push_back("cannot list: " + pods.status().ToString());
  }
  auto pm = store->ListPortMappings();
  if (pm.ok())
    for (const auto& m : *pm)
      maps.push_back(m.container_id + "/" + m.ifname + " " + m.host_ip + ":" + std::to_string(m.host_port) + "/" +
                     m.protocol + " -> " + m.container_ip + ":" + std::to_string(m.container_port));
  for (auto& [k, v] : s) v = detail::Sorted(v);
  return s;
}

inline NodeState NodeSnapshot(const TestNetns& node, const std::string& data_dir) {
  NodeState s = KernelState(node);
  for (auto& [k, v] : FirewallState(node)) s[k] = v;
  for (auto& [k, v] : DbState(data_dir)) s[k] = v;
  return s;
}

// "" when equal; otherwise every line only in `before` (-) or `after` (+).
inline std::string Diff(const NodeState& before, const NodeState& after) {
  std::string d;
  std::set<std::string> keys;
  for (auto& [k, v] : before) keys.insert(k);
  for (auto& [k, v] : after) keys.insert(k);
  static const std::vector<std::string> kNone;
  for (const auto& k : keys) {
    const auto& b = before.count(k) ? before.at(k) : kNone;
    const auto& a = after.count(k) ? after.at(k) : kNone;
    std::multiset<std::string> bs(b.begin(), b.end()), as(a.begin(), a.end());
    for (const auto& l : bs)
      if (as.count(l) < bs.count(l) && d.find("- [" + k + "] " + l + "\n") == std::string::npos)
        d += "- [" + k + "] " + l + "\n";
    for (const auto& l : as)
      if (bs.count(l) < as.count(l) && d.find("+ [" + k + "] " + l + "\n") == std::string::npos)
        d += "+ [" + k + "] " + l + "\n";
  }
  return d;
}

}  // namespace weft::testing
