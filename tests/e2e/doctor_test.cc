// `weftctl doctor` on a real node of the virtual cluster: pods attached by
// the plugin, weftd's peers from a real etcd; then the node is broken by
// hand in every way doctor knows, doctor must name each one, `--fix` must
// repair the safe ones, and the node must end up clean.

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "agent/etcd.h"
#include "e2e/cluster.h"
#include "e2e/cluster_fixture.h"
#include "fw/hostport.h"
#include "fw/masquerade.h"
#include "sys/http.h"

namespace weft::testing {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "/weft/doctor";

class DoctorTest : public EtcdClusterTest {
 protected:
  DoctorTest() : EtcdClusterTest("doctor") {}

  void BeforeTeardown() override {
    for (auto& d : dels_) d();
    dels_.clear();
    pod_ns_.clear();
  }

  WeftNode& AddNode(const std::string& name, int octet) {
    nodes_.push_back(std::make_unique<WeftNode>(*ul_, name, octet, root_));
    WeftNode& n = *nodes_.back();
    n.StartWeftd({"--control-plane", "etcd", "--etcd-endpoints", etcd_->endpoint(), "--etcd-prefix", kPrefix,
                  "--cluster-cidr", "10.244.0.0/16", "--etcd-lease-ttl", "3", "--resync-period", "1"});
    return n;
  }

  // ADD through the real plugin with the node's conflist (plus hostPorts);
  // DEL runs at teardown. Returns {cid, ip}.
  std::pair<std::string, std::string> AddPod(WeftNode& n, const std::string& name, bool host_port = false) {
    pod_ns_.push_back(std::make_unique<TestNetns>(n.name + "-" + name));
    TestNetns& ns = *pod_ns_.back();
    json conf = json::parse(n.PluginConf());
    if (host_port)
      conf["runtimeConfig"]["portMappings"] = json::array({{{"hostPort", 18080}, {"containerPort", 80},
                                                            {"protocol", "tcp"}}});
    std::string cid = n.name + "-" + name;
    auto r = RunPlugin(BinaryPath("weft"), n.ns, CniEnv("ADD", cid, ns.path()), conf.dump());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::string path = ns.path();
    dels_.push_back([&n, cid, path, c = conf.dump()] {
      RunPlugin(BinaryPath("weft"), n.ns, CniEnv("DEL", cid, path), c);
    });
    std::string ip;
    try {
      std::string a = r.Json()["ips"][0]["address"];
      ip = a.substr(0, a.find('/'));
    } catch (...) {
    }
    return {cid, ip};
  }

