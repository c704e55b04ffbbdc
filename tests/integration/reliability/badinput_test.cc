// Bad input and bad environments. Every malformed input class (CNI_* env,
// config JSON and field values, prevResult, runtimeConfig in both key
// spellings, CNI_ARGS) gets its CNI code and a message, and changes nothing
// on the node: the complete node snapshot (links, addresses, routes,
// neighbours, FDB, nftables, iptables, database) is compared before and
// after. Then the environments: a read-only dataDir, a full dataDir, a
// corrupted database, a missing netns, exhausted addresses: each a clear
// error with its code, nothing leaked, a message an operator can act on.
// Complements tests/integration/plugin/routed_test.cc
// (BadInputGetsTheRightCodeAndLeavesNothing).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>

#include <fstream>

#include "node_fixture.h"

namespace weft::testing {
namespace {

class BadInputTest : public ::testing::Test, protected ReliabilityNode {
 protected:
  void SetUp() override {
    StartNode();
    // An attachment already on the node: bad input must not disturb it.
    auto a = Weft("ADD", "anchor", Conf().dump());
    ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
    anchor_result_ = a.Json();
  }
  void TearDown() override {
    StopNode();
    for (const auto& m : mounts_) ::umount2(m.c_str(), MNT_DETACH);
    for (const auto& d : dirs_) RemoveTree(d);
  }
  json Conf(json extra = json::object()) {
    json c = {{"cniVersion", "1.1.0"}, {"name", "badnet"},  {"type", "weft"},
              {"mode", "routed"},      {"mtu", 1400},       {"dataDir", data_dir_},
              {"ranges", {"10.250.0.0/24"}}, {"capabilities", {{"portMappings", true}}}};
    for (auto& [k, v] : extra.items()) c[k] = v;
    return c;
  }
  json WithMappings(json mappings) { return Conf({{"runtimeConfig", {{"portMappings", mappings}}}}); }
  WeftRun Weft(const std::string& verb, const std::string& cid, const std::string& stdin_data,
               const std::map<std::string, std::string>& env_override = {}) {
    auto env = CniEnv(verb, cid, Pod(cid).path());
    for (const auto& [k, v] : env_override) {
      if (v == kUnset) env.erase(k);
      else env[k] = v;
    }
    return RunWeft(*node_, env, stdin_data);
  }
  NodeState Everything() {
    NodeState s = NodeSnapshot(*node_, data_dir_);
    for (auto& [k, v] : KernelState(Pod("bad"))) s["pod-" + k] = v;
    return s;
  }
  // The error object a failed call printed, checked for shape.
  void ExpectError(const WeftRun& r, int code, const std::string& what, const std::string& msg_has = "") {
    EXPECT_FALSE(r.killed()) << what;
    EXPECT_NE(r.exit_code, 0) << what;
    json j = r.Json();
    EXPECT_EQ(j.value("code", -1), code) << what << ": " << r.out << r.err;
    EXPECT_FALSE(j.value("msg", "").empty()) << what;
    EXPECT_TRUE(j.contains("cniVersion")) << what;
    if (!msg_has.empty()) {
      std::string text = j.value("msg", "") + " " + j.value("details", "");
      EXPECT_NE(text.find(msg_has), std::string::npos) << what << ": " << r.out;
    }
  }
  // Mounts a private tmpfs (private mount namespace: invisible outside this
  // test process) on a fresh directory and returns it.
  std::string PrivateTmpfs(const std::string& tag, const std::string& size) {
    if (!private_mounts_) {
      EXPECT_EQ(::unshare(CLONE_NEWNS), 0);
      EXPECT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
      private_mounts_ = true;
    }
    std::string dir = TempDir(tag);
    dirs_.push_back(dir);
    EXPECT_EQ(::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size + ",mode=0700").c_str()), 0) << dir;
    mounts_.push_back(dir);
    return dir;
  }

  static constexpr const char* kUnset = "\x01unset";
  json anchor_result_;
  bool private_mounts_ = false;
  std::vector<std::string> mounts_, dirs_;
};

