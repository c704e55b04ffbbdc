// Dual-stack and IPv6-only clusters end to end: node netns on one bridge
// underlay (IPv4 and IPv6, or IPv6 only), weftd per node with the etcd or the
// Kubernetes control plane (the stand-in API server), VXLAN or host-gw; pods
// attached through the real plugin ping each other across nodes over each
// family; a third node joins, then leaves. Every case checks what the node
// publishes, the kernel entries per family, the conflist, the masquerade
// table, the IPv6 forwarding sysctl and the per-family peer metric.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "agent/etcd.h"
#include "e2e/cluster.h"
#include "e2e/kube_api.h"
#include "sys/http.h"

namespace weft::testing {
namespace {

enum class Plane { kEtcd, kKube };
enum class Stack { kDual, kV6Only };

struct Case {
  Plane plane;
  Stack stack;
  std::string backend;  // "vxlan" or "host-gw"
};

std::string Describe(const Case& c) {
  return std::string(c.plane == Plane::kEtcd ? "Etcd" : "Kube") + (c.stack == Stack::kDual ? "DualStack" : "Ipv6Only") +
         (c.backend == "vxlan" ? "Vxlan" : "HostGw");
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return Describe(info.param); }

constexpr char kCluster4[] = "10.244.0.0/16";
constexpr char kCluster6[] = "fd00:10:244::/56";
constexpr char kPrefix[] = "/weft/ds";

std::string Ip4(int octet) { return "192.0.2." + std::to_string(octet); }
std::string Ip6(int octet) { return "2001:db8::" + std::to_string(octet); }
// The first address of a pod CIDR ("fd00:10:244:11::/64" -> "fd00:10:244:11::").
std::string First(const std::string& cidr) { return IpPrefix::Parse(cidr)->Masked().addr().ToString(); }

class DualStackTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(sys::InitHttp().ok());
    root_ = TempDir("ds");
    ul_ = std::make_unique<Underlay>();
    ul_->EnableIpv6();
    std::string host = v6only() ? Underlay::kIp6 : Underlay::kIp;
    if (GetParam().plane == Plane::kEtcd) {
      etcd_ = std::make_unique<Etcd>(*ul_, root_, host);
      etcd_->Start();
      ASSERT_TRUE(etcd_->WaitHealthy()) << "etcd did not come up; see " << root_ << "/etcd.log";
    } else {
      api_ = std::make_unique<FakeApiServer>(*ul_, root_ + "/api", "weft-test-token", host);
    }
  }

  void TearDown() override {
    if (HasFailure()) {
      for (auto& n : nodes_) std::cerr << n->LogTail(30000);
      if (api_) std::cerr << "---- API log (tail) ----\n" << api_->Log().substr(0, 20000) << "\n";
    }
    pods_.clear();
    for (auto& n : nodes_) n->StopWeftd(SIGKILL);
    nodes_.clear();
    etcd_.reset();
    api_.reset();
    ul_.reset();
    RemoveTree(root_);
  }

  bool v6only() const { return GetParam().stack == Stack::kV6Only; }
  bool vxlan() const { return GetParam().backend == "vxlan"; }
  bool etcd() const { return GetParam().plane == Plane::kEtcd; }

  std::vector<std::string> Flags() const {
    std::vector<std::string> f = {"--backend", GetParam().backend, "--resync-period", "2", "--cluster-cidr",
                                  v6only() ? std::string(kCluster6) : std::string(kCluster4) + "," + kCluster6};
    if (etcd()) {
      f.insert(f.end(), {"--control-plane", "etcd", "--etcd-endpoints", etcd_->endpoint(), "--etcd-prefix", kPrefix,
                         "--etcd-lease-ttl", "4"});
    } else {
      f.insert(f.end(), {"--control-plane", "kubernetes", "--kubeconfig", api_->kubeconfig(), "--watch-timeout", "3"});
    }
    return f;
  }

  // The Node object kube-controller-manager and kubelet would have made:
  // a pod CIDR per family, an InternalIP per family.
  void PutNode(const std::string& name, int octet) {
    nlohmann::json cidrs = nlohmann::json::array(), addrs = nlohmann::json::array();
    if (!v6only()) {
      cidrs.push_back("10.244." + std::to_string(octet) + ".0/24");
      addrs.push_back({{"type", "InternalIP"}, {"address", Ip4(octet)}});
    }
    cidrs.push_back("fd00:10:244:" + std::to_string(octet) + "::/64");
    addrs.push_back({{"type", "InternalIP"}, {"address", Ip6(octet)}});
    api_->Apply({{"kind", "Node"},
                 {"apiVersion", "v1"},
                 {"metadata", {{"name", name}}},
                 {"spec", {{"podCIDR", cidrs[0]}, {"podCIDRs", cidrs}}},
                 {"status", {{"addresses", addrs}}}});
  }

