// 1000 peer nodes registered in a real etcd: how long weftd takes from start
// to having all of them in the kernel, its RSS, and the latency of one peer
// joining and leaving. Prints a "SCALE ..." line for the record.
//
// The kernel is watched through route notifications, not polled: a route dump
// of 1000+ routes every 2-5 ms competed with weftd for the CPU and the routing
// table and quantised every measurement. Each condition reached through the
// notifications is then confirmed with a dump.

#include <gtest/gtest.h>
#include <linux/rtnetlink.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "agent/etcd.h"
#include "base/scope_guard.h"
#include "base/strings.h"
#include "e2e/cluster.h"
#include "overlay/reconcile.h"
#include "sys/http.h"
#include "sys/netlink.h"
#include "sys/route_monitor.h"

namespace weft::testing {
namespace {

constexpr int kPeers = 1000;

std::string PeerKey(int i) {
  return "/weft/scale/subnets/10." + std::to_string(1 + i / 256) + "." + std::to_string(i % 256) + ".0-24";
}

std::string PeerValue(int i) {
  char mac[32];
  std::snprintf(mac, sizeof mac, "0a:01:%02x:%02x:00:01", (i >> 8) & 0xff, i & 0xff);
  nlohmann::json v{{"node", "fake" + std::to_string(i)},
                   {"hostIP", "198.18." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1)},
                   {"vtepMAC", mac},
                   {"backend", "vxlan"}};
  return v.dump();
}

IpPrefix PeerCidr(int i) {
  return *IpPrefix::Parse("10." + std::to_string(1 + i / 256) + "." + std::to_string(i % 256) + ".0/24");
}

// The agent's routes in a node, as its route notifications tell them.
class AgentRouteWatch {
 public:
  // Subscribes inside `ns`; the node must have no agent routes yet.
  explicit AgentRouteWatch(const TestNetns& ns) : ns_(ns) {
    Status st = InNetns(ns, [&]() -> Status {
      WEFT_ASSIGN_OR_RETURN(auto m, sys::RouteMonitor::Open());
      mon_.emplace(std::move(m));
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  // Waits until `pred(routes)` holds; returns when the notification that
  // made it hold was received, or nullopt after `timeout_ms`.
  std::optional<std::chrono::steady_clock::time_point> Until(const std::function<bool(const std::set<IpPrefix>&)>& pred,
                                                             int timeout_ms) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (mon_) {
      if (pred(routes_)) return std::chrono::steady_clock::now();
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      auto events = mon_->Wait(left);
      if (!events.ok()) {
        // Notifications were lost (receive buffer overrun): start over from a dump.
        ++overflows_;
        Redump();
        continue;
      }
      for (const auto& e : *events) {
        if (!overlay::IsAgentRoute(e.route)) continue;
        if (e.added) routes_.insert(e.route.dst);
        else routes_.erase(e.route.dst);
      }
    }
    return std::nullopt;
  }
  int overflows() const { return overflows_; }

 private:
  void Redump() {
    routes_.clear();
    (void)InNetns(ns_, [&]() -> Status {
      WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::Open());
      WEFT_ASSIGN_OR_RETURN(auto routes, nl.ListRoutes(AF_INET));
      for (const auto& r : routes)
        if (overlay::IsAgentRoute(r)) routes_.insert(r.dst);
      return Status::Ok();
    });
  }
  const TestNetns& ns_;
  std::optional<sys::RouteMonitor> mon_;
  std::set<IpPrefix> routes_;
  int overflows_ = 0;
};

long StatusKb(pid_t pid, const char* field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field) + 1);
  return -1;
}

