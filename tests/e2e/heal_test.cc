// Issue 34: a node that heals itself. On a node of the virtual cluster with
// pods, each piece of kernel state Weft owns is deleted by hand, as an
// operator's script or another tool would; weftd must put it back within
// 2 s, woken by the kernel's notification (the resync period is 300 s
// here, so the resync cannot be what brings it back), count the repair in
// weft_repairs_total, and traffic (or the forged-source drop) must be as
// before. Then ADDs run while weftd repairs the guard over and over: both
// write the same state, every pod ends up guarded.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "e2e/cluster.h"
#include "e2e/cluster_fixture.h"
#include "plugin/config.h"

namespace weft::testing {
namespace {

constexpr const char* kPrefix = "/weft/heal";
// The bound for a deleted piece to be back (a functional bound, not
// a benchmark: the wake is a notification, the pass a few milliseconds).
constexpr int kBackWithinMs = 2000;

std::string Ip6(int octet) { return "2001:db8::" + std::to_string(octet); }

nlohmann::json RunScript(const std::vector<std::string>& argv) {
  std::string out, err;
  int rc = Cmd(argv, &out, &err);
  if (rc != 0) {
    ADD_FAILURE() << argv[1] << " " << argv[2] << " exit " << rc << ": " << out << err;
    return {{"received", -1}};
  }
  try {
    return nlohmann::json::parse(out);
  } catch (...) {
    ADD_FAILURE() << "not JSON: " << out << err;
    return {{"received", -1}};
  }
}

// Param: dual-stack (true) or IPv4-only (false).
class HealTest : public EtcdClusterTest, public ::testing::WithParamInterface<bool> {
 protected:
  HealTest() : EtcdClusterTest("heal") {}
  bool dual() const { return GetParam(); }

  void SetUp() override {
    EtcdClusterTest::SetUp();
    if (dual()) ul_->EnableIpv6();
  }

  WeftNode& AddNode(const std::string& name, int octet) {
    nodes_.push_back(std::make_unique<WeftNode>(*ul_, name, octet, root_));
    WeftNode& n = *nodes_.back();
    if (dual()) {
      Cmd({"ip", "-n", n.ns.name(), "addr", "add", Ip6(octet) + "/64", "dev", "up0", "nodad"});
      Cmd({"ip", "-n", n.ns.name(), "-6", "route", "add", "default", "via", Underlay::kIp6, "dev", "up0"});
    }
    n.StartWeftd({"--control-plane", "etcd", "--etcd-endpoints", etcd_->endpoint(), "--etcd-prefix", kPrefix,
                  "--cluster-cidr", dual() ? "10.244.0.0/16,fd00:10:244::/56" : "10.244.0.0/16",
                  "--etcd-lease-ttl", "5", "--resync-period", "300"});
    return n;
  }

  Pod& AddPod(WeftNode& n, const std::string& name) {
    pods_.push_back(std::make_unique<Pod>(n, name));
    return *pods_.back();
  }

  static std::string Port(const Pod& p) { return plugin::HostVethName(p.cid, "eth0"); }

  // The pod's address of a family (from its eth0).
  static std::string PodIp(const Pod& p, bool v6) {
    if (!v6) return p.ip;
    for (const auto& a : p.ns.IpJson({"-6", "addr", "show", "dev", "eth0", "scope", "global"}))
      for (const auto& i : a.value("addr_info", nlohmann::json::array())) return i.value("local", "");
    return "";
  }

  // UDP from `from` with source `src` (forged on a raw socket unless it is
  // its own) to `to`: how many of 5 datagrams arrived.
  static int Udp(const Pod& from, const std::string& src, const Pod& to, bool v6) {
    std::vector<std::string> argv = {"python3", std::string(WEFT_SOURCE_DIR) + "/tests/integration/plugin/spoof.py",
                                     "udp", "--recv-ns", to.ns.path(), "--dst", PodIp(to, v6), "--send-ns",
                                     from.ns.path(), "--src", src, "--wait", "0.7"};
    if (src != PodIp(from, v6)) argv.push_back("--raw");
    return RunScript(argv).value("received", -1);
  }

  std::vector<bool> Families() const { return dual() ? std::vector<bool>{false, true} : std::vector<bool>{false}; }