  // A node with an IPv6 address beside its IPv4 one (dual-stack), or
  // instead of it (IPv6-only), and its weftd.
  WeftNode& AddNode(const std::string& name, int octet) {
    nodes_.push_back(std::make_unique<WeftNode>(*ul_, name, octet, root_));
    WeftNode& n = *nodes_.back();
    const std::string& ns = n.ns.name();
    Cmd({"ip", "-n", ns, "addr", "add", Ip6(octet) + "/64", "dev", "up0", "nodad"});
    Cmd({"ip", "-n", ns, "-6", "route", "add", "default", "via", Underlay::kIp6, "dev", "up0"});
    if (v6only()) {
      Cmd({"ip", "-n", ns, "addr", "del", Ip4(octet) + "/24", "dev", "up0"});
      // An IPv6-only node need not route IPv4: weftd must leave it so.
      Cmd({"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=0"});
    }
    if (!etcd()) PutNode(name, octet);
    n.StartWeftd(Flags());
    return n;
  }

  // The node leaves the cluster: `weftd --leave` (etcd), the Node deleted
  // (Kubernetes).
  void Leave(WeftNode& n) {
    n.StopWeftd(SIGTERM);
    if (etcd()) {
      std::vector<std::string> argv = {BinaryPath("weftd"), "--node-name", n.name,          "--leave",
                                       "--state-dir",       n.dir + "/state", "--log-file", n.log()};
      auto f = Flags();
      argv.insert(argv.end(), f.begin(), f.end());
      ASSERT_EQ(n.ns.Exec(argv), 0);
    } else {
      ASSERT_TRUE(api_->Delete("Node", "", n.name));
    }
  }