TEST(Scale, ThousandPeersFromEtcd) {
  ASSERT_TRUE(sys::InitHttp().ok());
  std::string root = TempDir("scale");
  ScopeGuard cleanup([&] { RemoveTree(root); });
  Underlay ul;
  Etcd etcd(ul, root);
  etcd.Start();
  ASSERT_TRUE(etcd.WaitHealthy());
  WeftNode n1(ul, "n1", 11, root);

  // Register the peers: config plus 1000 subnets, 250 puts per transaction.
  Status st = InNetns(ul, [&]() -> Status {
    etcd::EtcdClient c({etcd.endpoint()}, {});
    WEFT_RETURN_IF_ERROR(c.Put("/weft/scale/config", R"({"network":"10.0.0.0/8","subnetLen":24})"));
    for (int start = 0; start < kPeers; start += 250) {
      nlohmann::json ops = nlohmann::json::array();
      for (int i = start; i < std::min(kPeers, start + 250); ++i)
        ops.push_back({{"request_put",
                        {{"key", weft::Base64Encode(PeerKey(i))}, {"value", weft::Base64Encode(PeerValue(i))}}}});
      WEFT_ASSIGN_OR_RETURN(bool ok, c.Txn(nlohmann::json{{"success", ops}}.dump()));
      if (!ok) return Status::Error(Reason::kInternal, Domain::kNone, "txn failed");
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();

  auto count_routes = [&]() -> int {
    int n = -1;
    (void)InNetns(n1.ns, [&]() -> Status {
      WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::Open());
      WEFT_ASSIGN_OR_RETURN(auto routes, nl.ListRoutes(AF_INET));
      n = 0;
      for (const auto& r : routes) n += overlay::IsAgentRoute(r) ? 1 : 0;
      return Status::Ok();
    });
    return n;
  };

  using ms = std::chrono::duration<double, std::milli>;
  AgentRouteWatch watch(n1.ns);
  auto t0 = std::chrono::steady_clock::now();
  n1.StartWeftd({"--control-plane", "etcd", "--etcd-endpoints", etcd.endpoint(), "--etcd-prefix", "/weft/scale",
                 "--backend", "vxlan", "--resync-period", "30"});
  auto converged = watch.Until([](const std::set<IpPrefix>& r) { return r.size() == size_t(kPeers); }, 30000);
  ASSERT_TRUE(converged.has_value());
  double converge_ms = ms(*converged - t0).count();
  EXPECT_EQ(count_routes(), kPeers);

  // Everything is there: ARP and FDB too.
  EXPECT_EQ(n1.ns.IpJson({"neigh", "show", "dev", "weft.1", "nud", "permanent"}).size(), size_t(kPeers));
  std::string fdb;
  Cmd({"bridge", "-n", n1.ns.name(), "-j", "fdb", "show", "dev", "weft.1"}, &fdb);
  EXPECT_EQ(nlohmann::json::parse(fdb.empty() ? "[]" : fdb).size(), size_t(kPeers));

  // One peer joins, one leaves: time until the kernel follows.
  auto t1 = std::chrono::steady_clock::now();
  st = InNetns(ul, [&] {
    etcd::EtcdClient c({etcd.endpoint()}, {});
    return c.Put(PeerKey(kPeers), PeerValue(kPeers));
  });
  ASSERT_TRUE(st.ok());
  auto added = watch.Until([](const std::set<IpPrefix>& r) { return r.count(PeerCidr(kPeers)) > 0; }, 10000);
  ASSERT_TRUE(added.has_value());
  double add_ms = ms(*added - t1).count();
  ASSERT_EQ(count_routes(), kPeers + 1);
  auto t2 = std::chrono::steady_clock::now();
  st = InNetns(ul, [&] {
    etcd::EtcdClient c({etcd.endpoint()}, {});
    return c.Delete(PeerKey(7));
  });
  ASSERT_TRUE(st.ok());
  auto removed = watch.Until([](const std::set<IpPrefix>& r) { return r.count(PeerCidr(7)) == 0; }, 10000);
  ASSERT_TRUE(removed.has_value());
  double del_ms = ms(*removed - t2).count();
  ASSERT_EQ(count_routes(), kPeers);
  if (watch.overflows() > 0) std::printf("note: route notifications overflowed %d times (re-read)\n", watch.overflows());

  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pid_t pid = n1.weftd->pid();
  long rss = StatusKb(pid, "VmRSS:"), hwm = StatusKb(pid, "VmHWM:");
  double reconcile_s = n1.Metric("weft_reconcile_duration_seconds_sum");
  // Figures beside their targets (converge < 5 s, RSS < 30 MB), never
  // asserted: the test asserts that everything converges.
  std::printf("SCALE peers=%d converge_ms=%.0f (target 5000) rss_kb=%ld (target 30720) peak_rss_kb=%ld "
              "peer_add_ms=%.1f peer_del_ms=%.1f reconcile_total_s=%.3f\n",
              kPeers, converge_ms, rss, hwm, add_ms, del_ms, reconcile_s);
  ::testing::Test::RecordProperty("converge_ms", std::to_string(converge_ms));
  ::testing::Test::RecordProperty("rss_kb", std::to_string(rss));
  EXPECT_GT(rss, 0);
  n1.StopWeftd(SIGTERM);
}

}  // namespace
}  // namespace weft::testing
