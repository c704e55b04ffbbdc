#include "runtime/invoke.h"
#include "cni/errors.h"

#include <gtest/gtest.h>

#include <chrono>

#include "runtime/test_helpers.h"

namespace weft::runtime {
namespace {

using nlohmann::json;
using testing::ReadLog;
using testing::ScratchDir;

PluginConf Plugin(const std::string& raw) {
  auto p = ParsePluginConf(raw);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : PluginConf{};
}

TEST(BuildOneConfig, InjectsNameVersionAndPrevResultKeepingThePluginsOwnKeys) {
  PluginConf p = Plugin(R"({"type":"bridge","name":"ignored","cniVersion":"0.1.0","mtu":1400,"ipam":{"type":"host-local"}})");
  json prev = {{"cniVersion", "1.0.0"}, {"ips", json::array()}};
  json c = BuildOneConfig("net", "1.0.0", p, &prev, nullptr);
  EXPECT_EQ(c["name"], "net");
  EXPECT_EQ(c["cniVersion"], "1.0.0");
  EXPECT_EQ(c["mtu"], 1400);
  EXPECT_EQ(c["ipam"]["type"], "host-local");
  EXPECT_EQ(c["prevResult"], prev);
  EXPECT_FALSE(c.contains("runtimeConfig"));
  EXPECT_FALSE(BuildOneConfig("net", "1.0.0", p, nullptr, nullptr).contains("prevResult"));
}

TEST(BuildOneConfig, RuntimeConfigHoldsOnlyDeclaredCapabilitiesPassedThroughUntouched) {
  PluginConf p = Plugin(R"({"type":"portmap","capabilities":{"portMappings":true,"bandwidth":false}})");
  RuntimeConf rt;
  // containerd's CRI spelling; the library does not rewrite it.
  rt.capability_args = {{"portMappings", json::array({{{"HostPort", 8080}, {"ContainerPort", 80}, {"Protocol", "tcp"}}})},
                        {"bandwidth", {{"ingressRate", 1000}}},
                        {"dns", {{"servers", json::array({"10.0.0.10"})}}}};
  json c = BuildOneConfig("net", "1.0.0", p, nullptr, &rt);
  ASSERT_TRUE(c.contains("runtimeConfig"));
  EXPECT_EQ(c["runtimeConfig"].size(), 1u);
  EXPECT_EQ(c["runtimeConfig"]["portMappings"][0]["HostPort"], 8080);
  PluginConf none = Plugin(R"({"type":"bridge"})");
  EXPECT_FALSE(BuildOneConfig("net", "1.0.0", none, nullptr, &rt).contains("runtimeConfig"));
}

TEST(PluginEnv, ReplacesEveryCniVariableAndKeepsTheRest) {
  RuntimeConf rt{"c1", "/run/netns/x", "eth0", {{"K8S_POD_NAME", "p"}, {"IgnoreUnknown", "1"}}, json::object()};
  auto env = PluginEnv({"PATH=/bin", "CNI_COMMAND=bogus", "CNI_ARGS=old=1", "HOME=/root"}, "ADD", rt,
                       {"/a", "/b"});
  std::vector<std::string> want = {"PATH=/bin",
                                   "HOME=/root",
                                   "CNI_COMMAND=ADD",
                                   "CNI_CONTAINERID=c1",
                                   "CNI_NETNS=/run/netns/x",
                                   "CNI_ARGS=K8S_POD_NAME=p;IgnoreUnknown=1",
                                   "CNI_IFNAME=eth0",
                                   "CNI_PATH=/a:/b"};
  EXPECT_EQ(env, want);
}

TEST(CniArgs, SplitAndJoinRoundTrip) {
  auto a = SplitCniArgs("IgnoreUnknown=1;K8S_POD_NAME=web=1;;");
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[1].second, "web=1");
  EXPECT_EQ(JoinCniArgs(*a), "IgnoreUnknown=1;K8S_POD_NAME=web=1");
  EXPECT_EQ(cni::CodeOf(SplitCniArgs("novalue").status()), cni::Code::kInvalidEnv);
}

class InvokerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "bin");
    for (const char* t : {"fake", "other"}) std::filesystem::create_symlink(WEFT_FAKE_PLUGIN, dir_ / ("bin/" + std::string(t)));
  }
  Invoker Make(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    InvokeOptions o;
    o.plugin_dirs = {dir_ / "empty", dir_ / "bin"};
    o.base_env = {"FAKE_LOG=" + (dir_ / "log"), "FAKE_INHERITED=yes"};
    o.timeout = timeout;
    return Invoker(o);
  }
  std::string Conf(const std::string& fake) {
    return R"({"cniVersion":"1.0.0","name":"n","type":"fake","fake":)" + fake + "}";
  }
  ScratchDir dir_;
  RuntimeConf rt_{"c1", "/run/netns/x", "eth0", {}, json::object()};
};