  // weftd's routes of one family: "dst via gw dev".
  static std::vector<std::string> Routes(const WeftNode& n, bool v6) {
    std::vector<std::string> out;
    for (const auto& r : n.ns.IpJson({v6 ? "-6" : "-4", "route", "show", "proto", "201"})) {
      if (!r.contains("gateway")) continue;
      out.push_back(r.value("dst", "") + " via " + r.value("gateway", "") + " dev " + r.value("dev", ""));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  bool Converged(const WeftNode& n, size_t peers, int timeout_ms = 15000) {
    return WaitFor(
        [&] { return Routes(n, true).size() == peers && Routes(n, false).size() == (v6only() ? 0 : peers); },
        timeout_ms);
  }

  // The node's pod CIDRs from the conflist weftd wrote, IPv4 first.
  static nlohmann::json Conflist(const WeftNode& n) {
    std::ifstream f(n.conf_dir() + "/10-weft.conflist");
    std::stringstream ss;
    ss << f.rdbuf();
    try {
      return nlohmann::json::parse(ss.str())["plugins"][0];
    } catch (...) {
      return nullptr;
    }
  }
  static std::string Range(const WeftNode& n, bool v6) {
    auto c = Conflist(n);
    if (c.is_null()) return "";
    for (const auto& r : c["ranges"])
      if ((r.get<std::string>().find(':') != std::string::npos) == v6) return r;
    return "";
  }

  static std::string Mac(const WeftNode& n) {
    auto j = n.ns.IpJson({"link", "show", "dev", "weft.1"});
    return j.empty() ? "" : j[0].value("address", "");
  }

  // A pod's global address of one family.
  static std::string PodIp(const Pod& p, bool v6) {
    for (const auto& l : p.ns.IpJson({v6 ? "-6" : "-4", "addr", "show", "dev", "eth0", "scope", "global"}))
      for (const auto& a : l["addr_info"]) return a.value("local", "");
    return "";
  }

  Pod& AddPod(WeftNode& n, const std::string& name) {
    pods_.push_back(std::make_unique<Pod>(n, name));
    return *pods_.back();
  }

  // Pings b's address of the family from a; returns ping's output.
  static std::string Ping(const Pod& a, const Pod& b, bool v6, int count, int* rc) {
    std::string out;
    *rc = a.ns.Exec({"ping", v6 ? "-6" : "-4", "-c", std::to_string(count), "-i", "0.2", "-W", "2", PodIp(b, v6)},
                    &out);
    return out;
  }

  void ExpectPings(const Pod& a, const Pod& b) {
    for (bool v6 : {false, true}) {
      if (!v6 && v6only()) continue;
      int rc = -1;
      std::string out = Ping(a, b, v6, 2, &rc);
      EXPECT_EQ(rc, 0) << a.cid << " -> " << b.cid << " over " << (v6 ? "IPv6" : "IPv4") << ":\n" << out;
    }
  }

  // What a node publishes about itself: its IPv6 host address (and pod
  // CIDRs) in the etcd records or the Node's annotations.
  void ExpectPublished(const WeftNode& n, int octet) {
    if (!etcd()) {
      auto node = api_->Get("Node", "", n.name);
      EXPECT_EQ(node["metadata"]["annotations"].value("weft.io/host-ip6", ""), Ip6(octet)) << node.dump();
      EXPECT_EQ(node["metadata"]["annotations"].value("weft.io/host-ip", ""), v6only() ? Ip6(octet) : Ip4(octet));
      return;
    }
    etcd::EtcdRange range;
    Status st = InNetns(*ul_, [&]() -> Status {
      etcd::EtcdClient c({etcd_->endpoint()}, {});
      std::string from = agent::SubnetsKeyPrefix(kPrefix);
      WEFT_ASSIGN_OR_RETURN(range, c.Range(from, etcd::PrefixRangeEnd(from)));
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::vector<std::string> keys;
    std::set<int64_t> leases;
    for (const auto& kv : range.kvs) {
      auto rec = nlohmann::json::parse(kv.value);
      if (rec.value("node", "") != n.name) continue;
      keys.push_back(kv.key);
      leases.insert(kv.lease);
      EXPECT_EQ(rec.value("hostIP6", ""), Ip6(octet)) << kv.value;
    }
    std::vector<std::string> want;
    if (!v6only()) want.push_back(agent::SubnetKey(kPrefix, *IpPrefix::Parse(Range(n, false))));
    want.push_back(agent::SubnetKey(kPrefix, *IpPrefix::Parse(Range(n, true))));
    EXPECT_EQ(keys, want);
    EXPECT_EQ(leases.size(), 1u) << "a node's records hang on one lease";
  }

  // n's kernel entries for `peer` and its own set-up, per backend.
  void ExpectDatapath(const WeftNode& n, const WeftNode& peer, int peer_octet) {
    std::string r6 = Range(peer, true), r4 = Range(peer, false);
    ASSERT_FALSE(r6.empty());
    auto routes6 = Routes(n, true), routes4 = Routes(n, false);
    if (vxlan()) {
      std::string mac = Mac(peer);
      EXPECT_NE(std::find(routes6.begin(), routes6.end(), r6 + " via " + First(r6) + " dev weft.1"), routes6.end())
          << ::testing::PrintToString(routes6);
      if (!v6only()) {
        EXPECT_NE(std::find(routes4.begin(), routes4.end(), r4 + " via " + First(r4) + " dev weft.1"), routes4.end())
            << ::testing::PrintToString(routes4);
      }
      bool ndp = false;
      for (const auto& nb : n.ns.IpJson({"-6", "neigh", "show", "dev", "weft.1"}))
        if (nb.value("dst", "") == First(r6) && nb.value("lladdr", "") == mac &&
            nb.dump().find("PERMANENT") != std::string::npos)
          ndp = true;
      EXPECT_TRUE(ndp) << "no permanent NDP entry " << First(r6) << " -> " << mac;
      std::string fdb_out;
      Cmd({"bridge", "-n", n.ns.name(), "-j", "fdb", "show", "dev", "weft.1"}, &fdb_out);
      std::string remote = v6only() ? Ip6(peer_octet) : Ip4(peer_octet);
      bool fdb = false;
      for (const auto& e : nlohmann::json::parse(fdb_out.empty() ? "[]" : fdb_out))
        if (e.value("mac", "") == mac && e.value("dst", "") == remote) fdb = true;
      EXPECT_TRUE(fdb) << "no FDB entry " << mac << " dst " << remote << " in " << fdb_out;
    } else {
      EXPECT_NE(std::find(routes6.begin(), routes6.end(), r6 + " via " + Ip6(peer_octet) + " dev up0"), routes6.end())
          << ::testing::PrintToString(routes6);
      if (!v6only()) {
        EXPECT_NE(std::find(routes4.begin(), routes4.end(), r4 + " via " + Ip4(peer_octet) + " dev up0"),
                  routes4.end())
            << ::testing::PrintToString(routes4);
      }
    }
  }

  // n's own set-up: the VXLAN device (local, MTU, VTEP addresses), the
  // conflist, the masquerade table, IPv6 forwarding, the metric.
  void ExpectNodeSetUp(const WeftNode& n, int octet, size_t peers) {
    std::string r6 = Range(n, true), r4 = Range(n, false);
    auto conf = Conflist(n);
    ASSERT_FALSE(conf.is_null());
    nlohmann::json ranges = v6only() ? nlohmann::json({r6}) : nlohmann::json({r4, r6});
    nlohmann::json cluster = v6only() ? nlohmann::json({kCluster6}) : nlohmann::json({kCluster4, kCluster6});
    EXPECT_EQ(conf["ranges"], ranges);
    EXPECT_EQ(conf["clusterCIDRs"], cluster);
    if (vxlan()) {
      auto link = n.ns.IpJson({"-d", "link", "show", "dev", "weft.1"});
      ASSERT_EQ(link.size(), 1u);
      auto info = link[0]["linkinfo"]["info_data"];
      // The underlay's family decides the encapsulation and its cost.
      if (v6only()) {
        EXPECT_EQ(info.value("local6", info.value("local", "")), Ip6(octet)) << info.dump();
        EXPECT_EQ(link[0]["mtu"], 1430);
      } else {
        EXPECT_EQ(info.value("local", ""), Ip4(octet)) << info.dump();
        EXPECT_EQ(link[0]["mtu"], 1450);
      }
      EXPECT_EQ(conf["mtu"], link[0]["mtu"]);
      std::set<std::string> vteps;
      for (const auto& l : n.ns.IpJson({"addr", "show", "dev", "weft.1", "scope", "global"}))
        for (const auto& a : l["addr_info"])
          if (a.contains("local"))
            vteps.insert(a.value("local", "") + "/" + std::to_string(a.value("prefixlen", 0)));
      std::set<std::string> want = {First(r6) + "/128"};
      if (!v6only()) want.insert(First(r4) + "/32");
      EXPECT_EQ(vteps, want);
    } else {
      EXPECT_FALSE(n.ns.HasLink("weft.1"));
      EXPECT_EQ(conf["mtu"], 1500);
    }
    std::string fwd;
    n.ns.Exec({"cat", "/proc/sys/net/ipv6/conf/all/forwarding"}, &fwd);
    EXPECT_EQ(fwd, "1\n");
    std::string fwd4;
    n.ns.Exec({"cat", "/proc/sys/net/ipv4/ip_forward"}, &fwd4);
    EXPECT_EQ(fwd4, v6only() ? "0\n" : "1\n");
    std::string nft;
    n.ns.Exec({"nft", "list", "table", "inet", "weft-weft"}, &nft);
    EXPECT_NE(nft.find(kCluster6), std::string::npos) << nft;
    EXPECT_NE(nft.find("ip6 saddr @pods6"), std::string::npos) << nft;
    EXPECT_EQ(nft.find("ip saddr @pods4") != std::string::npos, !v6only()) << nft;
    EXPECT_EQ(n.Metric("weft_peers_by_family{family=\"ipv6\"}"), static_cast<double>(peers));
    EXPECT_EQ(n.Metric("weft_peers_by_family{family=\"ipv4\"}"), v6only() ? 0.0 : static_cast<double>(peers));
    EXPECT_EQ(n.Metric("weft_peers"), static_cast<double>(peers));
  }

  std::string root_;
  std::unique_ptr<Underlay> ul_;
  std::unique_ptr<Etcd> etcd_;
  std::unique_ptr<FakeApiServer> api_;
  std::vector<std::unique_ptr<WeftNode>> nodes_;
  std::vector<std::unique_ptr<Pod>> pods_;
};

TEST_P(DualStackTest, PodToPodAcrossNodesOverEachFamilyWhileNodesJoinAndLeave) {
  WeftNode& n1 = AddNode("n1", 11);
  WeftNode& n2 = AddNode("n2", 12);
  ASSERT_TRUE(Converged(n1, 1)) << ::testing::PrintToString(Routes(n1, true));
  ASSERT_TRUE(Converged(n2, 1)) << ::testing::PrintToString(Routes(n2, true));
  ExpectPublished(n1, 11);
  ExpectNodeSetUp(n1, 11, 1);
  ExpectDatapath(n1, n2, 12);
  ExpectDatapath(n2, n1, 11);

  Pod& p1 = AddPod(n1, "p1");
  Pod& p2 = AddPod(n2, "p2");
  for (Pod* p : {&p1, &p2}) ASSERT_TRUE(p->add_error.empty()) << p->add_error;
  ASSERT_FALSE(PodIp(p1, true).empty());
  EXPECT_EQ(PodIp(p1, false).empty(), v6only());
  ExpectPings(p1, p2);
  ExpectPings(p2, p1);
  if (!v6only()) {
    // The transcript for the record: one dual-stack pod pair across nodes.
    for (bool v6 : {true, false}) {
      int rc = -1;
      std::string out = Ping(p1, p2, v6, 3, &rc);
      std::istringstream in(out);
      std::string line;
      std::cout << "DUALSTACK-TRANSCRIPT case=" << Describe(GetParam()) << " " << p1.cid << " ("
                << PodIp(p1, v6) << ") -> " << p2.cid << " (" << PodIp(p2, v6) << ") $ ping " << (v6 ? "-6" : "-4")
                << " -c 3 " << PodIp(p2, v6) << "\n";
      while (std::getline(in, line))
        if (!line.empty()) std::cout << "DUALSTACK-TRANSCRIPT " << line << "\n";
      EXPECT_EQ(rc, 0) << out;
    }
  }

  // A node joins: everyone routes to it over each family.
  WeftNode& n3 = AddNode("n3", 13);
  for (WeftNode* n : {&n1, &n2, &n3}) ASSERT_TRUE(Converged(*n, 2)) << n->name;
  ExpectDatapath(n1, n3, 13);
  Pod& p3 = AddPod(n3, "p3");
  ASSERT_TRUE(p3.add_error.empty()) << p3.add_error;
  ExpectPings(p1, p3);
  ExpectPings(p3, p2);

  // It leaves: its routes (and for VXLAN its NDP, ARP and FDB entries) go.
  std::string r3 = Range(n3, true), mac3 = Mac(n3);
  pods_.pop_back();
  Leave(n3);
  for (WeftNode* n : {&n1, &n2}) ASSERT_TRUE(Converged(*n, 1)) << n->name;
  for (const auto& r : Routes(n1, true)) EXPECT_EQ(r.find(r3), std::string::npos) << r;
  if (vxlan()) {
    for (const auto& nb : n1.ns.IpJson({"-6", "neigh", "show", "dev", "weft.1"}))
      EXPECT_NE(nb.value("dst", ""), First(r3)) << nb.dump();
    std::string fdb_out;
    Cmd({"bridge", "-n", n1.ns.name(), "fdb", "show", "dev", "weft.1"}, &fdb_out);
    EXPECT_EQ(fdb_out.find(mac3), std::string::npos) << fdb_out;
  }
  EXPECT_EQ(n1.Metric("weft_peers_by_family{family=\"ipv6\"}"), 1);
  ExpectPings(p1, p2);

  // Converged means converged: a full pass (a kernel re-read, both
  // families) finds nothing to change, so no entry is rewritten every resync.
  double changes = n1.Metric("weft_reconcile_changes_total");
  double reads = n1.Metric("weft_reconcile_kernel_reads_total");
  ASSERT_TRUE(WaitFor([&] { return n1.Metric("weft_reconcile_kernel_reads_total") >= reads + 2; }, 10000));
  EXPECT_EQ(n1.Metric("weft_reconcile_changes_total"), changes);
}

// etcd only: records written before dual-stack, and restarts.
class DualStackEtcdTest : public DualStackTest {
 protected:
  Status WithEtcd(const std::function<Status(etcd::EtcdClient&)>& fn) {
    return InNetns(*ul_, [&]() -> Status {
      etcd::EtcdClient c({etcd_->endpoint()}, {});
      return fn(c);
    });
  }
  // This node's records: key -> lease.
  std::map<std::string, int64_t> Records(const std::string& node) {
    std::map<std::string, int64_t> out;
    Status st = WithEtcd([&](etcd::EtcdClient& c) -> Status {
      std::string from = agent::SubnetsKeyPrefix(kPrefix);
      WEFT_ASSIGN_OR_RETURN(auto r, c.Range(from, etcd::PrefixRangeEnd(from)));
      for (const auto& kv : r.kvs)
        if (nlohmann::json::parse(kv.value).value("node", "") == node) out[kv.key] = kv.lease;
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }
};

TEST_P(DualStackEtcdTest, OldRecordsStillRouteIpv4AndRestartsKeepBothSubnets) {
  WeftNode& n1 = AddNode("n1", 11);
  WeftNode& n2 = AddNode("n2", 12);
  ASSERT_TRUE(Converged(n1, 1));
  // A node whose weftd predates dual-stack: one IPv4 record, no hostIP6.
  overlay::LocalNode old{"old", *IpAddress::Parse("192.0.2.99"), "aa:bb:cc:00:00:99", overlay::Backend::kVxlan};
  std::string old_value = agent::EncodeSubnetValue(old);
  ASSERT_EQ(old_value.find("hostIP6"), std::string::npos);
  ASSERT_TRUE(WithEtcd([&](etcd::EtcdClient& c) {
                return c.Put(agent::SubnetKey(kPrefix, *IpPrefix::Parse("10.244.200.0/24")), old_value);
              }).ok());
  ASSERT_TRUE(WaitFor([&] { return Routes(n1, false).size() == 2; }, 10000))
      << ::testing::PrintToString(Routes(n1, false));
  auto routes4 = Routes(n1, false);
  EXPECT_NE(std::find(routes4.begin(), routes4.end(), "10.244.200.0/24 via 10.244.200.0 dev weft.1"), routes4.end());
  EXPECT_EQ(Routes(n1, true).size(), 1u);  // n2's only
  EXPECT_EQ(n1.Metric("weft_peers_by_family{family=\"ipv4\"}"), 2);
  EXPECT_EQ(n1.Metric("weft_peers_by_family{family=\"ipv6\"}"), 1);

  // A restart keeps both subnets: the two records move onto one new lease.
  auto before = Records("n1");
  ASSERT_EQ(before.size(), 2u);
  std::string r4 = Range(n1, false), r6 = Range(n1, true);
  n1.StopWeftd(SIGKILL);
  n1.StartWeftd(Flags());
  ASSERT_TRUE(WaitFor([&] { return n1.Metric("weft_ready") == 1; }, 10000));
  ASSERT_TRUE(WaitFor(
      [&] {
        auto after = Records("n1");
        return after.size() == 2 && after.begin()->second != before.begin()->second;
      },
      10000))
      << ::testing::PrintToString(before) << " " << ::testing::PrintToString(Records("n1"));
  auto after = Records("n1");
  EXPECT_EQ(after.begin()->first, before.begin()->first);
  EXPECT_EQ(after.rbegin()->first, before.rbegin()->first);
  EXPECT_EQ(after.begin()->second, after.rbegin()->second) << "one lease for both records";
  EXPECT_EQ(Range(n1, false), r4);
  EXPECT_EQ(Range(n1, true), r6);
  std::ifstream f(n1.dir + "/state/subnet");
  std::stringstream remembered;
  remembered << f.rdbuf();
  EXPECT_EQ(remembered.str(), r4 + "\n" + r6 + "\n");
  EXPECT_EQ(Routes(n2, true).size(), 1u);  // n1's, untouched
  Pod& p1 = AddPod(n1, "p1");
  Pod& p2 = AddPod(n2, "p2");
  for (Pod* p : {&p1, &p2}) ASSERT_TRUE(p->add_error.empty()) << p->add_error;
  ExpectPings(p2, p1);
}

INSTANTIATE_TEST_SUITE_P(Etcd, DualStackEtcdTest, ::testing::Values(Case{Plane::kEtcd, Stack::kDual, "vxlan"}),
                         CaseName);

INSTANTIATE_TEST_SUITE_P(
    Clusters, DualStackTest,
    ::testing::Values(Case{Plane::kEtcd, Stack::kDual, "vxlan"}, Case{Plane::kEtcd, Stack::kDual, "host-gw"},
                      Case{Plane::kEtcd, Stack::kV6Only, "vxlan"}, Case{Plane::kEtcd, Stack::kV6Only, "host-gw"},
                      Case{Plane::kKube, Stack::kDual, "vxlan"}, Case{Plane::kKube, Stack::kDual, "host-gw"},
                      Case{Plane::kKube, Stack::kV6Only, "vxlan"}, Case{Plane::kKube, Stack::kV6Only, "host-gw"}),
    CaseName);

}  // namespace
}  // namespace weft::testing
