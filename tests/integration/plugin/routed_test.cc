// The weft plugin in routed mode, exec'd as a runtime would, inside a node
// netns the test creates; each pod is its own netns.
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <set>

#include "cni/version.h"
#include "plugin_fixture.h"

namespace weft::testing {
namespace {

class RoutedTest : public PluginTest {
 protected:
  // Host routes weft made (proto 201), besides the fixture's host veths and
  // database rows.
  int WeftRoutes() {
    int n = 0;
    for (auto& r : node_->IpJson({"route", "show", "proto", "201"})) (void)r, ++n;
    return n;
  }
  void ExpectNothingLeft() {
    ExpectNoPodsLeft();
    EXPECT_EQ(WeftRoutes(), 0);
  }
};

TEST_F(RoutedTest, AddBuildsTheCalicoStyleDatapath) {
  auto r = Add("c1", Conf());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = r.Json();
  EXPECT_EQ(j["cniVersion"], "1.1.0");
  ASSERT_EQ(j["interfaces"].size(), 2u);
  std::string host_if = j["interfaces"][0]["name"];
  EXPECT_EQ(host_if.rfind("wft", 0), 0u);
  EXPECT_EQ(j["interfaces"][1]["name"], "eth0");
  EXPECT_EQ(j["interfaces"][1]["sandbox"], Pod("c1").path());
  EXPECT_EQ(j["interfaces"][1]["mtu"], 1450);
  EXPECT_EQ(j["ips"][0]["address"], "10.244.2.1/32");
  EXPECT_EQ(j["ips"][0]["gateway"], "169.254.1.1");
  EXPECT_EQ(j["ips"][0]["interface"], 1);

  // Pod side: /32, scope-link route to the gateway, default via it, MTU.
  auto addrs = Pod("c1").IpJson({"addr", "show", "dev", "eth0"});
  ASSERT_EQ(addrs.size(), 1u);
  EXPECT_EQ(addrs[0]["mtu"], 1450);
  bool has32 = false;
  for (auto& a : addrs[0]["addr_info"])
    if (a["local"] == "10.244.2.1" && a["prefixlen"] == 32) has32 = true;
  EXPECT_TRUE(has32);
  auto routes = Pod("c1").IpJson({"route", "show"});
  bool gw = false, def = false;
  for (auto& rt : routes) {
    if (rt["dst"] == "169.254.1.1" && rt.value("scope", "") == "link") gw = true;
    if (rt["dst"] == "default" && rt.value("gateway", "") == "169.254.1.1") def = true;
  }
  EXPECT_TRUE(gw);
  EXPECT_TRUE(def);
  // docs/security.md: the gateway is not an address of the node (it answers
  // by proxy ARP), so a pod cannot reach the node's services through it.
  auto node_addrs = node_->IpJson({"addr", "show"});
  ASSERT_FALSE(node_addrs.empty());
  EXPECT_EQ(node_addrs.dump().find("\"169.254.1.1\""), std::string::npos) << node_addrs.dump();
  // Host side: no address at all (an IPv4-only pod: IPv6 is off on the host
  // end, so not even a link-local one), proxy ARP on, a /32 route to the pod.
  auto host_addrs = node_->IpJson({"addr", "show", "dev", host_if});
  ASSERT_EQ(host_addrs.size(), 1u);
  EXPECT_EQ(host_addrs[0]["addr_info"].size(), 0u) << host_addrs.dump();
  std::string v6off;
  node_->Exec({"cat", "/proc/sys/net/ipv6/conf/" + host_if + "/disable_ipv6"}, &v6off);
  EXPECT_EQ(v6off, "1\n");
  std::string proxy;
  node_->Exec({"cat", "/proc/sys/net/ipv4/conf/" + host_if + "/proxy_arp"}, &proxy);
  EXPECT_EQ(proxy, "1\n");
  auto hr = node_->IpJson({"route", "show", "10.244.2.1/32"});
  ASSERT_EQ(hr.size(), 1u);
  EXPECT_EQ(hr[0]["dev"], host_if);
}

TEST_F(RoutedTest, EveryResultVersionAddCheckDel) {
  int n = 0;
  for (const auto& v : cni::SupportedVersions()) {
    std::string cid = "v" + std::to_string(n++);
    auto add = Add(cid, Conf(v));
    ASSERT_EQ(add.exit_code, 0) << v << ": " << add.out << add.err;
    json j = add.Json();
    EXPECT_EQ(j["cniVersion"], v);
    if (v == "0.1.0" || v == "0.2.0") {
      EXPECT_TRUE(j.contains("ip4")) << v;
      EXPECT_FALSE(j.contains("ips")) << v;
    } else if (cni::VersionLess(v, "1.0.0")) {
      EXPECT_EQ(j["ips"][0]["version"], "4") << v;
    } else {
      EXPECT_FALSE(j["ips"][0].contains("version")) << v;
    }
    EXPECT_EQ(j["interfaces"].is_array() && j["interfaces"][1].contains("mtu"), v == "1.1.0") << v;

    json check_conf = Conf(v);
    check_conf["prevResult"] = j;
    auto check = Cni("CHECK", cid, Pod(cid).path(), check_conf);
    if (cni::AtLeast(v, "0.4.0")) {
      EXPECT_EQ(check.exit_code, 0) << v << ": " << check.out;
    } else {
      EXPECT_NE(check.exit_code, 0) << v;
      EXPECT_EQ(check.Json()["code"], 1) << v;
    }
    auto del = Cni("DEL", cid, Pod(cid).path(), check_conf);
    EXPECT_EQ(del.exit_code, 0) << v << ": " << del.out;
    EXPECT_FALSE(Pod(cid).HasLink("eth0")) << v;
  }
  ExpectNothingLeft();
}

TEST_F(RoutedTest, DelIsIdempotentAndWorksWithoutNetns) {
  ASSERT_EQ(Add("c1", Conf()).exit_code, 0);
  ASSERT_EQ(Add("c2", Conf()).exit_code, 0);
  // c1: DEL twice with the netns.
  EXPECT_EQ(Cni("DEL", "c1", Pod("c1").path(), Conf()).exit_code, 0);
  EXPECT_EQ(Cni("DEL", "c1", Pod("c1").path(), Conf()).exit_code, 0);
  // c2: the netns is gone (containerd's second DEL): DEL still frees the IP.
  pods_.erase("c2");
  auto d = Cni("DEL", "c2", "", Conf());
  EXPECT_EQ(d.exit_code, 0) << d.out;
  EXPECT_EQ(Cni("DEL", "c2", "", Conf()).exit_code, 0);
  // A container weft never saw, and an empty prevResult, are success too.
  json empty_prev = Conf();
  empty_prev["prevResult"] = json::object();
  EXPECT_EQ(Cni("DEL", "never-added", "/run/netns/does-not-exist", empty_prev).exit_code, 0);
  ExpectNothingLeft();
}

TEST_F(RoutedTest, FiftyParallelAddsGetUniqueAddresses) {
  constexpr int kPods = 50;
  for (int i = 0; i < kPods; ++i) Pod("p" + std::to_string(i));
  std::vector<std::future<PluginRun>> runs;
  for (int i = 0; i < kPods; ++i) {
    std::string cid = "p" + std::to_string(i);
    std::string path = Pod(cid).path();
    runs.push_back(std::async(std::launch::async, [this, cid, path] { return Cni("ADD", cid, path, Conf()); }));
  }
  std::set<std::string> ips;
  for (auto& f : runs) {
    auto r = f.get();
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    ips.insert(PodIp(r));
  }
  EXPECT_EQ(ips.size(), static_cast<size_t>(kPods));
  EXPECT_EQ(HostVeths().size(), static_cast<size_t>(kPods));
  EXPECT_EQ(DbRows(), static_cast<size_t>(kPods));
  for (int i = 0; i < kPods; ++i)
    EXPECT_EQ(Cni("DEL", "p" + std::to_string(i), "", Conf()).exit_code, 0);
  ExpectNothingLeft();
}

TEST_F(RoutedTest, PodToPodAndNodeToPodTraffic) {
  auto a = Add("a", Conf());
  auto b = Add("b", Conf());
  ASSERT_EQ(a.exit_code, 0);
  ASSERT_EQ(b.exit_code, 0);
  EXPECT_TRUE(Pod("a").Ping(PodIp(b)));
  EXPECT_TRUE(Pod("b").Ping(PodIp(a)));
  EXPECT_TRUE(node_->Ping(PodIp(a)));
  EXPECT_TRUE(node_->Ping(PodIp(b)));
  // After DEL the address is unreachable.
  ASSERT_EQ(Cni("DEL", "b", Pod("b").path(), Conf()).exit_code, 0);
  EXPECT_FALSE(Pod("a").Ping(PodIp(b)));
}

TEST_F(RoutedTest, GcKeepsListedAttachmentsAndReclaimsTheRest) {
  for (const char* c : {"keep1", "keep2", "gone1", "gone2"}) ASSERT_EQ(Add(c, Conf()).exit_code, 0);
  json gc = Conf();
  gc["cni.dev/valid-attachments"] = {{{"containerID", "keep1"}, {"ifname", "eth0"}},
                                     {{"containerID", "keep2"}, {"ifname", "eth0"}}};
  auto r = Cni("GC", "", "", gc);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Pod("keep1").HasLink("eth0"));
  EXPECT_TRUE(Pod("keep2").HasLink("eth0"));
  EXPECT_FALSE(Pod("gone1").HasLink("eth0"));
  EXPECT_FALSE(Pod("gone2").HasLink("eth0"));
  EXPECT_EQ(HostVeths().size(), 2u);
  EXPECT_EQ(DbRows(), 2u);
  // The older key works too; an empty list reclaims everything.
  json gc_old = Conf();
  gc_old["cni.dev/attachments"] = json::array();
  EXPECT_EQ(Cni("GC", "", "", gc_old).exit_code, 0);
  ExpectNothingLeft();
  // GC needs 1.1.0.
  EXPECT_EQ(Cni("GC", "", "", Conf("1.0.0")).Json()["code"], 1);
}

// A logFile inside directories that do not exist yet (the plugin's own
// dataDir on a new node) is created on the first ADD; its lines are logfmt
// with the call's context and each field once.
TEST_F(RoutedTest, LogFileInANewDirectoryIsCreatedOnFirstAdd) {
  const std::string log = data_dir_ + "/logs/new/weft.log";
  json conf = Conf("1.1.0", {{"logFile", log}, {"logLevel", "debug"}});
  auto r = Add("l1", conf);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("cannot open logFile"), std::string::npos) << r.err;
  ASSERT_EQ(Del("l1", conf).exit_code, 0);
  std::ifstream in(log);
  ASSERT_TRUE(in.good()) << log << " was not created";
  std::string line;
  int attached = 0, timings = 0;
  while (std::getline(in, line)) {
    EXPECT_EQ(line.find("msg=\"msg="), std::string::npos) << line;
    EXPECT_NE(line.find(" cmd="), std::string::npos) << line;
    EXPECT_NE(line.find(" cid=l1 "), std::string::npos) << line;
    if (line.find(" msg=attached ") != std::string::npos) {
      ++attached;
      EXPECT_NE(line.find(" ip=10.244.2."), std::string::npos) << line;
    }
    if (line.find(" msg=\"phase timing\" op=") != std::string::npos) {
      ++timings;
      EXPECT_NE(line.find(" total_ms="), std::string::npos) << line;
    }
  }
  EXPECT_EQ(attached, 1);
  EXPECT_EQ(timings, 2);  // ADD and DEL
}

