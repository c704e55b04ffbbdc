// Bridge mode (seed 000) through the same checks as routed mode, plus the
// bridge-specific ones: racing bridge creation, hairpin, gateway, seed 000's
// conflist verbatim.
#include <sched.h>
#include <sys/mount.h>

#include <future>
#include <set>

#include "cni/version.h"
#include "plugin_fixture.h"

namespace weft::testing {
namespace {

class BridgeTest : public PluginTest {
 protected:
  json Bridge(const std::string& name) {
    auto l = node_->IpJson({"-d", "link", "show", "dev", name});
    return l.empty() ? json() : l[0];
  }
  std::vector<std::string> BridgeAddrs(const std::string& name) {
    std::vector<std::string> out;
    auto a = node_->IpJson({"addr", "show", "dev", name});
    if (a.empty()) return out;
    for (auto& i : a[0]["addr_info"])
      if (i["scope"] == "global") out.push_back(i["local"].get<std::string>() + "/" + std::to_string(i["prefixlen"].get<int>()));
    return out;
  }
};

TEST_F(BridgeTest, AddBuildsTheBridgeDatapath) {
  auto r = Add("c1", BridgeConf());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = r.Json();
  ASSERT_EQ(j["interfaces"].size(), 3u) << j.dump();
  EXPECT_EQ(j["interfaces"][0]["name"], "wbr0");
  std::string host_if = j["interfaces"][1]["name"];
  EXPECT_EQ(j["interfaces"][2]["name"], "eth0");
  EXPECT_EQ(j["interfaces"][2]["sandbox"], Pod("c1").path());
  // The gateway (first usable) is excluded from allocation and sits on the bridge.
  EXPECT_EQ(j["ips"][0]["address"], "10.244.2.2/24");
  EXPECT_EQ(j["ips"][0]["gateway"], "10.244.2.1");
  EXPECT_EQ(j["ips"][0]["interface"], 2);
  EXPECT_EQ(BridgeAddrs("wbr0"), std::vector<std::string>{"10.244.2.1/24"});
  // MTU on the bridge and both ends; the host end is a hairpin port of the bridge.
  EXPECT_EQ(Bridge("wbr0")["mtu"], 1450);
  json port = Bridge(host_if);
  EXPECT_EQ(port["mtu"], 1450);
  EXPECT_EQ(port["master"], "wbr0");
  EXPECT_EQ(port["linkinfo"]["info_slave_data"]["hairpin"], true) << port.dump();
  auto pod = Pod("c1").IpJson({"addr", "show", "dev", "eth0"});
  ASSERT_EQ(pod.size(), 1u);
  EXPECT_EQ(pod[0]["mtu"], 1450);
  bool def = false;
  for (auto& rt : Pod("c1").IpJson({"route", "show"}))
    if (rt["dst"] == "default" && rt.value("gateway", "") == "10.244.2.1") def = true;
  EXPECT_TRUE(def);
  // Traffic: pod to pod over the bridge, pod to gateway, node to pod.
  auto r2 = Add("c2", BridgeConf());
  ASSERT_EQ(r2.exit_code, 0) << r2.out;
  EXPECT_TRUE(Pod("c1").Ping(PodIp(r2)));
  EXPECT_TRUE(Pod("c2").Ping("10.244.2.1"));
  EXPECT_TRUE(node_->Ping(PodIp(r)));
}

TEST_F(BridgeTest, EveryResultVersionAddCheckDel) {
  int n = 0;
  for (const auto& v : cni::SupportedVersions()) {
    std::string cid = "v" + std::to_string(n++);
    auto add = Add(cid, BridgeConf(v));
    ASSERT_EQ(add.exit_code, 0) << v << ": " << add.out << add.err;
    json j = add.Json();
    EXPECT_EQ(j["cniVersion"], v);
    if (v == "0.1.0" || v == "0.2.0") {
      EXPECT_EQ(j["ip4"]["gateway"], "10.244.2.1") << v;
      EXPECT_EQ(j["ip4"]["ip"].get<std::string>().substr(j["ip4"]["ip"].get<std::string>().find('/')), "/24") << v;
    } else {
      EXPECT_EQ(j["interfaces"].size(), 3u) << v;
      EXPECT_EQ(j["ips"][0]["gateway"], "10.244.2.1") << v;
    }
    json check_conf = BridgeConf(v);
    check_conf["prevResult"] = j;
    auto check = Cni("CHECK", cid, Pod(cid).path(), check_conf);
    if (cni::AtLeast(v, "0.4.0")) {
      EXPECT_EQ(check.exit_code, 0) << v << ": " << check.out;
    } else {
      EXPECT_EQ(check.Json()["code"], 1) << v;
    }
    EXPECT_EQ(Cni("DEL", cid, Pod(cid).path(), check_conf).exit_code, 0) << v;
    EXPECT_FALSE(Pod(cid).HasLink("eth0")) << v;
  }
  ExpectNoPodsLeft();
}

TEST_F(BridgeTest, ParallelAddsRaceToCreateTheBridgeAndGateway) {
  constexpr int kPods = 24;
  for (int i = 0; i < kPods; ++i) Pod("p" + std::to_string(i));
  std::vector<std::future<PluginRun>> runs;
  for (int i = 0; i < kPods; ++i) {
    std::string cid = "p" + std::to_string(i);
    std::string path = Pod(cid).path();
    runs.push_back(std::async(std::launch::async, [this, cid, path] { return Cni("ADD", cid, path, BridgeConf()); }));
  }
  std::set<std::string> ips;
  for (auto& f : runs) {
    auto r = f.get();
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    ips.insert(PodIp(r));
  }
  EXPECT_EQ(ips.size(), static_cast<size_t>(kPods));
  EXPECT_EQ(ips.count("10.244.2.1"), 0u);
  EXPECT_EQ(BridgeAddrs("wbr0"), std::vector<std::string>{"10.244.2.1/24"});
  EXPECT_TRUE(Pod("p0").Ping(*ips.rbegin()));
  for (int i = 0; i < kPods; ++i) EXPECT_EQ(Cni("DEL", "p" + std::to_string(i), "", BridgeConf()).exit_code, 0);
  ExpectNoPodsLeft();
}

TEST_F(BridgeTest, DelTwiceKeepsTheBridgeForRemainingPods) {
  ASSERT_EQ(Add("a", BridgeConf()).exit_code, 0);
  auto b = Add("b", BridgeConf());
  ASSERT_EQ(b.exit_code, 0);
  EXPECT_EQ(Del("a", BridgeConf()).exit_code, 0);
  EXPECT_EQ(Del("a", BridgeConf()).exit_code, 0);
  EXPECT_EQ(Cni("DEL", "a", "", BridgeConf()).exit_code, 0);
  EXPECT_FALSE(Bridge("wbr0").is_null());
  EXPECT_TRUE(Pod("b").Ping("10.244.2.1"));
  EXPECT_TRUE(node_->Ping(PodIp(b)));
  EXPECT_EQ(Del("b", BridgeConf()).exit_code, 0);
  ExpectNoPodsLeft();
}

TEST_F(BridgeTest, BadInputGetsTheRightCodeAndLeavesNothing) {
  // A non-bridge link with the bridge's name: 106, nothing left.
  Cmd({"ip", "-n", node_->name(), "link", "add", "notbr", "type", "veth", "peer", "name", "notbr1"});
  auto taken = Add("bad", BridgeConf("1.1.0", {{"bridge", "notbr"}}));
  EXPECT_EQ(taken.Json()["code"], 106) << taken.out;
  EXPECT_NE(taken.Json().value("msg", "").find("not a bridge"), std::string::npos) << taken.out;
  EXPECT_FALSE(Pod("bad").HasLink("eth0"));
  ExpectNoPodsLeft();
  struct Case {
    json extra;
    int code;
  } cases[] = {{{{"bridge", "this-name-is-too-long"}}, 7},
               {{{"gateways", {"10.9.9.9"}}}, 7},
               {{{"mode", "bridges"}}, 7},
               {{{"ipam", {{"ranges", json::array()}}}}, 7},
               {{{"ipam", {{"type", "no-such-ipam"}}}}, 109}};
  for (const auto& c : cases) {
    auto r = Add("bad", BridgeConf("1.1.0", c.extra));
    EXPECT_EQ(r.Json()["code"], c.code) << c.extra.dump() << " -> " << r.out;
    EXPECT_FALSE(Pod("bad").HasLink("eth0")) << c.extra.dump();
  }
  // The interface name taken inside the pod: the allocation is rolled back.
  Cmd({"ip", "-n", Pod("taken").name(), "link", "add", "eth0", "type", "veth", "peer", "name", "x0"});
  EXPECT_EQ(Add("taken", BridgeConf()).Json()["code"], 106);
  ExpectNoPodsLeft();
}

TEST_F(BridgeTest, MasqueradeBothBackends) {
  TestNetns outside("outside");
  Cmd({"ip", "-n", node_->name(), "link", "set", "up1", "netns", outside.name()});
  Cmd({"ip", "-n", outside.name(), "addr", "add", "192.0.2.254/24", "dev", "up1"});
  Cmd({"ip", "-n", outside.name(), "link", "set", "up1", "up"});
  ASSERT_EQ(Add("n1", BridgeConf("1.1.0", {{"masquerade", true}})).exit_code, 0);
  EXPECT_TRUE(Pod("n1").Ping("192.0.2.254"));
  EXPECT_NE(NodeOut({"nft", "list", "table", "inet", "weft-weftnet"}).find("masquerade"), std::string::npos);
  json ipt = BridgeConf("1.1.0", {{"masquerade", true}, {"masqueradeBackend", "iptables"}, {"name", "iptnet"},
                                  {"bridge", "wbr1"}, {"ranges", {"10.245.0.0/24"}}});
  ASSERT_EQ(Add("i1", ipt).exit_code, 0);
  EXPECT_TRUE(Pod("i1").Ping("192.0.2.254"));
  EXPECT_NE(NodeOut({"iptables-save", "-t", "nat"}).find("-A POSTROUTING -s 10.245.0.0/24"), std::string::npos);
}

// Seed 000's conflist with only "type" changed, as libcni hands it to the
// plugin (name and cniVersion copied in). It uses the default dataDirs of
// weft and host-local, so the test gives the plugin a private /var/lib.
class SeedZeroTest : public BridgeTest {
 protected:
  void SetUp() override {
    BridgeTest::SetUp();
    ASSERT_EQ(::unshare(CLONE_NEWNS), 0);
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
    ASSERT_EQ(::mount("tmpfs", "/var/lib", "tmpfs", 0, "size=64m"), 0);
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2("/var/lib", MNT_DETACH);
    BridgeTest::TearDown();
  }
  bool mounted_ = false;
};

TEST_F(SeedZeroTest, ConflistWorksVerbatim) {
  json conflist = json::parse(R"({
  "cniVersion": "1.0.0",
  "name": "custom-bridge",
  "plugins": [
    {
      "type": "weft",
      "bridge": "cnibr0",
      "mtu": 1450,
      "masquerade": true,
      "masqueradeBackend": "iptables",
      "ipam": {
        "type": "host-local",
        "routes": [
          { "dst": "0.0.0.0/0" }
        ],
        "ranges": [
          [{ "subnet": "10.88.0.0/24" }]
        ]
      }
    }
  ]
})");
  json conf = conflist["plugins"][0];
  conf["name"] = conflist["name"];
  conf["cniVersion"] = conflist["cniVersion"];
  auto r = Add("seed", conf);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = r.Json();
  EXPECT_EQ(j["ips"][0]["address"], "10.88.0.2/24") << j.dump();
  EXPECT_EQ(j["ips"][0]["gateway"], "10.88.0.1");
  EXPECT_EQ(BridgeAddrs("cnibr0"), std::vector<std::string>{"10.88.0.1/24"});
  EXPECT_EQ(Bridge("cnibr0")["mtu"], 1450);
  EXPECT_TRUE(Pod("seed").Ping("10.88.0.1"));
  EXPECT_TRUE(node_->Ping("10.88.0.2"));
  EXPECT_NE(NodeOut({"iptables-save", "-t", "nat"}).find("-A POSTROUTING -s 10.88.0.0/24"), std::string::npos);
  EXPECT_TRUE((::access("/var/lib/cni/networks/custom-bridge/10.88.0.2", F_OK) == 0));
  json check = conf;
  check["prevResult"] = j;
  auto c = Cni("CHECK", "seed", Pod("seed").path(), check);
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_EQ(Del("seed", check).exit_code, 0);
  EXPECT_EQ(Del("seed", check).exit_code, 0);
  EXPECT_FALSE((::access("/var/lib/cni/networks/custom-bridge/10.88.0.2", F_OK) == 0));
  EXPECT_TRUE(HostVeths().empty());
}

}  // namespace
}  // namespace weft::testing