struct BadCase {
  std::string what;
  std::string verb;
  std::map<std::string, std::string> env;  // overrides; kUnset removes
  std::string stdin_data;
  int code;
};

TEST_F(BadInputTest, EveryMalformedInputClassGetsItsCodeAndChangesNothing) {
  Pod("bad");
  const std::string good = Conf().dump();
  const std::string u = kUnset;
  auto mappings = [&](json m) { return WithMappings(std::move(m)).dump(); };
  auto with = [&](json extra) { return Conf(std::move(extra)).dump(); };
  auto without = [&](const char* key) {
    json c = Conf();
    c.erase(key);
    return c.dump();
  };
  json prev_ok = anchor_result_;
  std::vector<BadCase> cases = {
      // CNI_* environment.
      {"CNI_COMMAND unset", "ADD", {{"CNI_COMMAND", u}}, good, 4},
      {"CNI_COMMAND lower case", "ADD", {{"CNI_COMMAND", "add"}}, good, 4},
      {"CNI_CONTAINERID unset", "ADD", {{"CNI_CONTAINERID", u}}, good, 4},
      {"CNI_CONTAINERID empty", "ADD", {{"CNI_CONTAINERID", ""}}, good, 4},
      {"CNI_CONTAINERID path", "ADD", {{"CNI_CONTAINERID", "../../etc/passwd"}}, good, 4},
      {"CNI_CONTAINERID space", "ADD", {{"CNI_CONTAINERID", "a b"}}, good, 4},
      {"CNI_IFNAME unset", "ADD", {{"CNI_IFNAME", u}}, good, 4},
      {"CNI_IFNAME 16 chars", "ADD", {{"CNI_IFNAME", "abcdefghijklmnop"}}, good, 4},
      {"CNI_IFNAME dot", "ADD", {{"CNI_IFNAME", "."}}, good, 4},
      {"CNI_IFNAME whitespace", "ADD", {{"CNI_IFNAME", "eth 0"}}, good, 4},
      {"CNI_IFNAME colon", "ADD", {{"CNI_IFNAME", "eth0:1"}}, good, 4},
      {"CNI_NETNS unset on ADD", "ADD", {{"CNI_NETNS", u}}, good, 4},
      {"CNI_NETNS relative", "ADD", {{"CNI_NETNS", "run/netns/x"}}, good, 4},
      {"CNI_NETNS a directory", "ADD", {{"CNI_NETNS", "/run"}}, good, 4},
      {"CNI_NETNS not a netns", "ADD", {{"CNI_NETNS", "/proc/self/ns/mnt"}}, good, 4},
      {"CNI_NETNS missing", "ADD", {{"CNI_NETNS", "/run/netns/" + Prefix() + "-absent"}}, good, 3},
      {"CNI_PATH unset", "ADD", {{"CNI_PATH", u}}, good, 4},
      {"CHECK without netns", "CHECK", {{"CNI_NETNS", u}}, with({{"prevResult", prev_ok}}), 4},
      // CNI_ARGS.
      {"CNI_ARGS without =", "ADD", {{"CNI_ARGS", "K8S_POD_NAME"}}, good, 4},
      {"CNI_ARGS unknown key", "ADD", {{"CNI_ARGS", "FOO=bar"}}, good, 4},
      {"CNI_ARGS empty key", "ADD", {{"CNI_ARGS", "=x"}}, good, 4},
      {"CNI_ARGS IgnoreUnknown not a bool", "ADD", {{"CNI_ARGS", "IgnoreUnknown=maybe;FOO=bar"}}, good, 4},
      // Config JSON.
      {"empty stdin", "ADD", {}, "", 6},
      {"not JSON", "ADD", {}, "{\"cniVersion\":", 6},
      {"JSON array", "ADD", {}, "[]", 6},
      {"JSON string", "ADD", {}, "\"weft\"", 6},
      {"trailing garbage", "ADD", {}, good + "}", 6},
      {"cniVersion a number", "ADD", {}, with({{"cniVersion", 1}}), 7},
      {"cniVersion unknown", "ADD", {}, with({{"cniVersion", "2.0.0"}}), 1},
      {"name missing", "ADD", {}, without("name"), 7},
      {"name a number", "ADD", {}, with({{"name", 5}}), 7},
      {"name with slash", "ADD", {}, with({{"name", "a/b"}}), 7},
      // Field values.
      {"ranges missing", "ADD", {}, without("ranges"), 7},
      {"ranges a string", "ADD", {}, with({{"ranges", "10.0.0.0/24"}}), 7},
      {"ranges element a number", "ADD", {}, with({{"ranges", {1}}}), 7},
      {"ranges not a CIDR", "ADD", {}, with({{"ranges", {"10.0.0.0"}}}), 7},
      {"ranges host bits", "ADD", {}, with({{"ranges", {"10.0.0.1/24"}}}), 7},
      {"ranges overlap", "ADD", {}, with({{"ranges", {"10.0.0.0/16", "10.0.1.0/24"}}}), 7},
      {"mode unknown", "ADD", {}, with({{"mode", "ipvlan"}}), 7},
      {"mode a bool", "ADD", {}, with({{"mode", true}}), 7},
      {"bridge name too long", "ADD", {}, with({{"mode", "bridge"}, {"bridge", "abcdefghijklmnopq"}}), 7},
      {"bridge name with slash", "ADD", {}, with({{"mode", "bridge"}, {"bridge", "br/0"}}), 7},
      {"mtu a string", "ADD", {}, with({{"mtu", "1500"}}), 7},
      {"mtu a float", "ADD", {}, with({{"mtu", 1500.5}}), 7},
      {"mtu too small", "ADD", {}, with({{"mtu", 67}}), 7},
      {"mtu too large", "ADD", {}, with({{"mtu", 65536}}), 7},
      {"masquerade a string", "ADD", {}, with({{"masquerade", "yes"}}), 7},
      {"masqueradeBackend unknown", "ADD", {}, with({{"masqueradeBackend", "pf"}}), 7},
      {"dataDir relative", "ADD", {}, with({{"dataDir", "var/lib/weft"}}), 7},
      {"dataDir with ..", "ADD", {}, with({{"dataDir", "/var/lib/../../etc"}}), 7},
      {"dataDir a number", "ADD", {}, with({{"dataDir", 7}}), 7},
      {"ipam without type", "ADD", {}, with({{"ipam", json::object()}}), 7},
      {"ipam type a path", "ADD", {}, with({{"ipam", {{"type", "../../bin/sh"}}}}), 7},
      {"ipam plugin not in CNI_PATH", "ADD", {}, with({{"ipam", {{"type", "no-such-ipam"}}}}), 109},
      {"gateways outside ranges", "ADD", {}, with({{"gateways", {"192.168.0.1"}}}), 7},
      {"gateways two of a family", "ADD", {}, with({{"gateways", {"10.250.0.1", "10.250.0.2"}}}), 7},
      {"ipsToRouteViaHost garbage", "ADD", {}, with({{"ipsToRouteViaHost", {"nope"}}}), 7},
      {"clusterCIDRs not an array", "ADD", {}, with({{"clusterCIDRs", "10.0.0.0/8"}}), 7},
      {"logFile relative", "ADD", {}, with({{"logFile", "weft.log"}}), 7},
      {"logLevel unknown", "ADD", {}, with({{"logLevel", "loud"}}), 7},
      // prevResult.
      {"prevResult a string", "ADD", {}, with({{"prevResult", "x"}}), 7},
      {"prevResult ips not an array", "CHECK", {}, with({{"prevResult", {{"cniVersion", "1.1.0"}, {"ips", 5}}}}), 6},
      {"prevResult bad address", "CHECK", {},
       with({{"prevResult", {{"cniVersion", "1.1.0"}, {"ips", {{{"address", "10.0.0.300/24"}}}}}}}), 6},
      {"CHECK without prevResult for an unknown pod", "CHECK", {}, good, 108},
      // runtimeConfig.
      {"runtimeConfig a number", "ADD", {}, with({{"runtimeConfig", 5}}), 7},
      {"portMappings an object", "ADD", {}, mappings(json::object()), 7},
      {"portMappings entry a string", "ADD", {}, mappings({"8080:80"}), 7},
      {"hostPort a string", "ADD", {}, mappings({{{"hostPort", "8080"}, {"containerPort", 80}}}), 7},
      {"HostPort a string", "ADD", {}, mappings({{{"HostPort", "8080"}, {"ContainerPort", 80}}}), 7},
      {"hostPort too large", "ADD", {}, mappings({{{"hostPort", 70000}, {"containerPort", 80}}}), 7},
      {"HostPort negative", "ADD", {}, mappings({{{"HostPort", -1}, {"ContainerPort", 80}}}), 7},
      {"containerPort missing", "ADD", {}, mappings({{{"hostPort", 8080}}}), 7},
      {"ContainerPort zero", "ADD", {}, mappings({{{"HostPort", 8080}, {"ContainerPort", 0}}}), 7},
      {"protocol icmp", "ADD", {}, mappings({{{"hostPort", 8080}, {"containerPort", 80}, {"protocol", "icmp"}}}), 7},
      {"Protocol a number", "ADD", {}, mappings({{{"HostPort", 8080}, {"ContainerPort", 80}, {"Protocol", 6}}}), 7},
      {"hostIP not an IP", "ADD", {}, mappings({{{"hostPort", 8080}, {"containerPort", 80}, {"hostIP", "node"}}}), 7},
      {"HostIP a number", "ADD", {}, mappings({{{"HostPort", 8080}, {"ContainerPort", 80}, {"HostIP", 1}}}), 7},
      {"dns an array", "ADD", {}, with({{"capabilities", {{"dns", true}}}, {"runtimeConfig", {{"dns", {1}}}}}), 7},
  };
  const NodeState before = Everything();
  for (const auto& c : cases) {
    auto r = Weft(c.verb, "bad", c.stdin_data, c.env);
    ExpectError(r, c.code, c.what);
    // Each case alone must change nothing (a wrongly accepted case would
    // otherwise make the next ones fail for the wrong reason).
    ASSERT_EQ(DbState(data_dir_)["db-rows"].size(), 1u) << c.what;
  }
  EXPECT_EQ(Diff(before, Everything()), "");
  // Control: the same plumbing with good input works, so the cases above
  // failed for their own reason.
  auto ok = Weft("ADD", "bad", mappings({{{"HostPort", 8080}, {"ContainerPort", 80}, {"Protocol", "TCP"}}}),
                 {{"CNI_ARGS", "IgnoreUnknown=1;FOO=bar;K8S_POD_NAME=p"}});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
}