TEST_F(RoutedTest, StatusReportsExhaustion) {
  json small = Conf("1.1.0", {{"ranges", {"10.99.0.0/30"}}});  // 2 usable addresses
  EXPECT_EQ(Cni("STATUS", "", "", small).exit_code, 0);
  ASSERT_EQ(Add("s1", small).exit_code, 0);
  ASSERT_EQ(Add("s2", small).exit_code, 0);
  auto st = Cni("STATUS", "", "", small);
  EXPECT_NE(st.exit_code, 0);
  EXPECT_EQ(st.Json()["code"], 50);
  EXPECT_EQ(Cni("STATUS", "", "", Conf("1.0.0")).Json()["code"], 1);
  // Exhaustion on ADD: code 100, and the failed ADD leaves nothing.
  auto full = Add("s3", small);
  EXPECT_EQ(full.Json()["code"], 100) << full.out;
  EXPECT_FALSE(Pod("s3").HasLink("eth0"));
  EXPECT_EQ(HostVeths().size(), 2u);
  EXPECT_EQ(DbRows(), 2u);
}

TEST_F(RoutedTest, MasqueradeIsOneNodeWideRulePerBackend) {
  json conf = Conf("1.1.0", {{"masquerade", true}, {"clusterCIDRs", {"10.244.0.0/16"}}});
  for (const char* c : {"m1", "m2", "m3"}) ASSERT_EQ(Add(c, conf).exit_code, 0);
  std::string rules;
  node_->Exec({"nft", "list", "table", "inet", "weft-weftnet"}, &rules);
  size_t count = 0;
  for (size_t p = rules.find("masquerade"); p != std::string::npos; p = rules.find("masquerade", p + 1)) ++count;
  EXPECT_EQ(count, 1u) << rules;
  EXPECT_NE(rules.find("10.244.0.0/16"), std::string::npos) << rules;

  json ipt = Conf("1.1.0", {{"masquerade", true}, {"masqueradeBackend", "iptables"}, {"name", "iptnet"}});
  for (const char* c : {"i1", "i2"}) ASSERT_EQ(Add(c, ipt).exit_code, 0);
  std::string save;
  node_->Exec({"iptables-save", "-t", "nat"}, &save);
  size_t jumps = 0;
  for (size_t p = save.find("-A POSTROUTING -s 10.244.2.0/24"); p != std::string::npos;
       p = save.find("-A POSTROUTING -s 10.244.2.0/24", p + 1))
    ++jumps;
  EXPECT_EQ(jumps, 1u) << save;
  EXPECT_NE(save.find("-j MASQUERADE"), std::string::npos) << save;
}

