// NetworkPolicy's "no window at pod start", the plugin's half: with
// `networkPolicy` a routed pod whose namespace weftd lists in the namespaces
// file (or any pod, when the file is missing) gets its host veth created in
// the pending interface group; others stay in group 0. Bridge mode refuses
// the key.
#include <string>

#include "plugin_fixture.h"
#include "sys/files.h"

namespace weft::testing {
namespace {

constexpr uint32_t kPending = 22342;

class NetpolTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    dir_ = TempDir("netpol");
    ns_file_ = dir_ + "/netpol-namespaces";
  }
  void TearDown() override {
    PluginTest::TearDown();
    RemoveTree(dir_);
  }
  json NetpolConf(json np = json::object()) {
    json n = {{"namespacesFile", ns_file_}};
    for (auto& [k, v] : np.items()) n[k] = v;
    return Conf("1.1.0", {{"networkPolicy", n}});
  }
  void WriteNamespaces(const std::string& content) {
    ASSERT_TRUE(sys::WriteFileAtomic(ns_file_, content).ok());
  }
  // ADD as a Kubernetes runtime does: CNI_ARGS names the pod's namespace
  // (none at all when `ns` is empty).
  PluginRun AddIn(const std::string& cid, const std::string& ns, const json& conf) {
    std::map<std::string, std::string> env;
    if (!ns.empty()) env["CNI_ARGS"] = "K8S_POD_NAMESPACE=" + ns + ";K8S_POD_NAME=" + cid;
    return Cni("ADD", cid, Pod(cid).path(), conf, "eth0", env);
  }
  static std::string HostIf(const PluginRun& r) {
    json j = r.Json();
    return j.contains("interfaces") ? j["interfaces"][0]["name"].get<std::string>() : std::string();
  }
  // The interface group as the kernel reports it (`ip -j link`: "default"
  // for 0, else the number); -1 when the link is missing.
  static long long GroupOf(const TestNetns& ns, const std::string& ifname) {
    auto l = ns.IpJson({"link", "show", "dev", ifname});
    if (l.empty()) return -1;
    std::string g = l[0].value("group", "");
    return g == "default" ? 0 : std::stoll(g);
  }
  long long HostGroup(const PluginRun& r) { return GroupOf(*node_, HostIf(r)); }

  std::string dir_, ns_file_;
};

TEST_F(NetpolTest, ListedNamespaceIsPendingOthersAreNot) {
  WriteNamespaces("# namespaces with policies, written by weftd\nx\n\nz\n");
  auto a = AddIn("pa", "x", NetpolConf());
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  auto b = AddIn("pb", "y", NetpolConf());
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  auto c = AddIn("pc", "z", NetpolConf({{"pendingGroup", 77}}));
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_EQ(HostGroup(a), kPending);
  EXPECT_EQ(HostGroup(b), 0);
  EXPECT_EQ(HostGroup(c), 77);
  // Only the host end: the pod's eth0 stays in the default group.
  EXPECT_EQ(GroupOf(Pod("pa"), "eth0"), 0);
  // Otherwise a pending pod is built as any other (nothing here drops its
  // traffic: weftd's table is not installed in this node).
  EXPECT_TRUE(Pod("pa").Ping(PodIp(b)));
  EXPECT_TRUE(node_->Ping(PodIp(a)));

  // weftd may change the list at any time: CHECK does not compare groups.
  WriteNamespaces("y\n");
  json checked = NetpolConf();
  checked["prevResult"] = a.Json();
  auto chk = Cni("CHECK", "pa", Pod("pa").path(), checked, "eth0", {{"CNI_ARGS", "K8S_POD_NAMESPACE=x"}});
  EXPECT_EQ(chk.exit_code, 0) << chk.out << chk.err;

  for (const char* cid : {"pa", "pb", "pc"})
    for (int i = 0; i < 2; ++i) {
      auto d = Del(cid, NetpolConf());
      EXPECT_EQ(d.exit_code, 0) << cid << " " << d.out << d.err;
    }
  ExpectNoPodsLeft();
}

TEST_F(NetpolTest, AMissingFileMakesEveryPodPending) {
  auto a = AddIn("pa", "y", NetpolConf());
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  EXPECT_EQ(HostGroup(a), kPending);
  // Unreadable counts as missing.
  ASSERT_EQ(Cmd({"mkdir", ns_file_}), 0);  // a directory: open succeeds, read fails
  auto b = AddIn("pb", "y", NetpolConf());
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_EQ(HostGroup(b), kPending);
  for (const char* cid : {"pa", "pb"}) EXPECT_EQ(Del(cid, NetpolConf()).exit_code, 0);
  ExpectNoPodsLeft();
}

TEST_F(NetpolTest, WithoutK8sArgsOnlyAnEmptyListIsNotPending) {
  WriteNamespaces("# none yet\n");
  auto a = AddIn("pa", "", NetpolConf());
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  EXPECT_EQ(HostGroup(a), 0);
  WriteNamespaces("x\n");
  auto b = AddIn("pb", "", NetpolConf());
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_EQ(HostGroup(b), kPending);
  for (const char* cid : {"pa", "pb"}) EXPECT_EQ(Del(cid, NetpolConf()).exit_code, 0);
  ExpectNoPodsLeft();
}

TEST_F(NetpolTest, WithoutTheKeyNothingChanges) {
  WriteNamespaces("x\n");
  auto a = AddIn("pa", "x", Conf());
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  EXPECT_EQ(HostGroup(a), 0);
  EXPECT_EQ(Del("pa", Conf()).exit_code, 0);
  ExpectNoPodsLeft();
}

TEST_F(NetpolTest, InvalidConfigsAreCode7AndLeaveNothingBehind) {
  WriteNamespaces("x\n");
  json bridge = BridgeConf("1.1.0", {{"networkPolicy", {{"namespacesFile", ns_file_}}}});
  struct Case {
    const char* what;
    json conf;
    const char* key;
  } cases[] = {
      {"bridge mode", bridge, "\"networkPolicy\" is not supported in bridge mode"},
      {"group 0", NetpolConf({{"pendingGroup", 0}}), "\"networkPolicy.pendingGroup\""},
      {"relative file", Conf("1.1.0", {{"networkPolicy", {{"namespacesFile", "netpol-namespaces"}}}}),
       "\"networkPolicy.namespacesFile\""},
      {"no file", Conf("1.1.0", {{"networkPolicy", json::object()}}), "\"networkPolicy.namespacesFile\""},
  };
  for (const auto& c : cases) {
    auto r = AddIn("pa", "x", c.conf);
    EXPECT_NE(r.exit_code, 0) << c.what;
    json j = r.Json();
    EXPECT_EQ(j.value("code", 0), 7) << c.what << ": " << r.out;
    EXPECT_NE(j.value("msg", "").find(c.key), std::string::npos) << c.what << ": " << r.out;
    ExpectNoPodsLeft();
    EXPECT_TRUE(node_->IpJson({"link", "show", "dev", "wbr0"}).empty()) << c.what << ": the bridge was created";
    EXPECT_TRUE(Pod("pa").IpJson({"link", "show", "dev", "eth0"}).empty()) << c.what;
  }
  // The same pod then starts normally with a valid config, and DEL works.
  auto ok = AddIn("pa", "x", NetpolConf());
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_EQ(HostGroup(ok), kPending);
  EXPECT_EQ(Del("pa", NetpolConf()).exit_code, 0);
  ExpectNoPodsLeft();
}

}  // namespace
}  // namespace weft::testing
