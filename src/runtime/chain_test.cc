#include "runtime/chain.h"
#include "cni/errors.h"

#include <gtest/gtest.h>

#include "base/strings.h"
#include "runtime/test_helpers.h"

namespace weft::runtime {
namespace {

using nlohmann::json;
using testing::ReadLog;
using testing::ScratchDir;

class ChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "bin");
    for (const char* t : {"a", "b", "c"}) std::filesystem::create_symlink(WEFT_FAKE_PLUGIN, dir_ / ("bin/" + std::string(t)));
  }
  Runtime Make(std::vector<std::string> extra_env = {}) {
    RuntimeOptions o;
    o.invoke.plugin_dirs = {dir_ / "bin"};
    o.invoke.base_env = {"FAKE_LOG=" + (dir_ / "log")};
    for (auto& e : extra_env) o.invoke.base_env.push_back(e);
    o.invoke.timeout = std::chrono::seconds(10);
    o.cache_dir = dir_ / "cache";
    return Runtime(o);
  }
  // A list a -> b -> c; `b_fake` configures plugin b, `head` adds list keys.
  NetworkConfigList List(const std::string& version = "1.0.0", const std::string& b_fake = "{}",
                         const std::string& head = "") {
    std::string text = R"({"cniVersion":")" + version + R"(","name":"net",)" + head + R"("plugins":[
        {"type":"a"},
        {"type":"b","capabilities":{"portMappings":true},"fake":)" + b_fake + R"(},
        {"type":"c","capabilities":{"bandwidth":true}}]})";
    auto l = ParseConfList(text);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return *l;
  }
  RuntimeConf Rt(const std::string& cid = "c1") {
    RuntimeConf rt;
    rt.container_id = cid;
    rt.netns = "/run/netns/" + cid;
    rt.ifname = "eth0";
    rt.args = {{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "web"}};
    rt.capability_args = {{"portMappings", json::array({{{"hostPort", 80}, {"containerPort", 8080}}})}};
    return rt;
  }
  std::vector<json> Log() { return ReadLog(dir_ / "log"); }
  void ClearLog() { std::filesystem::remove(dir_ / "log"); }
  // "type:COMMAND" for each call, in order.
  std::vector<std::string> Calls() {
    std::vector<std::string> out;
    for (const auto& l : Log()) out.push_back(l["stdin"].value("type", "?") + ":" + l["env"].value("CNI_COMMAND", ""));
    return out;
  }
  std::string CacheFile(const std::string& cid = "c1") { return dir_ / ("cache/results/net-" + cid + "-eth0"); }

  ScratchDir dir_;
};

TEST_F(ChainTest, AddRunsInOrderPassingEachResultAsTheNextPrevResult) {
  Runtime rt = Make();
  auto r = rt.AddNetworkList(List(), Rt());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Calls(), (std::vector<std::string>{"a:ADD", "b:ADD", "c:ADD"}));
  auto log = Log();
  EXPECT_FALSE(log[0]["stdin"].contains("prevResult"));
  EXPECT_EQ(log[1]["stdin"]["prevResult"]["interfaces"].size(), 2u);  // fresh result + "a"
  EXPECT_EQ(log[2]["stdin"]["prevResult"]["interfaces"].back()["name"], "b");
  for (const auto& l : log) {
    EXPECT_EQ(l["stdin"]["name"], "net");
    EXPECT_EQ(l["stdin"]["cniVersion"], "1.0.0");
    EXPECT_EQ(l["env"]["CNI_CONTAINERID"], "c1");
    EXPECT_EQ(l["env"]["CNI_ARGS"], "IgnoreUnknown=1;K8S_POD_NAME=web");
  }
  // runtimeConfig only where declared and offered: b declares portMappings;
  // c declares bandwidth, which the runtime did not offer.
  EXPECT_FALSE(log[0]["stdin"].contains("runtimeConfig"));
  EXPECT_EQ(log[1]["stdin"]["runtimeConfig"]["portMappings"][0]["hostPort"], 80);
  EXPECT_FALSE(log[2]["stdin"].contains("runtimeConfig"));
  EXPECT_EQ(r->result.interfaces.back().name, "c");
  json cached = json::parse(testing::ReadText(CacheFile()));
  EXPECT_EQ(cached["result"], r->json);
  EXPECT_EQ(*Base64Decode(cached["config"].get<std::string>()), List().bytes);
}

