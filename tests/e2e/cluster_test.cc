// The virtual cluster end to end: three or more node netns on one underlay,
// a real etcd, weftd per node, pods attached through the real plugin.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/etcd.h"
#include "build_info.h"
#include "e2e/cluster.h"
#include "e2e/cluster_fixture.h"
#include "sys/http.h"

namespace weft::testing {
namespace {

class ClusterTest : public EtcdClusterTest {
 protected:
  ClusterTest() : EtcdClusterTest("e2e") {}

  std::vector<std::string> Flags(const std::string& backend, int ttl = 4) {
    return {"--control-plane", "etcd",        "--etcd-endpoints", etcd_->endpoint(),
            "--etcd-prefix",   "/weft/test",  "--cluster-cidr",   "10.244.0.0/16",
            "--etcd-lease-ttl", std::to_string(ttl), "--resync-period", "2",
            "--backend",       backend};
  }

  WeftNode& AddNode(const std::string& name, int octet, const std::string& backend, int ttl = 4) {
    nodes_.push_back(std::make_unique<WeftNode>(*ul_, name, octet, root_));
    WeftNode& n = *nodes_.back();
    n.StartWeftd(Flags(backend, ttl));
    return n;
  }

  // Runs `weftd --leave` for `n` inside its netns.
  int Leave(WeftNode& n) {
    std::vector<std::string> argv = {BinaryPath("weftd"), "--node-name", n.name, "--leave",
                                     "--state-dir", n.dir + "/state", "--log-file", n.log()};
    auto f = Flags("vxlan");
    argv.insert(argv.end(), f.begin(), f.end());
    return n.ns.Exec(argv);
  }

  bool Converged(WeftNode& n, size_t routes, int timeout_ms = 15000) {
    return WaitFor([&] { return n.AgentRoutes().size() == routes; }, timeout_ms);
  }

  Pod& AddPod(WeftNode& n, const std::string& name) {
    pods_.push_back(std::make_unique<Pod>(n, name));
    return *pods_.back();
  }

  std::string Range(WeftNode& n) {
    std::ifstream f(n.conf_dir() + "/10-weft.conflist");
    std::stringstream ss;
    ss << f.rdbuf();
    try {
      return nlohmann::json::parse(ss.str())["plugins"][0]["ranges"][0];
    } catch (...) {
      return "";
    }
  }