TEST_F(RoutedTest, MasqueradedTrafficLeavesWithTheNodeAddress) {
  // An "outside" host on the node's uplink peer, in its own netns.
  TestNetns outside("outside");
  Cmd({"ip", "-n", node_->name(), "link", "set", "up1", "netns", outside.name()});
  Cmd({"ip", "-n", outside.name(), "addr", "add", "192.0.2.254/24", "dev", "up1"});
  Cmd({"ip", "-n", outside.name(), "link", "set", "up1", "up"});
  json conf = Conf("1.1.0", {{"masquerade", true}});
  ASSERT_EQ(Add("m1", conf).exit_code, 0);
  // The outside host has no route to 10.244.2.0/24: a reply only comes
  // back when the source was rewritten to the node's 192.0.2.10.
  EXPECT_TRUE(Pod("m1").Ping("192.0.2.254"));
  json plain = Conf("1.1.0", {{"name", "plain"}, {"dataDir", data_dir_ + "/plain"}, {"ranges", {"10.245.0.0/24"}}});
  ASSERT_EQ(Add("n1", plain).exit_code, 0);
  EXPECT_FALSE(Pod("n1").Ping("192.0.2.254"));
}

TEST_F(RoutedTest, BadInputGetsTheRightCodeAndLeavesNothing) {
  Pod("bad");
  struct Case {
    std::string what;
    std::map<std::string, std::string> env_override;  // "" value = unset
    std::string stdin_data;
    int code;
  };
  std::string good = Conf().dump();
  std::vector<Case> cases = {
      {"no CNI_COMMAND", {{"CNI_COMMAND", ""}}, good, 4},
      {"unknown command", {{"CNI_COMMAND", "FROB"}}, good, 4},
      {"bad container id", {{"CNI_CONTAINERID", "../etc"}}, good, 4},
      {"ifname too long", {{"CNI_IFNAME", "0123456789abcdef"}}, good, 4},
      {"ifname with slash", {{"CNI_IFNAME", "a/b"}}, good, 4},
      {"ifname dotdot", {{"CNI_IFNAME", ".."}}, good, 4},
      {"no netns", {{"CNI_NETNS", ""}}, good, 4},
      {"no CNI_PATH", {{"CNI_PATH", ""}}, good, 4},
      {"unknown CNI_ARGS", {{"CNI_ARGS", "FOO=bar"}}, good, 4},
      {"malformed CNI_ARGS", {{"CNI_ARGS", "K8S_POD_NAME"}}, good, 4},
      {"netns missing", {{"CNI_NETNS", "/run/netns/" + Prefix() + "-nope"}}, good, 3},
      {"netns not a netns", {{"CNI_NETNS", "/proc/self/ns/uts"}}, good, 4},
      {"not JSON", {}, "{nope", 6},
      {"not an object", {}, "[1,2]", 6},
      {"unsupported version", {}, Conf("0.9.9").dump(), 1},
      {"no name", {}, json({{"cniVersion", "1.0.0"}, {"type", "weft"}, {"ranges", {"10.0.0.0/24"}}}).dump(), 7},
      {"bad CIDR", {}, Conf("1.1.0", {{"ranges", {"10.0.0.0/40"}}}).dump(), 7},
      {"unknown mode", {}, Conf("1.1.0", {{"mode", "tunnel"}}).dump(), 7},
      {"mtu out of range", {}, Conf("1.1.0", {{"mtu", 20}}).dump(), 7},
      {"bad prevResult", {}, Conf("1.1.0", {{"prevResult", "x"}}).dump(), 7},
      {"bad runtimeConfig", {}, Conf("1.1.0", {{"runtimeConfig", 5}}).dump(), 7},
      // Bytes and sizes (issue 35): each refused before the netns is opened,
      // so a result that could not carry them is never owed.
      {"ifname not UTF-8", {{"CNI_IFNAME", "eth\xff"}}, good, 4},
      {"ifname not ASCII", {{"CNI_IFNAME", "eth\xc3\xa9"}}, good, 4},
      {"CNI_ARGS not UTF-8", {{"CNI_ARGS", "K8S_POD_NAME=\xfe"}}, good, 4},
      {"name not UTF-8", {}, Conf().dump().replace(Conf().dump().find("weftnet"), 7, "weft\xffnet"), 6},
      {"stdin over 1 MiB", {}, Conf("1.1.0", {{"pad", std::string(1 << 20, 'x')}}).dump(), 6},
      {"nested 100 deep", {}, Conf().dump().replace(1, 0, "\"x\":" + std::string(100, '[') + std::string(100, ']') + ","), 6},
      {"shell metacharacters in name", {}, Conf("1.1.0", {{"name", "x; rm -rf /"}}).dump(), 7},
      {"newline in name", {}, Conf("1.1.0", {{"name", "x\ny"}}).dump(), 7},
      {"logFile with ..", {}, Conf("1.1.0", {{"logFile", "/var/log/../../tmp/weft.log"}}).dump(), 7},
      {"link-local range", {}, Conf("1.1.0", {{"ranges", {"169.254.1.0/24"}}}).dump(), 7},
      {"IPv4-mapped range beside its IPv4", {}, Conf("1.1.0", {{"ranges", {"10.244.2.0/24", "::ffff:10.244.2.0/120"}}}).dump(), 7},
      {"IPv6 with mtu 1200", {}, Conf("1.1.0", {{"ranges", {"fd00:1::/64"}}, {"mtu", 1200}}).dump(), 7},
  };
  for (const auto& c : cases) {
    auto env = CniEnv("ADD", "bad", Pod("bad").path());
    for (const auto& [k, v] : c.env_override) {
      if (v.empty()) env.erase(k);
      else env[k] = v;
    }
    auto r = RunPlugin(BinaryPath("weft"), *node_, env, c.stdin_data);
    EXPECT_NE(r.exit_code, 0) << c.what;
    json j = r.Json();
    EXPECT_EQ(j.value("code", -1), c.code) << c.what << ": " << r.out;
    EXPECT_FALSE(j.value("msg", "").empty()) << c.what;
    EXPECT_TRUE(j.contains("cniVersion")) << c.what;
    EXPECT_FALSE(Pod("bad").HasLink("eth0")) << c.what;
  }
  ExpectNothingLeft();
}