TEST_F(ChainTest, AddStopsAtTheFailingPluginAndCachesNothing) {
  Runtime rt = Make();
  auto r = rt.AddNetworkList(List("1.0.0", R"({"fail":{"ADD":11}})"), Rt());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kTryAgainLater);
  EXPECT_NE(r.status().msg().find("plugin type=\"b\" failed (add)"), std::string::npos) << r.status().msg();
  EXPECT_EQ(Calls(), (std::vector<std::string>{"a:ADD", "b:ADD"}));
  EXPECT_FALSE(std::filesystem::exists(CacheFile()));
}

TEST_F(ChainTest, AddRefusesBadNamesBeforeRunningAnything) {
  RuntimeConf bad = Rt();
  bad.container_id = "../etc";
  EXPECT_EQ(cni::CodeOf(Make().AddNetworkList(List(), bad).status()), cni::Code::kInvalidEnv);
  RuntimeConf badif = Rt();
  badif.ifname = "this-name-is-too-long";
  EXPECT_EQ(cni::CodeOf(Make().AddNetworkList(List(), badif).status()), cni::Code::kInvalidEnv);
  EXPECT_TRUE(Calls().empty());
}

TEST_F(ChainTest, ResultWithoutCniVersionTakesTheListsVersion) {
  auto l = ParseConfList(R"({"cniVersion":"0.4.0","name":"net","plugins":[{"type":"a","fake":{"omitVersion":true}}]})");
  auto r = Make().AddNetworkList(*l, Rt());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->json["cniVersion"], "0.4.0");
}

TEST_F(ChainTest, DelRunsInReverseWithTheCachedResultAndRemovesTheCache) {
  Runtime rt = Make();
  auto added = rt.AddNetworkList(List(), Rt());
  ASSERT_TRUE(added.ok());
  ClearLog();
  RuntimeConf del = Rt();
  del.netns = "";  // containerd's second DEL: the netns is gone
  ASSERT_TRUE(rt.DelNetworkList(List(), del).ok());
  EXPECT_EQ(Calls(), (std::vector<std::string>{"c:DEL", "b:DEL", "a:DEL"}));
  for (const auto& l : Log()) EXPECT_EQ(l["stdin"]["prevResult"], added->json);
  EXPECT_EQ(Log()[0]["env"]["CNI_NETNS"], "");
  EXPECT_FALSE(std::filesystem::exists(CacheFile()));
  // Again: nothing cached, no prevResult, still fine.
  ClearLog();
  ASSERT_TRUE(rt.DelNetworkList(List(), del).ok());
  EXPECT_EQ(Calls().size(), 3u);
  for (const auto& l : Log()) EXPECT_FALSE(l["stdin"].contains("prevResult"));
}

TEST_F(ChainTest, DelRunsEveryPluginWhenOneFailsAndKeepsTheCacheForARetry) {
  Runtime rt = Make();
  ASSERT_TRUE(rt.AddNetworkList(List(), Rt()).ok());
  ClearLog();
  Status st = rt.DelNetworkList(List("1.0.0", R"({"fail":{"DEL":5}})"), Rt());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(cni::CodeOf(st), cni::Code::kIo);
  EXPECT_NE(st.msg().find("type=\"b\" failed (delete)"), std::string::npos) << st.msg();
  EXPECT_EQ(Calls(), (std::vector<std::string>{"c:DEL", "b:DEL", "a:DEL"}));
  EXPECT_TRUE(std::filesystem::exists(CacheFile()));
  ClearLog();
  ASSERT_TRUE(rt.DelNetworkList(List(), Rt()).ok());
  EXPECT_TRUE(Log()[0]["stdin"].contains("prevResult"));
  EXPECT_FALSE(std::filesystem::exists(CacheFile()));
}

TEST_F(ChainTest, DelBelow040SendsNoPrevResult) {
  Runtime rt = Make();
  ASSERT_TRUE(rt.AddNetworkList(List("0.3.1"), Rt()).ok());
  ClearLog();
  ASSERT_TRUE(rt.DelNetworkList(List("0.3.1"), Rt()).ok());
  for (const auto& l : Log()) EXPECT_FALSE(l["stdin"].contains("prevResult"));
}

