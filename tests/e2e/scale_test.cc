// 1000 peer nodes registered in a real etcd: how long weftd takes from start
// to having all of them in the kernel, its RSS, and the latency of one peer
// joining and leaving. Prints a "SCALE ..." line for the record.

#include <gtest/gtest.h>
#include <linux/rtnetlink.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "agent/etcd.h"
#include "agent/http.h"
#include "agent/reconcile.h"
#include "base/scope_guard.h"
#include "e2e/cluster.h"
#include "sys/netlink.h"

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

long StatusKb(pid_t pid, const char* field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field) + 1);
  return -1;
}

TEST(Scale, ThousandPeersFromEtcd) {
  ASSERT_TRUE(agent::InitHttp().ok());
  std::string root = TempDir("scale");
  ScopeGuard cleanup([&] { RemoveTree(root); });
  Underlay ul;
  Etcd etcd(ul, root);
  etcd.Start();
  ASSERT_TRUE(etcd.WaitHealthy());
  WeftNode n1(ul, "n1", 11, root);

  // Register the peers: config plus 1000 subnets, 250 puts per transaction.
  Status st = InNetns(ul, [&]() -> Status {
    agent::EtcdClient c({etcd.endpoint()}, {});
    WEFT_RETURN_IF_ERROR(c.Put("/weft/scale/config", R"({"network":"10.0.0.0/8","subnetLen":24})"));
    for (int start = 0; start < kPeers; start += 250) {
      nlohmann::json ops = nlohmann::json::array();
      for (int i = start; i < std::min(kPeers, start + 250); ++i)
        ops.push_back({{"request_put",
                        {{"key", agent::Base64Encode(PeerKey(i))}, {"value", agent::Base64Encode(PeerValue(i))}}}});
      WEFT_ASSIGN_OR_RETURN(bool ok, c.Txn(nlohmann::json{{"success", ops}}.dump()));
      if (!ok) return Status::Error(Code::kInternal, "txn failed");
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
      for (const auto& r : routes) n += agent::IsAgentRoute(r) ? 1 : 0;
      return Status::Ok();
    });
    return n;
  };

  auto t0 = std::chrono::steady_clock::now();
  n1.StartWeftd({"--control-plane", "etcd", "--etcd-endpoints", etcd.endpoint(), "--etcd-prefix", "/weft/scale",
                 "--backend", "vxlan", "--resync-period", "30"});
  ASSERT_TRUE(WaitFor([&] { return count_routes() == kPeers; }, 30000, 5));
  double converge_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  // Everything is there: ARP and FDB too.
  EXPECT_EQ(n1.ns.IpJson({"neigh", "show", "dev", "weft.1", "nud", "permanent"}).size(), size_t(kPeers));
  std::string fdb;
  Cmd({"bridge", "-n", n1.ns.name(), "-j", "fdb", "show", "dev", "weft.1"}, &fdb);
  EXPECT_EQ(nlohmann::json::parse(fdb.empty() ? "[]" : fdb).size(), size_t(kPeers));

  // One peer joins, one leaves: time until the kernel follows.
  auto t1 = std::chrono::steady_clock::now();
  st = InNetns(ul, [&] {
    agent::EtcdClient c({etcd.endpoint()}, {});
    return c.Put(PeerKey(kPeers), PeerValue(kPeers));
  });
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(WaitFor([&] { return count_routes() == kPeers + 1; }, 10000, 2));
  double add_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  auto t2 = std::chrono::steady_clock::now();
  st = InNetns(ul, [&] {
    agent::EtcdClient c({etcd.endpoint()}, {});
    return c.Delete(PeerKey(7));
  });
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(WaitFor([&] { return count_routes() == kPeers; }, 10000, 2));
  double del_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t2).count();

  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pid_t pid = n1.weftd->pid();
  long rss = StatusKb(pid, "VmRSS:"), hwm = StatusKb(pid, "VmHWM:");
  double reconcile_s = n1.Metric("weft_reconcile_duration_seconds_sum");
  std::printf("SCALE peers=%d converge_ms=%.0f rss_kb=%ld peak_rss_kb=%ld peer_add_ms=%.1f peer_del_ms=%.1f "
              "reconcile_total_s=%.3f\n",
              kPeers, converge_ms, rss, hwm, add_ms, del_ms, reconcile_s);
  ::testing::Test::RecordProperty("converge_ms", std::to_string(converge_ms));
  ::testing::Test::RecordProperty("rss_kb", std::to_string(rss));
  EXPECT_LT(converge_ms, 5000);
  EXPECT_GT(rss, 0);
  EXPECT_LT(rss, 30 * 1024);
  n1.StopWeftd(SIGTERM);
}

}  // namespace
}  // namespace weft::testing