TEST_F(RoutedTest, FailuresAfterAllocationRollBack) {
  // The interface name is taken inside the pod: the veth cannot be created.
  Cmd({"ip", "-n", Pod("taken").name(), "link", "add", "eth0", "type", "veth", "peer", "name", "x0"});
  auto r = Add("taken", Conf());
  EXPECT_EQ(r.Json()["code"], 106) << r.out;
  EXPECT_NE(r.Json().value("msg", "").find("eth0"), std::string::npos) << r.out;
  ExpectNothingLeft();
  // ADD twice for the same container+ifname: an error, and the first stays.
  ASSERT_EQ(Add("twice", Conf()).exit_code, 0);
  auto again = Add("twice", Conf());
  EXPECT_EQ(again.Json()["code"], 101) << again.out;
  EXPECT_TRUE(Pod("twice").HasLink("eth0"));
  EXPECT_EQ(DbRows(), 1u);
  // A second routed attachment in the same netns collides on the gateway
  // route: a clear error, and its veth and address are rolled back.
  auto second = Cni("ADD", "twice", Pod("twice").path(), Conf(), "net1");
  EXPECT_EQ(second.Json()["code"], 106) << second.out;
  EXPECT_FALSE(Pod("twice").HasLink("net1"));
  EXPECT_EQ(DbRows(), 1u);
  EXPECT_EQ(HostVeths().size(), 1u);
  // An unwritable dataDir: a clear store error, nothing in the kernel.
  json ro = Conf("1.1.0", {{"dataDir", "/proc/weft-cannot-exist"}});
  auto bad = Add("rodir", ro);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.Json().value("msg", "").find("dataDir"), std::string::npos) << bad.out;
  EXPECT_FALSE(Pod("rodir").HasLink("eth0"));
  EXPECT_EQ(HostVeths().size(), 1u);
}