TEST_F(InvokerTest, MissingPluginNamesTheDirsSearched) {
  auto r = Make().Run("nosuch", "ADD", rt_, "{}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kExec);
  EXPECT_NE(r.status().msg().find(dir_ / "bin"), std::string::npos) << r.status().msg();
}

TEST_F(InvokerTest, PassesEnvAndStdinAndReturnsStdout) {
  auto r = Make().Run("fake", "ADD", rt_, Conf("{}"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(json::parse(*r)["ips"][0]["address"], "10.1.2.3/24");
  auto log = ReadLog(dir_ / "log");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0]["env"]["CNI_COMMAND"], "ADD");
  EXPECT_EQ(log[0]["env"]["CNI_NETNS"], "/run/netns/x");
  EXPECT_EQ(log[0]["env"]["CNI_PATH"], (dir_ / "empty") + ":" + (dir_ / "bin"));
  EXPECT_EQ(log[0]["env"]["FAKE_INHERITED"], "yes");
  EXPECT_EQ(log[0]["stdin"]["name"], "n");
}

TEST_F(InvokerTest, PluginErrorObjectKeepsItsCodeMessageAndDetails) {
  auto r = Make().Run("fake", "DEL", rt_, Conf(R"({"fail":{"DEL":7}})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(cni::CodeNumber(r.status()), 7);
  EXPECT_EQ(r.status().msg(), "fake fake refuses DEL");
  EXPECT_EQ(r.status().details(), "as configured");
}

TEST_F(InvokerTest, CrashedPluginIsAClearError) {
  auto r = Make().Run("fake", "ADD", rt_, Conf(R"({"crash":["ADD"]})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kExec);
  EXPECT_NE(r.status().msg().find("killed by signal 11"), std::string::npos) << r.status().msg();
}

TEST_F(InvokerTest, HungPluginIsKilledAtTheDeadline) {
  auto start = std::chrono::steady_clock::now();
  auto r = Make(std::chrono::milliseconds(300)).Run("fake", "CHECK", rt_, Conf(R"({"hang":["CHECK"]})"));
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kExec);
  EXPECT_NE(r.status().msg().find("did not finish within 300 ms"), std::string::npos) << r.status().msg();
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST_F(InvokerTest, NonZeroExitWithOnlyStderrQuotesIt) {
  auto r = Make().Run("fake", "ADD", rt_, Conf(R"({"stderrOnly":["ADD"]})"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().msg().find("something broke on ADD"), std::string::npos) << r.status().msg();
  auto g = Make().Run("fake", "DEL", rt_, Conf(R"({"garbage":["DEL"]})"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().msg().find("not a CNI error object"), std::string::npos) << g.status().msg();
}

TEST_F(InvokerTest, VersionInfo) {
  auto vi = Make().GetVersionInfo("other");
  ASSERT_TRUE(vi.ok()) << vi.status().ToString();
  EXPECT_TRUE(vi->Supports("1.1.0"));
  EXPECT_FALSE(vi->Supports("9.0.0"));
  auto log = ReadLog(dir_ / "log");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0]["env"]["CNI_COMMAND"], "VERSION");
  EXPECT_EQ(log[0]["stdin"]["cniVersion"], "1.1.0");
}

}  // namespace
}  // namespace weft::runtime