TEST_F(ChainTest, CheckUsesTheCachedResultAndHonoursDisableCheckAndVersion) {
  Runtime rt = Make();
  auto added = rt.AddNetworkList(List(), Rt());
  ASSERT_TRUE(added.ok());
  ClearLog();
  ASSERT_TRUE(rt.CheckNetworkList(List(), Rt()).ok());
  EXPECT_EQ(Calls(), (std::vector<std::string>{"a:CHECK", "b:CHECK", "c:CHECK"}));
  EXPECT_EQ(Log()[0]["stdin"]["prevResult"], added->json);
  ClearLog();
  Status failing = rt.CheckNetworkList(List("1.0.0", R"({"fail":{"CHECK":108}})"), Rt());
  EXPECT_EQ(cni::CodeOf(failing), cni::Code::kCheckFailed);
  EXPECT_EQ(Calls().size(), 2u);  // stops at b
  ClearLog();
  ASSERT_TRUE(rt.CheckNetworkList(List("1.0.0", "{}", R"("disableCheck":true,)"), Rt()).ok());
  EXPECT_TRUE(Calls().empty());
  Status old = rt.CheckNetworkList(List("0.3.1"), Rt());
  EXPECT_EQ(cni::CodeOf(old), cni::Code::kIncompatibleVersion);
  EXPECT_NE(old.msg().find("does not support the CHECK command"), std::string::npos);
  EXPECT_TRUE(Calls().empty());
}

TEST_F(ChainTest, StatusOnlyFrom110AndStopsAtTheFirstError) {
  Runtime rt = Make();
  ASSERT_TRUE(rt.StatusNetworkList(List("1.0.0")).ok());
  EXPECT_TRUE(Calls().empty());
  ASSERT_TRUE(rt.StatusNetworkList(List("1.1.0")).ok());
  EXPECT_EQ(Calls(), (std::vector<std::string>{"a:STATUS", "b:STATUS", "c:STATUS"}));
  for (const auto& l : Log()) {
    EXPECT_EQ(l["env"]["CNI_CONTAINERID"], "");
    EXPECT_FALSE(l["stdin"].contains("runtimeConfig"));
    EXPECT_FALSE(l["stdin"].contains("prevResult"));
  }
  ClearLog();
  Status st = rt.StatusNetworkList(List("1.1.0", R"({"fail":{"STATUS":50}})"));
  EXPECT_EQ(cni::CodeOf(st), cni::Code::kNotAvailable);
  EXPECT_EQ(Calls().size(), 2u);
}

TEST_F(ChainTest, GcDeletesStaleCachedAttachmentsThenSendsGcFrom110) {
  Runtime rt = Make();
  for (const char* cid : {"c1", "c2"}) ASSERT_TRUE(rt.AddNetworkList(List("1.1.0"), Rt(cid)).ok());
  auto other = ParseConfList(R"({"cniVersion":"1.1.0","name":"other","plugins":[{"type":"a"}]})");
  ASSERT_TRUE(rt.AddNetworkList(*other, Rt("c3")).ok());
  ClearLog();
  ASSERT_TRUE(rt.GcNetworkList(List("1.1.0"), std::vector<cni::Attachment>{{"c1", "eth0"}}).ok());
  EXPECT_EQ(Calls(), (std::vector<std::string>{"c:DEL", "b:DEL", "a:DEL", "a:GC", "b:GC", "c:GC"}));
  auto log = Log();
  EXPECT_EQ(log[0]["env"]["CNI_CONTAINERID"], "c2");
  EXPECT_EQ(log[0]["env"]["CNI_NETNS"], "/run/netns/c2");  // from the cache
  EXPECT_EQ(log[3]["stdin"]["cni.dev/valid-attachments"],
            json::parse(R"([{"containerID":"c1","ifname":"eth0"}])"));
  EXPECT_TRUE(std::filesystem::exists(CacheFile("c1")));
  EXPECT_FALSE(std::filesystem::exists(CacheFile("c2")));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "cache/results/other-c3-eth0"));
}

TEST_F(ChainTest, GcBelow110OnlyDeletesAndDisableGcDoesNothing) {
  Runtime rt = Make();
  ASSERT_TRUE(rt.AddNetworkList(List("1.0.0"), Rt("c1")).ok());
  ClearLog();
  ASSERT_TRUE(rt.GcNetworkList(List("1.0.0", "{}", R"("disableGC":true,)"), std::nullopt).ok());
  EXPECT_TRUE(Calls().empty());
  EXPECT_TRUE(std::filesystem::exists(CacheFile("c1")));
  ASSERT_TRUE(rt.GcNetworkList(List("1.0.0"), std::nullopt).ok());
  EXPECT_EQ(Calls(), (std::vector<std::string>{"c:DEL", "b:DEL", "a:DEL"}));
  EXPECT_FALSE(std::filesystem::exists(CacheFile("c1")));
}