TEST_F(RoutedTest, CheckDetectsDrift) {
  auto r = Add("c1", Conf());
  ASSERT_EQ(r.exit_code, 0);
  json conf = Conf();
  conf["prevResult"] = r.Json();
  EXPECT_EQ(Cni("CHECK", "c1", Pod("c1").path(), conf).exit_code, 0);
  Cmd({"ip", "-n", Pod("c1").name(), "route", "del", "default"});
  auto drift = Cni("CHECK", "c1", Pod("c1").path(), conf);
  EXPECT_EQ(drift.Json()["code"], 108) << drift.out;
  EXPECT_NE(drift.Json().value("msg", "").find("default route"), std::string::npos) << drift.out;
  auto unknown = Cni("CHECK", "nobody", Pod("c1").path(), conf);
  EXPECT_EQ(unknown.Json()["code"], 108);
}

TEST_F(RoutedTest, MtuDefaultsToTheUplink) {
  TestNode jumbo("jumbo", 11, 9000);
  json conf = Conf();
  conf.erase("mtu");
  auto r = RunPlugin(BinaryPath("weft"), jumbo, CniEnv("ADD", "j1", Pod("j1").path()), conf.dump());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.Json()["interfaces"][1]["mtu"], 9000);
}

TEST_F(RoutedTest, VersionListsEverySupportedVersion) {
  auto r = RunPlugin(BinaryPath("weft"), *node_, {{"CNI_COMMAND", "VERSION"}}, R"({"cniVersion":"1.0.0"})");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.Json()["cniVersion"], "1.0.0");
  EXPECT_EQ(r.Json()["supportedVersions"],
            json({"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}));
  EXPECT_TRUE(r.err.empty()) << "logs must not appear on a clean VERSION: " << r.err;
}

}  // namespace
}  // namespace weft::testing