  struct Run {
    int code = -1;
    std::string out, err;
    json j;
  };
  Run Doctor(WeftNode& n, bool as_json, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {"ip", "netns", "exec", n.ns.name(), BinaryPath("weftctl"), "--conf-dir",
                                     n.conf_dir()};
    if (as_json) argv.push_back("--json");
    std::vector<std::string> rest = {"doctor", "--etcd-endpoints", etcd_->endpoint(), "--etcd-prefix", kPrefix,
                                     "--node-name", n.name, "--weftd-state-dir", n.dir + "/state"};
    argv.insert(argv.end(), rest.begin(), rest.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    Run r;
    r.code = Cmd(argv, &r.out, &r.err);
    if (as_json) {
      try {
        r.j = json::parse(r.out);
      } catch (...) {
        ADD_FAILURE() << "doctor --json printed no JSON: " << r.out << r.err;
      }
    }
    return r;
  }

  std::string Sqlite(WeftNode& n, const std::string& sql) {
    std::string out, err;
    int rc = Cmd({"sqlite3", n.dir + "/ipam/ipam.db", sql}, &out, &err);
    EXPECT_EQ(rc, 0) << sql << ": " << err;
    return out;
  }

  Status WithEtcd(const std::function<Status(etcd::EtcdClient&)>& fn) {
    return InNetns(*ul_, [&]() -> Status {
      etcd::EtcdClient c({etcd_->endpoint()}, {});
      return fn(c);
    });
  }

  std::vector<std::unique_ptr<TestNetns>> pod_ns_;
  std::vector<std::function<void()>> dels_;
};

// Findings of one kind in doctor's JSON list.
std::vector<json> Kind(const json& list, const std::string& kind) {
  std::vector<json> out;
  for (const auto& f : list)
    if (f.value("kind", "") == kind) out.push_back(f);
  return out;
}

bool Mentions(const std::vector<json>& fs, const std::string& what) {
  for (const auto& f : fs)
    if (f.value("message", "").find(what) != std::string::npos || f.value("subject", "") == what) return true;
  return false;
}

TEST_F(DoctorTest, ReportsEveryBreakageFixesTheSafeOnesAndEndsClean) {
  WeftNode& n1 = AddNode("n1", 11);
  WeftNode& n2 = AddNode("n2", 12);
  ASSERT_TRUE(WaitFor([&] { return n1.AgentRoutes().size() == 1 && n2.AgentRoutes().size() == 1; }, 20000))
      << "weftd did not converge";
  ASSERT_TRUE(WaitFor([&] { return !n1.PluginConf().empty(); }, 10000));

  auto [cid_gone, ip_gone] = AddPod(n1, "gone");
  auto [cid_norow, ip_norow] = AddPod(n1, "norow");
  auto [cid_hp, ip_hp] = AddPod(n1, "hp", /*host_port=*/true);
  auto [cid_stuck, ip_stuck] = AddPod(n1, "stuck");
  ASSERT_FALSE(ip_gone.empty() || ip_norow.empty() || ip_hp.empty() || ip_stuck.empty());

  // weftd on n1 would repair the peer entries itself: doctor must find them.
  n1.StopWeftd(SIGKILL);

  // A healthy node: no false positives.
  Run clean = Doctor(n1, true);
  EXPECT_EQ(clean.code, 0) << clean.out << clean.err;
  EXPECT_TRUE(clean.j.value("findings", json::array()).empty()) << clean.j.dump(2);
  EXPECT_TRUE(clean.j.value("clean", false));

  // --- Break it. ---
  // 1. A pod gone without DEL (its netns, and the veth pair with it).
  pod_ns_[0].reset();
  // 2. An attachment's row deleted behind the plugin's back.
  std::string veth_norow = Sqlite(n1, "SELECT interface_name FROM pods WHERE container_id='" + cid_norow + "'");
  veth_norow.erase(veth_norow.find_last_not_of("\n") + 1);
  ASSERT_FALSE(veth_norow.empty());
  Sqlite(n1, "DELETE FROM pods WHERE container_id='" + cid_norow + "'");
  // 3. A stray weft-named veth, 4. a stale plugin route (proto 201, no gateway).
  ASSERT_EQ(n1.ns.Exec({"ip", "link", "add", "wftstray0000001", "type", "veth", "peer", "name", "straypeer"}), 0);
  ASSERT_EQ(n1.ns.Exec({"ip", "route", "add", "10.99.0.5/32", "dev", "up0", "proto", "201"}), 0);
  // 5. The hostPort table flushed.
  const std::string hp_table = fw::HostPortTable(n1.dir + "/ipam");
  ASSERT_EQ(n1.ns.Exec({"nft", "flush", "table", "inet", hp_table}), 0);
  // 5b. A rule with a stale marker in weftd's masquerade table.
  const std::string masq_table = fw::NftTableName("weft");
  ASSERT_EQ(n1.ns.Exec({"nft", "add", "rule", "inet", masq_table, "postrouting", "ip", "saddr", "10.99.0.0/24",
                        "masquerade", "comment", "\"weft-masq:stale\""}),
            0);
  // 5c. The hostPort pod's host route deleted and proxy ARP turned off on
  //     its veth (weftd, killed, does not put them back).
  std::string veth_hp = Sqlite(n1, "SELECT interface_name FROM pods WHERE container_id='" + cid_hp + "'");
  veth_hp.erase(veth_hp.find_last_not_of("\n") + 1);
  ASSERT_EQ(n1.ns.Exec({"ip", "route", "del", ip_hp + "/32", "dev", veth_hp}), 0);
  ASSERT_EQ(n1.ns.Exec({"sysctl", "-qw", "net.ipv4.conf." + veth_hp + ".proxy_arp=0"}), 0);
  // 6. An attachment stuck in "adding" for a long time.
  Sqlite(n1, "UPDATE pods SET state='adding', creation_timestamp='2000-01-01 00:00:00' WHERE container_id='" + cid_stuck + "'");
  // 7. Peer n2 gone from the control plane (its lease expires), and a node
  //    n3 that n1 has never programmed.
  n2.StopWeftd(SIGKILL);
  ASSERT_TRUE(WaitFor(
      [&] {
        int64_t count = -1;
        Status st = WithEtcd([&](etcd::EtcdClient& c) -> Status {
          std::string k = std::string(kPrefix) + "/subnets/";
          WEFT_ASSIGN_OR_RETURN(auto r, c.Range(k, etcd::PrefixRangeEnd(k)));
          count = static_cast<int64_t>(r.kvs.size());
          return Status::Ok();
        });
        return st.ok() && count == 0;  // n1's lease expired too (weftd killed)
      },
      15000));
  overlay::LocalNode n3{"n3", *IpAddress::Parse("192.0.2.13"), "aa:bb:cc:00:00:13", overlay::Backend::kVxlan};
  ASSERT_TRUE(WithEtcd([&](etcd::EtcdClient& c) {
                return c.Put(agent::SubnetKey(kPrefix, *IpPrefix::Parse("10.244.200.0/24")),
                             agent::EncodeSubnetValue(n3));
              }).ok());

  // --- Diagnose (text, for people). ---
  Run text = Doctor(n1, false);
  std::cerr << "---- weftctl doctor ----\n" << text.out << text.err;
  EXPECT_EQ(text.code, 5);
  EXPECT_NE(text.out.find("PROBLEM [orphan-veth] link wftstray0000001"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("fixable with --fix"), std::string::npos) << text.out;

  // --- Diagnose (JSON, for scripts): every breakage named. ---
  Run before = Doctor(n1, true);
  EXPECT_EQ(before.code, 5);
  const json& fs = before.j["findings"];
  EXPECT_TRUE(Mentions(Kind(fs, "vanished-attachment"), cid_gone + "/eth0")) << fs.dump(2);
  EXPECT_TRUE(Mentions(Kind(fs, "orphan-veth"), veth_norow)) << fs.dump(2);
  EXPECT_TRUE(Mentions(Kind(fs, "orphan-veth"), "wftstray0000001")) << fs.dump(2);
  EXPECT_TRUE(Mentions(Kind(fs, "stale-host-route"), ip_norow + "/32")) << fs.dump(2);
  EXPECT_TRUE(Mentions(Kind(fs, "stale-host-route"), "10.99.0.5/32")) << fs.dump(2);
  EXPECT_EQ(Kind(fs, "ruleset-mismatch").size(), 2u) << fs.dump(2);
  EXPECT_TRUE(Mentions(Kind(fs, "ruleset-mismatch"), "hostPort ruleset (table inet " + hp_table + ")"))
      << fs.dump(2);
  EXPECT_TRUE(Mentions(Kind(fs, "ruleset-mismatch"), "masquerade ruleset (table inet " + masq_table + ")"))
      << fs.dump(2);
  auto stuck = Kind(fs, "stuck-attachment");
  ASSERT_EQ(stuck.size(), 1u) << fs.dump(2);
  EXPECT_FALSE(stuck[0]["fixable"].get<bool>());
  // n2's route, ARP, FDB and its three overlay filter admissions (address,
  // address . pod CIDR, address . its own address)
  EXPECT_EQ(Kind(fs, "peer-entry-stale").size(), 6u) << fs.dump(2);
  auto missing = Kind(fs, "peer-entry-missing");
  EXPECT_EQ(missing.size(), 6u) << fs.dump(2);                       // n3's route, ARP, FDB, admissions
  EXPECT_TRUE(Mentions(missing, "missing route to node n3's pod CIDR")) << fs.dump(2);
  EXPECT_TRUE(Mentions(missing, "missing overlay filter admission for node n3")) << fs.dump(2);
  auto pod_state = Kind(fs, "pod-state-missing");
  EXPECT_EQ(pod_state.size(), 2u) << fs.dump(2);
  EXPECT_TRUE(Mentions(pod_state, "host route " + ip_hp + "/32 dev " + veth_hp + " is missing")) << fs.dump(2);
  EXPECT_TRUE(Mentions(pod_state, "proxy ARP on " + veth_hp + " is missing")) << fs.dump(2);
  EXPECT_EQ(fs.size(), 22u) << fs.dump(2);

  // --- Repair. ---
  Run fixed = Doctor(n1, false, {"--fix"});
  std::cerr << "---- weftctl doctor --fix ----\n" << fixed.out << fixed.err;
  EXPECT_EQ(fixed.code, 5) << "the stuck attachment is left for the runtime";
  EXPECT_EQ(fixed.out.find("fix failed"), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("fixed: released attachment " + cid_gone + "/eth0"), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("fixed: deleted orphan link wftstray0000001"), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("fixed: applied weftd's reconciler plan: 12 of 12"), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("fixed: put back host route " + ip_hp + "/32 dev " + veth_hp), std::string::npos)
      << fixed.out;
  EXPECT_NE(fixed.out.find("fixed: put back proxy ARP on " + veth_hp), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("after --fix: 1 problem(s) remain\nREMAINS [stuck-attachment]"), std::string::npos)
      << fixed.out;
  Run left_run = Doctor(n1, true);
  EXPECT_EQ(left_run.code, 5);
  const json& left = left_run.j["findings"];
  ASSERT_EQ(left.size(), 1u) << left.dump(2);
  EXPECT_EQ(left[0]["kind"], "stuck-attachment");
  // The kernel and the database say so too.
  EXPECT_FALSE(n1.ns.HasLink("wftstray0000001"));
  EXPECT_FALSE(n1.ns.HasLink(veth_norow));
  EXPECT_EQ(Sqlite(n1, "SELECT count(*) FROM pods WHERE container_id='" + cid_gone + "'"), "0\n");
  std::string routes;
  n1.ns.Exec({"ip", "route", "show", "proto", "201"}, &routes);
  EXPECT_EQ(routes.find("10.99.0.5"), std::string::npos) << routes;
  EXPECT_NE(routes.find(ip_hp + " dev " + veth_hp), std::string::npos) << routes;
  auto agent_routes = n1.AgentRoutes();
  ASSERT_EQ(agent_routes.size(), 1u);
  EXPECT_EQ(agent_routes[0].rfind("10.244.200.0/24 via 10.244.200.0 dev weft.1", 0), 0u) << agent_routes[0];
  std::string rules;
  n1.ns.Exec({"nft", "list", "table", "inet", hp_table}, &rules);
  EXPECT_NE(rules.find("dnat"), std::string::npos) << rules;
  n1.ns.Exec({"nft", "list", "table", "inet", masq_table}, &rules);
  EXPECT_EQ(rules.find("weft-masq:stale"), std::string::npos) << rules;
  EXPECT_NE(rules.find("masquerade"), std::string::npos) << rules;

  // The runtime's DEL finishes the stuck attachment; then nothing is left.
  dels_[3]();
  Run after = Doctor(n1, false);
  EXPECT_EQ(after.code, 0) << after.out << after.err;
  EXPECT_NE(after.out.find("no discrepancies"), std::string::npos) << after.out;
  std::cerr << "---- weftctl doctor (after --fix and DEL) ----\n" << after.out;
}

TEST_F(DoctorTest, WithoutControlPlaneThePeerChecksAreSkippedWithANote) {
  WeftNode& n1 = AddNode("n1", 11);
  ASSERT_TRUE(WaitFor([&] { return !n1.PluginConf().empty(); }, 15000));
  std::string out, err;
  int code = Cmd({"ip", "netns", "exec", n1.ns.name(), BinaryPath("weftctl"), "--conf-dir", n1.conf_dir(), "doctor"},
                 &out, &err);
  EXPECT_EQ(code, 0) << out << err;
  EXPECT_NE(out.find("peer checks skipped: no control plane given"), std::string::npos) << out;
  // An unreachable control plane is not "clean": exit 1, local checks still run.
  code = Cmd({"ip", "netns", "exec", n1.ns.name(), BinaryPath("weftctl"), "--conf-dir", n1.conf_dir(), "doctor",
              "--etcd-endpoints", "http://192.0.2.250:2379", "--control-plane-timeout-ms", "1000"},
             &out, &err);
  EXPECT_EQ(code, 1) << out << err;
  EXPECT_NE(out.find("peer checks failed"), std::string::npos) << out;
}

}  // namespace
}  // namespace weft::testing