TEST_F(BadInputTest, ReadOnlyDataDir) {
  // The dataDir is read-only (a bind mount in this test's private mount
  // namespace), with a database in it.
  std::string ro = PrivateTmpfs("ro", "4m");
  json conf = Conf({{"dataDir", ro}});
  ASSERT_EQ(Weft("ADD", "first", conf.dump()).exit_code, 0);
  ASSERT_EQ(Weft("DEL", "first", conf.dump()).exit_code, 0);
  ASSERT_EQ(::mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0);
  Pod("bad");
  const NodeState before = Everything();
  auto r = Weft("ADD", "bad", conf.dump());
  ExpectError(r, 102, "ADD on a read-only dataDir", "read-only");
  EXPECT_EQ(Diff(before, Everything()), "");
  // STATUS says the plugin cannot take pods.
  auto st = Weft("STATUS", "bad", conf.dump());
  EXPECT_EQ(st.Json().value("code", 0), 50) << st.out;
}

TEST_F(BadInputTest, FullDataDir) {
  std::string full = PrivateTmpfs("full", "1m");
  json conf = Conf({{"dataDir", full}});
  ASSERT_EQ(Weft("ADD", "first", conf.dump()).exit_code, 0);
  // Fill the filesystem to the last block.
  {
    std::ofstream f(full + "/filler", std::ios::binary);
    std::string block(4096, 'x');
    while (f.write(block.data(), block.size())) {
    }
  }
  Pod("bad");
  const NodeState before = Everything();
  auto r = Weft("ADD", "bad", conf.dump());
  ExpectError(r, 102, "ADD on a full dataDir", "full");
  EXPECT_EQ(Diff(before, Everything()), "");
  // Space back: the same ADD works, and nothing was left to block it.
  ::unlink((full + "/filler").c_str());
  auto again = Weft("ADD", "bad", conf.dump());
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(Weft("DEL", "bad", conf.dump()).exit_code, 0);
  EXPECT_EQ(Weft("DEL", "first", conf.dump()).exit_code, 0);
}

