// hostPorts (the portMappings capability): reachable from another host, from
// the node (its own address and localhost) and from the pod itself; both key
// spellings; conflicts; DEL removing the rules; both firewall backends.
#include <fstream>

#include "base/strings.h"
#include "plugin_fixture.h"

namespace weft::testing {
namespace {

class HostPortTest : public PluginTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    // An "outside" host on the node's uplink.
    outside_ = std::make_unique<TestNetns>("outside");
    Cmd({"ip", "-n", node_->name(), "link", "set", "up1", "netns", outside_->name()});
    Cmd({"ip", "-n", outside_->name(), "addr", "add", "192.0.2.254/24", "dev", "up1"});
    Cmd({"ip", "-n", outside_->name(), "link", "set", "up1", "up"});
  }
  void TearDown() override {
    outside_.reset();
    PluginTest::TearDown();
  }
  json MapConf(const json& mappings, json extra = json::object()) {
    json c = Conf("1.1.0", {{"masqueradeBackend", GetParam()},
                            {"capabilities", {{"portMappings", true}}},
                            {"runtimeConfig", {{"portMappings", mappings}}}});
    for (auto& [k, v] : extra.items()) c[k] = v;
    return c;
  }
  // The firewall state weft owns on the node, as text.
  std::string Ruleset() {
    if (GetParam() == "iptables") {
      std::string all = NodeOut({"iptables-save"});
      std::string ours;
      for (size_t p = 0, e; p < all.size(); p = e + 1) {
        e = all.find('\n', p);
        if (e == std::string::npos) e = all.size();
        std::string l = all.substr(p, e - p);
        if (l.find("WEFT-HP") != std::string::npos) ours += l + "\n";
      }
      return ours;
    }
    // The hostPort tables: the source guard's (each pod's port has a chain
    // there) is not the hostPorts' work.
    std::string out;
    const std::string tables = NodeOut({"nft", "list", "tables"});
    for (std::string_view t : Split(tables, '\n'))
      if (t.find(" weft-hp-") != std::string::npos)
        out += NodeOut({"nft", "list", "table", "inet", std::string(t.substr(t.rfind(' ') + 1))});
    return out;
  }
  // The nftables table of the test's dataDir.
  std::string HostPortTable() {
    std::string tables = NodeOut({"nft", "list", "tables"});
    size_t p = tables.find("weft-hp-");
    EXPECT_NE(p, std::string::npos) << tables;
    return p == std::string::npos ? "" : tables.substr(p, tables.find('\n', p) - p);
  }
  PluginRun AddNamed(const std::string& cid, const json& conf) {
    return Cni("ADD", cid, Pod(cid).path(), conf, "eth0", {{"CNI_ARGS", "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + cid}});
  }
  std::unique_ptr<TestNetns> outside_;
};

TEST_P(HostPortTest, ReachableFromOutsideTheNodeLocalhostAndItself) {
  json lower = json::array({{{"hostPort", 8080}, {"containerPort", 80}, {"protocol", "tcp"}}});
  auto a = AddNamed("web", MapConf(lower));
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  PongServer srv(Pod("web"), 80);
  ASSERT_TRUE(Pong(Pod("web"), PodIp(a), 80));
  EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 8080)) << Ruleset();
  EXPECT_TRUE(Pong(*node_, "192.0.2.10", 8080));
  EXPECT_TRUE(Pong(*node_, "127.0.0.1", 8080));
  EXPECT_TRUE(Pong(Pod("web"), "192.0.2.10", 8080));  // hairpin
  // containerd's capitalised spelling, and a hostIP-specific mapping.
  json upper = json::array({{{"HostPort", 9090}, {"ContainerPort", 90}, {"Protocol", "TCP"}, {"HostIP", "192.0.2.10"}}});
  auto b = AddNamed("api", MapConf(upper));
  ASSERT_EQ(b.exit_code, 0) << b.out;
  PongServer srv2(Pod("api"), 90);
  EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 9090));
  EXPECT_TRUE(Pong(Pod("web"), "192.0.2.10", 9090));  // pod to another pod's hostPort
  EXPECT_EQ(DbPortMappings(), 2u);
  // A pod without mappings does no firewall work: the ruleset is untouched.
  std::string before = Ruleset();
  ASSERT_EQ(Add("plain", Conf("1.1.0", {{"masqueradeBackend", GetParam()}})).exit_code, 0);
  EXPECT_EQ(Ruleset(), before);
  // DEL removes that pod's rules only; the last DEL removes everything.
  ASSERT_EQ(Del("web", MapConf(lower)).exit_code, 0);
  EXPECT_FALSE(Pong(*outside_, "192.0.2.10", 8080));
  EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 9090));
  ASSERT_EQ(Del("api", MapConf(upper)).exit_code, 0);
  EXPECT_EQ(Del("api", MapConf(upper)).exit_code, 0);
  EXPECT_EQ(Ruleset(), "") << Ruleset();
  EXPECT_EQ(DbPortMappings(), 0u);
}