  // The pod's host route of a family is in the node's main table.
  static bool HasHostRoute(const WeftNode& n, const Pod& p, bool v6) {
    for (const auto& r : n.ns.IpJson({v6 ? "-6" : "-4", "route", "show", "proto", "201", "dev", Port(p)}))
      if (r.value("dst", "") == PodIp(p, v6)) return true;
    return false;
  }
  static std::string Sysctl(const WeftNode& n, const std::string& key) {
    std::string out;
    n.ns.Exec({"cat", "/proc/sys/" + key}, &out);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }
  static bool HasChain(const WeftNode& n, const Pod& p) {
    return n.ns.Exec({"nft", "list", "chain", "netdev", "weft-guard", Port(p)}) == 0;
  }
  static bool HasTable(const WeftNode& n, const std::string& family, const std::string& table) {
    return n.ns.Exec({"nft", "list", "table", family, table}) == 0;
  }
  static double Repairs(const WeftNode& n, const std::string& object) {
    return n.Metric("weft_repairs_total{object=\"" + object + "\"}");
  }

  // How long until `pred` holds (-1: not within kBackWithinMs).
  static int BackWithin(const std::function<bool()>& pred, int within_ms = kBackWithinMs) {
    auto t0 = std::chrono::steady_clock::now();
    if (!WaitFor(pred, within_ms, 20)) return -1;
    return static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  }

  // The guard holds for `p`: its own source reaches `to`, another pod's is dropped.
  void ExpectGuarded(const Pod& p, const Pod& victim, const Pod& to) {
    for (bool v6 : Families()) {
      EXPECT_EQ(Udp(p, PodIp(p, v6), to, v6), 5) << "own source, " << (v6 ? "IPv6" : "IPv4");
      EXPECT_EQ(Udp(p, PodIp(victim, v6), to, v6), 0) << "forged source, " << (v6 ? "IPv6" : "IPv4");
    }
  }

  void Start() {
    n1_ = &AddNode("n1", 11);
    n2_ = &AddNode("n2", 12);
    ASSERT_TRUE(WaitFor([&] { return n1_->AgentRoutes().size() >= 1 && n2_->AgentRoutes().size() >= 1; }, 20000))
        << "weftd did not converge";
    ASSERT_TRUE(WaitFor([&] { return !n1_->PluginConf().empty() && !n2_->PluginConf().empty(); }, 10000));
    a_ = &AddPod(*n1_, "a");
    b_ = &AddPod(*n1_, "b");
    c_ = &AddPod(*n2_, "c");
    for (Pod* p : {a_, b_, c_}) ASSERT_TRUE(p->add_error.empty()) << p->add_error;
    for (bool v6 : Families()) ASSERT_TRUE(c_->ns.Ping(PodIp(*a_, v6), 2)) << "c -> a before, v6=" << v6;
    ExpectGuarded(*a_, *b_, *c_);
  }