TEST_F(BadInputTest, CorruptedDatabase) {
  std::string dir = TempDir("corrupt");
  dirs_.push_back(dir);
  json conf = Conf({{"dataDir", dir}});
  ASSERT_EQ(Weft("ADD", "first", conf.dump()).exit_code, 0);
  ASSERT_EQ(Weft("DEL", "first", conf.dump()).exit_code, 0);
  // Junk over the database and its write-ahead log (the WAL holds the
  // newest pages, so corrupting the main file alone can go unnoticed).
  for (const char* file : {"/ipam.db", "/ipam.db-wal"}) {
    std::fstream f(dir + file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << file;
    std::string junk(16384, '\x5a');
    f.seekp(0);
    f.write(junk.data(), junk.size());
  }
  ::unlink((dir + "/ipam.db-shm").c_str());
  Pod("bad");
  const NodeState before = Everything();
  for (const char* verb : {"ADD", "DEL"}) {
    auto r = Weft(verb, "bad", conf.dump());
    ExpectError(r, 102, std::string(verb) + " with a corrupted database", "ipam.db");
    std::string text = r.Json().value("msg", "") + r.Json().value("details", "");
    EXPECT_TRUE(text.find("corrupt") != std::string::npos || text.find("not a database") != std::string::npos)
        << r.out;
  }
  EXPECT_EQ(Diff(before, Everything()), "");
}

TEST_F(BadInputTest, MissingNetns) {
  Pod("bad");
  const NodeState before = Everything();
  auto env = std::map<std::string, std::string>{{"CNI_NETNS", "/run/netns/" + Prefix() + "-gone"}};
  ExpectError(Weft("ADD", "bad", Conf().dump(), env), 3, "ADD into a missing netns", "-gone");
  // DEL and GC with the netns gone are success (the runtime's second DEL).
  EXPECT_EQ(Weft("DEL", "bad", Conf().dump(), env).exit_code, 0);
  EXPECT_EQ(Weft("DEL", "bad", Conf().dump(), {{"CNI_NETNS", kUnset}}).exit_code, 0);
  EXPECT_EQ(Diff(before, Everything()), "");
  // A pod whose netns vanished before its DEL: DEL frees everything.
  ASSERT_EQ(Weft("ADD", "doomed", Conf().dump()).exit_code, 0);
  pods_.erase("doomed");
  EXPECT_EQ(Weft("DEL", "doomed", Conf().dump(), {{"CNI_NETNS", "/run/netns/" + Prefix() + "-doomed"}}).exit_code, 0);
  EXPECT_EQ(Diff(before, Everything()), "");
}

TEST_F(BadInputTest, AddressExhaustion) {
  json small = Conf({{"ranges", {"10.251.0.0/30"}}, {"dataDir", data_dir_ + "/small"}});
  ASSERT_EQ(Weft("ADD", "s1", small.dump()).exit_code, 0);
  ASSERT_EQ(Weft("ADD", "s2", small.dump()).exit_code, 0);
  Pod("bad");
  const NodeState before = Everything();
  auto r = Weft("ADD", "bad", small.dump());
  ExpectError(r, 100, "ADD with every address taken", "10.251.0.0/30");
  EXPECT_NE(r.Json().value("details", "").find("release pods or add a range"), std::string::npos) << r.out;
  EXPECT_EQ(Diff(before, Everything()), "");
  // Freeing one makes the next ADD succeed with exactly that address.
  ASSERT_EQ(Weft("DEL", "s1", small.dump()).exit_code, 0);
  auto again = Weft("ADD", "bad", small.dump());
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_EQ(again.Json()["ips"][0]["address"], "10.251.0.1/32");
}

}  // namespace
}  // namespace weft::testing