TEST_F(ChainTest, DelFromCacheAloneUsesTheCachedConfigArgsAndResult) {
  Runtime rt = Make();
  auto added = rt.AddNetworkList(List(), Rt());
  ASSERT_TRUE(added.ok());
  ClearLog();
  ASSERT_TRUE(rt.DelFromCache("net", "c1", "eth0", std::string()).ok());
  EXPECT_EQ(Calls(), (std::vector<std::string>{"c:DEL", "b:DEL", "a:DEL"}));
  auto log = Log();
  EXPECT_EQ(log[0]["env"]["CNI_NETNS"], "");
  EXPECT_EQ(log[0]["env"]["CNI_ARGS"], "IgnoreUnknown=1;K8S_POD_NAME=web");
  EXPECT_EQ(log[1]["stdin"]["runtimeConfig"]["portMappings"][0]["hostPort"], 80);
  EXPECT_EQ(log[2]["stdin"]["prevResult"], added->json);
  EXPECT_FALSE(std::filesystem::exists(CacheFile()));
  EXPECT_EQ(cni::CodeOf(rt.DelFromCache("net", "c1", "eth0", std::nullopt)), cni::Code::kUnknownContainer);
}

TEST_F(ChainTest, CrashAndHangInAChainAreNamed) {
  Runtime rt = Make();
  Status crash = rt.AddNetworkList(List("1.0.0", R"({"crash":["ADD"]})"), Rt()).status();
  EXPECT_EQ(cni::CodeOf(crash), cni::Code::kExec);
  EXPECT_NE(crash.msg().find("type=\"b\""), std::string::npos);
  EXPECT_NE(crash.msg().find("signal 11"), std::string::npos) << crash.msg();
  RuntimeOptions o;
  o.invoke.plugin_dirs = {dir_ / "bin"};
  o.invoke.timeout = std::chrono::milliseconds(200);
  o.cache_dir = dir_ / "cache";
  Status hang = Runtime(o).CheckNetworkList(List("1.0.0", R"({"hang":["CHECK"]})"), Rt());
  EXPECT_EQ(cni::CodeOf(hang), cni::Code::kExec);
  EXPECT_NE(hang.msg().find("did not finish"), std::string::npos) << hang.msg();
}

TEST_F(ChainTest, NegotiationPicksTheHighestOfferedVersionEveryPluginSpeaks) {
  NetworkConfigList l = List("1.1.0", "{}", R"("cniVersions":["0.4.0","1.0.0","1.1.0"],)");
  EXPECT_EQ(l.offered_versions, (std::vector<std::string>{"0.4.0", "1.0.0", "1.1.0"}));
  auto v = Make({"FAKE_VERSIONS=0.3.1,0.4.0,1.0.0"}).NegotiateVersion(&l);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "1.0.0");
  EXPECT_EQ(l.cni_version, "1.0.0");
  EXPECT_NE(l.version_reason.find("negotiated"), std::string::npos);
  // The negotiated version is what the plugins then get.
  ClearLog();
  ASSERT_TRUE(Make().AddNetworkList(l, Rt()).ok());
  EXPECT_EQ(Log()[0]["stdin"]["cniVersion"], "1.0.0");
  NetworkConfigList all = List("1.1.0", "{}", R"("cniVersions":["1.1.0"],)");
  EXPECT_EQ(*Make().NegotiateVersion(&all), "1.1.0");
  NetworkConfigList none = List("1.1.0", "{}", R"("cniVersions":["1.1.0"],)");
  auto bad = Make({"FAKE_VERSIONS=0.4.0"}).NegotiateVersion(&none);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(cni::CodeOf(bad.status()), cni::Code::kIncompatibleVersion);
  EXPECT_NE(bad.status().msg().find("not by a, b, c"), std::string::npos) << bad.status().msg();
}

TEST_F(ChainTest, ValidateAsksEveryPluginForItsVersions) {
  auto caps = Make().ValidateNetworkList(List("1.0.0"));
  ASSERT_TRUE(caps.ok()) << caps.status().ToString();
  EXPECT_EQ(*caps, (std::vector<std::string>{"bandwidth", "portMappings"}));
  auto old = Make({"FAKE_VERSIONS=0.3.1,0.4.0,1.0.0"}).ValidateNetworkList(List("1.1.0"));
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(cni::CodeOf(old.status()), cni::Code::kIncompatibleVersion);
  EXPECT_NE(old.status().msg().find("does not support config version \"1.1.0\""), std::string::npos);
}

}  // namespace
}  // namespace weft::runtime