  WeftNode* n1_ = nullptr;
  WeftNode* n2_ = nullptr;
  Pod* a_ = nullptr;
  Pod* b_ = nullptr;
  Pod* c_ = nullptr;
};

TEST_P(HealTest, EveryPerPodPieceDeletedIsBackWithin2sAndTrafficAsBefore) {
  Start();
  if (HasFailure()) return;
  WeftNode& n1 = *n1_;

  // The pod's host route, each family.
  for (bool v6 : Families()) {
    ASSERT_TRUE(HasHostRoute(n1, *a_, v6));
    ASSERT_EQ(n1.ns.Exec({"ip", v6 ? "-6" : "-4", "route", "del", PodIp(*a_, v6), "dev", Port(*a_)}), 0);
    ASSERT_FALSE(HasHostRoute(n1, *a_, v6));
    int ms = BackWithin([&] { return HasHostRoute(n1, *a_, v6); });
    EXPECT_GE(ms, 0) << "host route of a (" << (v6 ? "IPv6" : "IPv4") << ") not back within 2 s";
    std::cout << "HEAL pod-route " << (v6 ? "v6" : "v4") << " back_ms=" << ms << "\n";
    EXPECT_TRUE(c_->ns.Ping(PodIp(*a_, v6), 2)) << "c -> a after the route's repair";
  }
  EXPECT_EQ(Repairs(n1, "pod-route"), static_cast<double>(Families().size()));

  // Proxy ARP on the host veth.
  const std::string proxy_arp = "net/ipv4/conf/" + Port(*a_) + "/proxy_arp";
  ASSERT_EQ(Sysctl(n1, proxy_arp), "1");
  ASSERT_EQ(n1.ns.Exec({"sysctl", "-qw", "net.ipv4.conf." + Port(*a_) + ".proxy_arp=0"}), 0);
  int ms = BackWithin([&] { return Sysctl(n1, proxy_arp) == "1"; });
  EXPECT_GE(ms, 0) << "proxy ARP not back on within 2 s";
  std::cout << "HEAL pod-proxy-arp back_ms=" << ms << "\n";
  EXPECT_EQ(Repairs(n1, "pod-proxy-arp"), 1);
  EXPECT_TRUE(c_->ns.Ping(PodIp(*a_, false), 2));

  // IPv6 off on an IPv4-only pod's host veth.
  if (!dual()) {
    const std::string off = "net/ipv6/conf/" + Port(*a_) + "/disable_ipv6";
    ASSERT_EQ(Sysctl(n1, off), "1");
    ASSERT_EQ(n1.ns.Exec({"sysctl", "-qw", "net.ipv6.conf." + Port(*a_) + ".disable_ipv6=0"}), 0);
    // The one piece outside the 2 s: the kernel announces IPv6 back
    // on a port only when its link-local address has finished duplicate
    // address detection (1.3-1.7 s measured here), so the bound is 4 s.
    ms = BackWithin([&] { return Sysctl(n1, off) == "1"; }, 4000);
    EXPECT_GE(ms, 0) << "IPv6 not off again within 4 s";
    std::cout << "HEAL pod-ipv6-off back_ms=" << ms << "\n";
    EXPECT_EQ(Repairs(n1, "pod-ipv6-off"), 1);
    EXPECT_TRUE(c_->ns.Ping(PodIp(*a_, false), 2));
  }

  // The pod port's chain in the source guard: while it is gone the pod is
  // unguarded; once back, a forged source is dropped again.
  ASSERT_EQ(n1.ns.Exec({"nft", "delete", "chain", "netdev", "weft-guard", Port(*a_)}), 0);
  ms = BackWithin([&] { return HasChain(n1, *a_); });
  EXPECT_GE(ms, 0) << "a's guard chain not back within 2 s";
  std::cout << "HEAL guard-chain back_ms=" << ms << "\n";
  EXPECT_EQ(Repairs(n1, "guard-chain"), 1);
  ExpectGuarded(*a_, *b_, *c_);

  // The whole guard table.
  ASSERT_EQ(n1.ns.Exec({"nft", "delete", "table", "netdev", "weft-guard"}), 0);
  ms = BackWithin([&] { return HasChain(n1, *a_) && HasChain(n1, *b_); });
  EXPECT_GE(ms, 0) << "the guard table with a's and b's chains not back within 2 s";
  std::cout << "HEAL guard-table back_ms=" << ms << "\n";
  EXPECT_EQ(Repairs(n1, "guard-table"), 1);
  ExpectGuarded(*a_, *b_, *c_);
  ExpectGuarded(*b_, *a_, *c_);

  // What weftd renders itself: the overlay filter, the masquerade, a
  // peer's route, woken the same way.
  ASSERT_EQ(n1.ns.Exec({"nft", "delete", "table", "inet", "weft-overlay"}), 0);
  ms = BackWithin([&] { return HasTable(n1, "inet", "weft-overlay"); });
  EXPECT_GE(ms, 0) << "table inet weft-overlay not back within 2 s";
  std::cout << "HEAL overlay-filter back_ms=" << ms << "\n";
  EXPECT_EQ(Repairs(n1, "overlay-filter"), 1);
  // Its admissions come back with the full reconcile that follows.
  for (bool v6 : Families()) EXPECT_TRUE(WaitFor([&] { return c_->ns.Ping(PodIp(*a_, v6), 1); }, 3000));

  ASSERT_EQ(n1.ns.Exec({"nft", "delete", "table", "inet", "weft-weft"}), 0);
  ms = BackWithin([&] { return HasTable(n1, "inet", "weft-weft"); });
  EXPECT_GE(ms, 0) << "the masquerade table inet weft-weft not back within 2 s";
  std::cout << "HEAL masquerade back_ms=" << ms << "\n";

  auto routes = n1.AgentRoutes();
  ASSERT_FALSE(routes.empty());
  const std::string dst = routes[0].substr(0, routes[0].find(' '));
  ASSERT_EQ(n1.ns.Exec({"ip", "route", "del", dst}), 0);
  ms = BackWithin([&] { return n1.AgentRoutes() == routes; });
  EXPECT_GE(ms, 0) << "the overlay route to " << dst << " not back within 2 s";
  std::cout << "HEAL overlay-route back_ms=" << ms << "\n";
  EXPECT_GE(Repairs(n1, "overlay-entry"), 1);
  EXPECT_TRUE(c_->ns.Ping(PodIp(*a_, false), 2));

  // Each repair is logged with what was missing.
  std::string log = n1.LogTail(1 << 20);
  EXPECT_NE(log.find("msg=\"put back missing kernel state\" object=pod-route"), std::string::npos);
  EXPECT_NE(log.find("missing=\"host route " + PodIp(*a_, false) + "/32 dev " + Port(*a_) + "\""), std::string::npos);
}

// The plugin and weftd render the same guard with the same code: ADDs that
// run while weftd puts the deleted table back again and again all succeed,
// and every pod ends up with its chain and guarded.
TEST_P(HealTest, AddsWhileWeftdRepairsTheGuardAllEndGuarded) {
  Start();
  if (HasFailure()) return;
  WeftNode& n1 = *n1_;
  std::atomic<bool> done{false};
  std::atomic<int> deletions{0};
  std::thread vandal([&] {
    while (!done.load()) {
      if (n1.ns.Exec({"nft", "delete", "table", "netdev", "weft-guard"}) == 0) deletions++;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
  });
  std::vector<Pod*> added;
  for (int i = 0; i < 10; ++i) {
    added.push_back(&AddPod(n1, "x" + std::to_string(i)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  done = true;
  vandal.join();
  EXPECT_GT(deletions.load(), 2);
  for (Pod* p : added) EXPECT_TRUE(p->add_error.empty()) << p->cid << ": " << p->add_error;
  EXPECT_TRUE(WaitFor(
      [&] {
        for (Pod* p : added)
          if (!HasChain(n1, *p)) return false;
        return HasChain(n1, *a_) && HasChain(n1, *b_);
      },
      kBackWithinMs, 20))
      << "a pod's chain is missing 2 s after the last deletion";
  ExpectGuarded(*added.back(), *a_, *c_);
  ExpectGuarded(*a_, *added.front(), *c_);
  // No chain without its port, no port without its chain, per weftctl doctor.
  std::string out;
  n1.ns.Exec({"nft", "list", "table", "netdev", "weft-guard"}, &out);
  for (Pod* p : added) EXPECT_NE(out.find("chain " + Port(*p)), std::string::npos) << p->cid;
}

// A DEL destroys its port's guard chain before the veth, and weftd hears
// of that deletion: the row is "deleting" by then, so weftd leaves the port
// alone. Found on the real cluster (tests/k8s/cluster_chaos_test.sh): 74
// "put back missing kernel state" guard-chain repairs on one node while 150
// pods were deleted, each a chain made again for a port about to go.
TEST_P(HealTest, DelsAreNotRepairedAsDeletions) {
  Start();
  if (HasFailure()) return;
  WeftNode& n1 = *n1_;
  std::vector<std::string> ports;
  for (int i = 0; i < 8; ++i) {
    Pod& p = AddPod(n1, "d" + std::to_string(i));
    ASSERT_TRUE(p.add_error.empty()) << p.add_error;
    ports.push_back(Port(p));
  }
  const double before = Repairs(n1, "guard-chain");
  for (int i = 0; i < 8; ++i) pods_.pop_back();  // DEL each, one after the other
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(Repairs(n1, "guard-chain"), before) << "weftd put back the chain of a port its DEL was taking apart";
  std::string out;
  n1.ns.Exec({"nft", "list", "table", "netdev", "weft-guard"}, &out);
  for (const auto& port : ports) EXPECT_EQ(out.find("chain " + port), std::string::npos) << port << " left behind";
  EXPECT_EQ(n1.LogTail(1 << 20).find("object=guard-chain"), std::string::npos);
  EXPECT_TRUE(HasChain(n1, *a_) && HasChain(n1, *b_));
}

INSTANTIATE_TEST_SUITE_P(Stacks, HealTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "DualStack" : "Ipv4");
                         });

}  // namespace
}  // namespace weft::testing