  std::string Mac(WeftNode& n) {
    auto j = n.ns.IpJson({"link", "show", "dev", "weft.1"});
    return j.empty() ? "" : j[0].value("address", "");
  }

};

TEST_F(ClusterTest, VxlanPodToPodAcrossThreeNodes) {
  WeftNode& n1 = AddNode("n1", 11, "vxlan");
  WeftNode& n2 = AddNode("n2", 12, "vxlan");
  WeftNode& n3 = AddNode("n3", 13, "vxlan");
  for (WeftNode* n : {&n1, &n2, &n3}) ASSERT_TRUE(Converged(*n, 2)) << n->name;

  // Which weftd this is: the release and commit on /metrics and in its log.
  const std::string ver = weft::build::kVersion, commit = weft::build::kCommit;
  EXPECT_NE(n1.Http("/metrics").find("\nweft_build_info{version=\"" + ver + "\",commit=\"" + commit + "\"} 1\n"),
            std::string::npos);
  EXPECT_NE(n1.LogTail(1 << 20).find("msg=starting version=" + ver + " commit=" + commit), std::string::npos)
      << n1.LogTail(3000);

  // The device: VNI 1, port 8472, learning off, local = node IP, MTU 1500-50.
  auto link = n1.ns.IpJson({"-d", "link", "show", "dev", "weft.1"});
  ASSERT_EQ(link.size(), 1u);
  EXPECT_EQ(link[0]["mtu"], 1450);
  auto info = link[0]["linkinfo"]["info_data"];
  EXPECT_EQ(info["id"], 1);
  EXPECT_EQ(info["port"], 8472);
  EXPECT_EQ(info["learning"], false);
  EXPECT_EQ(info["local"], "192.0.2.11");
  // Its address: the first IP of the pod CIDR, /32.
  std::string r1 = Range(n1);
  ASSERT_FALSE(r1.empty());
  std::string vtep1 = r1.substr(0, r1.find('/'));
  auto addrs = n1.ns.IpJson({"-4", "addr", "show", "dev", "weft.1"});
  ASSERT_EQ(addrs.size(), 1u);
  ASSERT_EQ(addrs[0]["addr_info"].size(), 1u);
  EXPECT_EQ(addrs[0]["addr_info"][0]["local"], vtep1);
  EXPECT_EQ(addrs[0]["addr_info"][0]["prefixlen"], 32);

  // Per peer on n1: route via the peer's VTEP IP onlink, permanent ARP, FDB.
  for (WeftNode* peer : {&n2, &n3}) {
    std::string range = Range(*peer);
    std::string vtep = range.substr(0, range.find('/'));
    std::string mac = Mac(*peer);
    bool route = false;
    for (const auto& r : n1.ns.IpJson({"route", "show", "proto", "201"}))
      if (r.value("dst", "") == range && r.value("gateway", "") == vtep && r.value("dev", "") == "weft.1") {
        route = true;
        EXPECT_NE(r.dump().find("onlink"), std::string::npos) << r.dump();
      }
    EXPECT_TRUE(route) << "no route to " << range;
    bool arp = false;
    for (const auto& nb : n1.ns.IpJson({"neigh", "show", "dev", "weft.1"}))
      if (nb.value("dst", "") == vtep && nb.value("lladdr", "") == mac &&
          nb.dump().find("PERMANENT") != std::string::npos)
        arp = true;
    EXPECT_TRUE(arp) << "no permanent ARP entry " << vtep << " -> " << mac;
    std::string fdb_out;
    Cmd({"bridge", "-n", n1.ns.name(), "-j", "fdb", "show", "dev", "weft.1"}, &fdb_out);
    bool fdb = false;
    for (const auto& e : nlohmann::json::parse(fdb_out.empty() ? "[]" : fdb_out))
      if (e.value("mac", "") == mac && e.value("dst", "") == peer->ip()) fdb = true;
    EXPECT_TRUE(fdb) << "no FDB entry " << mac << " dst " << peer->ip() << " in " << fdb_out;
  }

  // Pods through the real plugin, from the conflist weftd wrote.
  Pod& p1 = AddPod(n1, "p1");
  Pod& p2 = AddPod(n2, "p2");
  Pod& p3 = AddPod(n3, "p3");
  for (Pod* p : {&p1, &p2, &p3}) ASSERT_TRUE(p->add_error.empty()) << p->add_error;
  for (Pod* a : {&p1, &p2, &p3})
    for (Pod* b : {&p1, &p2, &p3})
      if (a != b) {
        EXPECT_TRUE(a->ns.Ping(b->ip, 2)) << a->cid << " -> " << b->cid << " " << b->ip;
      }

  // Operating surface.
  EXPECT_EQ(n1.Metric("weft_peers"), 2);
  EXPECT_GE(n1.Metric("weft_reconcile_total"), 1);
  int code = 0;
  n1.Http("/readyz", &code);
  EXPECT_EQ(code, 200);
  n1.Http("/healthz", &code);
  EXPECT_EQ(code, 200);
  std::ifstream f(n1.conf_dir() + "/10-weft.conflist");
  std::stringstream ss;
  ss << f.rdbuf();
  auto conf = nlohmann::json::parse(ss.str());
  EXPECT_EQ(conf["plugins"][0]["mtu"], 1450);
  EXPECT_EQ(conf["plugins"].size(), 1u);
  EXPECT_EQ(conf["plugins"][0]["capabilities"]["portMappings"], true);
  // Node-wide masquerade for the cluster CIDR, in the node's netns.
  std::string nft;
  n1.ns.Exec({"nft", "list", "table", "inet", "weft-weft"}, &nft);
  EXPECT_NE(nft.find("10.244.0.0/16"), std::string::npos) << nft;
}

TEST_F(ClusterTest, HostGwDirectRoutes) {
  WeftNode& n1 = AddNode("n1", 11, "host-gw");
  WeftNode& n2 = AddNode("n2", 12, "host-gw");
  WeftNode& n3 = AddNode("n3", 13, "host-gw");
  for (WeftNode* n : {&n1, &n2, &n3}) ASSERT_TRUE(Converged(*n, 2)) << n->name;
  EXPECT_FALSE(n1.ns.HasLink("weft.1"));
  // n2 and n3 start together, so either may claim the lower subnet.
  std::vector<std::string> want = {Range(n2) + " via 192.0.2.12 dev up0", Range(n3) + " via 192.0.2.13 dev up0"};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(n1.AgentRoutes(), want);
  Pod& p1 = AddPod(n1, "p1");
  Pod& p2 = AddPod(n2, "p2");
  Pod& p3 = AddPod(n3, "p3");
  for (Pod* p : {&p1, &p2, &p3}) ASSERT_TRUE(p->add_error.empty()) << p->add_error;
  EXPECT_TRUE(p1.ns.Ping(p2.ip, 2));
  EXPECT_TRUE(p2.ns.Ping(p3.ip, 2));
  EXPECT_TRUE(p3.ns.Ping(p1.ip, 2));
  EXPECT_EQ(n1.Metric("weft_peers_by_mode{mode=\"direct\"}"), 2);
}

TEST_F(ClusterTest, NodesLeavingVanishEverywhereEvenWhileWeftdWasDown) {
  WeftNode& n1 = AddNode("n1", 11, "vxlan");
  WeftNode& n2 = AddNode("n2", 12, "vxlan");
  WeftNode& n3 = AddNode("n3", 13, "vxlan");
  WeftNode& n4 = AddNode("n4", 14, "vxlan");
  for (WeftNode* n : {&n1, &n2, &n3, &n4}) ASSERT_TRUE(Converged(*n, 3)) << n->name;
  std::string r2 = Range(n2), r3 = Range(n3), r4 = Range(n4);

  // n4 leaves for good: its routes, ARP and FDB entries vanish everywhere.
  n4.StopWeftd(SIGTERM);
  ASSERT_EQ(Leave(n4), 0);
  for (WeftNode* n : {&n1, &n2, &n3}) EXPECT_TRUE(Converged(*n, 2, 8000)) << n->name;
  std::string mac4 = Mac(n4);
  std::string fdb_out;
  Cmd({"bridge", "-n", n1.ns.name(), "fdb", "show", "dev", "weft.1"}, &fdb_out);
  EXPECT_EQ(fdb_out.find(mac4), std::string::npos) << fdb_out;
  EXPECT_EQ(n1.ns.IpJson({"neigh", "show", "dev", "weft.1"}).size(), 2u);

  // n3 leaves while n1's weftd is down: n1 removes it when it starts, and
  // keeps n2.
  n1.StopWeftd(SIGTERM);
  n3.StopWeftd(SIGTERM);
  ASSERT_EQ(Leave(n3), 0);
  ASSERT_TRUE(Converged(n2, 1, 8000));
  EXPECT_EQ(n1.AgentRoutes().size(), 2u);  // stale while down
  n1.StartWeftd(Flags("vxlan"));
  ASSERT_TRUE(Converged(n1, 1, 8000));
  EXPECT_EQ(n1.AgentRoutes()[0].rfind(r2, 0), 0u);

  // n2 dies without leaving: its lease (4 s) expires and its routes go.
  n2.StopWeftd(SIGKILL);
  EXPECT_TRUE(Converged(n1, 0, 15000));
  EXPECT_EQ(n1.ns.IpJson({"neigh", "show", "dev", "weft.1"}).size(), 0u);
  (void)r3;
  (void)r4;
}

TEST_F(ClusterTest, WeftdRestartDoesNotDisturbTraffic) {
  WeftNode& n1 = AddNode("n1", 11, "vxlan");
  WeftNode& n2 = AddNode("n2", 12, "vxlan");
  WeftNode& n3 = AddNode("n3", 13, "vxlan");
  for (WeftNode* n : {&n1, &n2, &n3}) ASSERT_TRUE(Converged(*n, 2)) << n->name;
  Pod& p1 = AddPod(n1, "p1");
  Pod& p2 = AddPod(n2, "p2");
  ASSERT_TRUE(p1.add_error.empty()) << p1.add_error;
  ASSERT_TRUE(p2.add_error.empty()) << p2.add_error;
  ASSERT_TRUE(p1.ns.Ping(p2.ip, 1));
  std::string range1 = Range(n1), mac1 = Mac(n1);

  // 80 pings 50 ms apart (4 s) while both ends' weftd are killed and restarted.
  std::string out;
  int rc = -1;
  std::thread ping([&] { rc = p1.ns.Exec({"ping", "-c", "80", "-i", "0.05", "-W", "1", p2.ip}, &out); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  n1.StopWeftd(SIGKILL);
  n1.StartWeftd(Flags("vxlan"));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  n2.StopWeftd(SIGTERM);
  n2.StartWeftd(Flags("vxlan"));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  n1.StopWeftd(SIGTERM);
  n1.StartWeftd(Flags("vxlan"));
  ping.join();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(" 0% packet loss"), std::string::npos) << out;

  // Same subnet and VTEP after restarts; peers converge again.
  ASSERT_TRUE(WaitFor([&] { return n1.Metric("weft_ready") == 1; }, 10000));
  EXPECT_EQ(Range(n1), range1);
  EXPECT_EQ(Mac(n1), mac1);
  for (WeftNode* n : {&n1, &n2, &n3}) EXPECT_TRUE(Converged(*n, 2)) << n->name;
}

// Issue 25's cause: the underlay's gateway (etcd's address) keeps its MAC
// when a node joins whose port MAC sorts below every other. Left to the
// kernel, the bridge takes that port's MAC, and the node whose port's MAC
// the bridge had is the only old one still reaching etcd.
TEST_F(ClusterTest, UnderlayGatewayKeepsItsMacWhenALowerPortJoins) {
  auto br0_mac = [&] {
    auto l = ul_->IpJson({"link", "show", "dev", "br0"});
    return l.empty() ? std::string() : l[0].value("address", "");
  };
  nodes_.push_back(std::make_unique<WeftNode>(*ul_, "n1", 11, root_));
  nodes_.push_back(std::make_unique<WeftNode>(*ul_, "n2", 12, root_));
  for (auto& n : nodes_) ASSERT_TRUE(n->ns.Ping(Underlay::kIp, 1)) << n->name;  // resolved
  const std::string before = br0_mac();
  EXPECT_EQ(before, Underlay::kMac);

  TestNode low("n3", 13);
  ASSERT_EQ(low.Exec({"ip", "link", "set", "up1", "down"}), 0);
  ASSERT_EQ(low.Exec({"ip", "link", "set", "up1", "address", "00:00:00:00:00:01"}), 0);
  ul_->Attach(low, 13);
  EXPECT_EQ(br0_mac(), before);
  for (auto& n : nodes_) EXPECT_TRUE(n->ns.Ping(Underlay::kIp, 1)) << n->name << " lost the gateway";
  EXPECT_TRUE(low.Ping(Underlay::kIp, 1));
}

TEST_F(ClusterTest, EtcdRestartMidWatchAndCompactionRelist) {
  WeftNode& n1 = AddNode("n1", 11, "vxlan", 15);
  WeftNode& n2 = AddNode("n2", 12, "vxlan", 15);
  for (WeftNode* n : {&n1, &n2}) ASSERT_TRUE(Converged(*n, 1)) << n->name;
  double relists0 = n1.Metric("weft_controlplane_relists_total");

  // etcd restarts under open watches; a node that joins afterwards is seen.
  etcd_->Stop(SIGTERM);
  etcd_->Start();
  ASSERT_TRUE(etcd_->WaitHealthy());
  WeftNode& n3 = AddNode("n3", 13, "vxlan", 15);
  for (WeftNode* n : {&n1, &n2, &n3}) EXPECT_TRUE(Converged(*n, 2)) << n->name;
  EXPECT_GE(n1.Metric("weft_controlplane_reconnects_total"), 1);

  // n1 is frozen while etcd restarts (its watch breaks), n3 leaves and the
  // history is compacted: n1's watch cannot resume and must re-list.
  n1.weftd->Signal(SIGSTOP);
  etcd_->Stop(SIGTERM);
  etcd_->Start();
  ASSERT_TRUE(etcd_->WaitHealthy());
  n3.StopWeftd(SIGTERM);
  ASSERT_EQ(Leave(n3), 0);
  Status st = InNetns(*ul_, [&]() -> Status {
    etcd::EtcdClient c({etcd_->endpoint()}, {});
    // Another write, so the compaction covers the revision of n3's delete
    // plus one: n1's watch resumes below the compacted revision.
    WEFT_RETURN_IF_ERROR(c.Put("/weft/other", "x"));
    WEFT_ASSIGN_OR_RETURN(auto r, c.Range("/weft/test/", etcd::PrefixRangeEnd("/weft/test/")));
    return c.Compact(r.revision);
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  n1.weftd->Signal(SIGCONT);
  EXPECT_TRUE(Converged(n1, 1, 15000));
  EXPECT_TRUE(Converged(n2, 1, 15000));
  EXPECT_GE(n1.Metric("weft_controlplane_relists_total"), relists0 + 1);
  std::ifstream f(n1.log());
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("re-listing"), std::string::npos);
}

}  // namespace
}  // namespace weft::testing