TEST_P(HostPortTest, ConflictNamesTheOwnerAndChangesNothing) {
  json m = json::array({{{"hostPort", 8080}, {"containerPort", 80}}});
  ASSERT_EQ(AddNamed("first", MapConf(m)).exit_code, 0);
  std::string rules = Ruleset();
  size_t rows = DbRows();
  auto second = AddNamed("second", MapConf(json::array({{{"HostPort", 8080}, {"ContainerPort", 81}, {"HostIP", "192.0.2.10"}}})));
  EXPECT_EQ(second.Json()["code"], 105) << second.out;
  EXPECT_NE(second.Json().value("msg", "").find("default/first"), std::string::npos) << second.out;
  EXPECT_FALSE(Pod("second").HasLink("eth0"));
  EXPECT_EQ(HostVeths().size(), 1u);
  EXPECT_EQ(DbRows(), rows);
  EXPECT_EQ(DbPortMappings(), 1u);
  EXPECT_EQ(Ruleset(), rules);
  // Other ports and the other protocol are free.
  EXPECT_EQ(AddNamed("udp", MapConf(json::array({{{"hostPort", 8080}, {"containerPort", 53}, {"protocol", "udp"}}})))
                .exit_code,
            0);
  EXPECT_EQ(DbPortMappings(), 2u);
}

TEST_P(HostPortTest, BridgeModePodsReachEachOthersHostPorts) {
  json m = json::array({{{"hostPort", 7070}, {"containerPort", 70}}});
  auto a = AddNamed("b1", MapConf(m, {{"mode", "bridge"}, {"bridge", "wbr0"}}));
  ASSERT_EQ(a.exit_code, 0) << a.out;
  ASSERT_EQ(AddNamed("b2", MapConf(json::array(), {{"mode", "bridge"}, {"bridge", "wbr0"}})).exit_code, 0);
  PongServer srv(Pod("b1"), 70);
  EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 7070));
  EXPECT_TRUE(Pong(*node_, "127.0.0.1", 7070));
  EXPECT_TRUE(Pong(Pod("b2"), "192.0.2.10", 7070));  // a bridge neighbour: needs the hairpin SNAT
  EXPECT_TRUE(Pong(Pod("b1"), "192.0.2.10", 7070));  // itself, through the hairpin port
}

TEST_P(HostPortTest, RulesAreRepairedFromTheDatabase) {
  json m = json::array({{{"hostPort", 6060}, {"containerPort", 60}}});
  auto r1 = AddNamed("r1", MapConf(m));
  ASSERT_EQ(r1.exit_code, 0);
  PongServer srv(Pod("r1"), 60);
  ASSERT_TRUE(Pong(*outside_, "192.0.2.10", 6060));
  json check = MapConf(m);
  check["prevResult"] = r1.Json();
  if (GetParam() == "iptables") {
    // The chains are rebuilt whole by every sync: someone flushes them, the
    // next ADD with mappings restores every mapping in the database.
    std::string save = NodeOut({"iptables-save", "-t", "nat"});
    for (size_t p = save.find(":WEFT-HP-"); p != std::string::npos; p = save.find(":WEFT-HP-", p + 1)) {
      std::string chain = save.substr(p + 1, save.find(' ', p) - p - 1);
      Cmd({"ip", "netns", "exec", node_->name(), "iptables", "-t", "nat", "-F", chain});
    }
    EXPECT_FALSE(Pong(*outside_, "192.0.2.10", 6060));
    ASSERT_EQ(AddNamed("r2", MapConf(json::array({{{"hostPort", 6061}, {"containerPort", 60}}}))).exit_code, 0);
    EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 6060));
    return;
  }
  // nftables: an ADD touches only its own entries, so drift waits for
  // CHECK (which names it) and GC (which repairs it).
  const std::string table = HostPortTable();
  Cmd({"ip", "netns", "exec", node_->name(), "nft", "delete", "element", "inet", table, "hp4", "{ tcp . 6060 }"});
  EXPECT_FALSE(Pong(*outside_, "192.0.2.10", 6060));
  auto r2 = AddNamed("r2", MapConf(json::array({{{"hostPort", 6061}, {"containerPort", 60}}})));
  ASSERT_EQ(r2.exit_code, 0);
  EXPECT_FALSE(Pong(*outside_, "192.0.2.10", 6060)) << "an ADD repaired another pod's entry";
  auto bad = Cni("CHECK", "r1", Pod("r1").path(), check);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("lacks element(s) hp4 06000000.17ac0000"), std::string::npos) << bad.out;
  json gc = MapConf(m);
  gc["cni.dev/valid-attachments"] = {{{"containerID", "r1"}, {"ifname", "eth0"}},
                                     {{"containerID", "r2"}, {"ifname", "eth0"}}};
  auto g = Cni("GC", "", "", gc);
  ASSERT_EQ(g.exit_code, 0) << g.out;
  EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 6060));
  EXPECT_EQ(Cni("CHECK", "r1", Pod("r1").path(), check).exit_code, 0);
  // The table's rules flushed: CHECK says so, GC rebuilds the table whole.
  Cmd({"ip", "netns", "exec", node_->name(), "nft", "flush", "chain", "inet", table, "hostports"});
  EXPECT_FALSE(Pong(*outside_, "192.0.2.10", 6060));
  bad = Cni("CHECK", "r1", Pod("r1").path(), check);
  EXPECT_NE(bad.out.find("rules differ from weft's"), std::string::npos) << bad.out;
  ASSERT_EQ(Cni("GC", "", "", gc).exit_code, 0);
  EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 6060));
  EXPECT_EQ(Cni("CHECK", "r1", Pod("r1").path(), check).exit_code, 0);
}

// ADD and DEL on a node with 1000 other mappings change only their own
// entries; GC removes entries no attachment wants.
TEST_P(HostPortTest, AddAndDelTouchOnlyTheirOwnEntries) {
  if (GetParam() == "iptables") GTEST_SKIP() << "iptables rebuilds its chains whole on every ADD and DEL";
  json m = json::array({{{"hostPort", 5050}, {"containerPort", 50}}});
  ASSERT_EQ(AddNamed("first", MapConf(m)).exit_code, 0);
  const std::string table = HostPortTable();
  // 1000 entries the database knows nothing of: any full sync would delete
  // them, so they show whether an ADD or DEL looked past its own.
  std::string script;
  for (int i = 0; i < 1000; ++i)
    script += "add element inet " + table + " hp4 { tcp . " + std::to_string(20000 + i) + " : 10.99." +
              std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) + " . 80 }\n";
  const std::string file = TempDir("hp") + "/strangers.nft";
  { std::ofstream(file) << script; }
  ASSERT_EQ(node_->Exec({"nft", "-f", file}), 0);
  RemoveTree(file.substr(0, file.rfind('/')));
  auto count = [&] {
    std::string out = NodeOut({"nft", "list", "map", "inet", table, "hp4"});
    size_t n = 0;  // "tcp . 5051 : 10.x.y.z . 50" (the type line has no "tcp . ")
    for (size_t p = out.find("tcp . "); p != std::string::npos; p = out.find("tcp . ", p + 1)) ++n;
    return n;
  };
  ASSERT_EQ(count(), 1001u);
  auto a = AddNamed("second", MapConf(json::array({{{"hostPort", 5051}, {"containerPort", 50}}})));
  ASSERT_EQ(a.exit_code, 0) << a.out;
  EXPECT_EQ(count(), 1002u);
  PongServer srv(Pod("second"), 50);
  EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 5051));
  // DEL of one pod leaves the others (and the strangers).
  ASSERT_EQ(Del("first", MapConf(m)).exit_code, 0);
  EXPECT_EQ(count(), 1001u);
  EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 5051));
  // GC: the 1000 stale entries go, the live one stays.
  json gc = MapConf(m);
  gc["cni.dev/valid-attachments"] = {{{"containerID", "second"}, {"ifname", "eth0"}}};
  ASSERT_EQ(Cni("GC", "", "", gc).exit_code, 0);
  EXPECT_EQ(count(), 1u);
  EXPECT_TRUE(Pong(*outside_, "192.0.2.10", 5051));
  // The last DEL removes the table.
  ASSERT_EQ(Del("second", MapConf(m)).exit_code, 0);
  EXPECT_EQ(Ruleset(), "");
}

INSTANTIATE_TEST_SUITE_P(Backends, HostPortTest, ::testing::Values("nftables", "iptables"));

}  // namespace
}  // namespace weft::testing
