#include "runtime/ctl.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <thread>

#include "runtime/test_helpers.h"

namespace weft::runtime::ctl {
namespace {

using nlohmann::json;
using runtime::testing::ReadLog;
using runtime::testing::ScratchDir;
using runtime::testing::WriteText;

TEST(CnitoolContainerId, MatchesCnitoolsDerivation) {
  // python3: "cnitool-" + hashlib.sha512(b"/var/run/netns/x").hexdigest()[:20]
  EXPECT_EQ(CnitoolContainerId("/var/run/netns/x"), "cnitool-4acf487154af9777be71");
}

class CtlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "bin");
    for (const char* t : {"a", "b"}) std::filesystem::create_symlink(WEFT_FAKE_PLUGIN, dir_ / ("bin/" + std::string(t)));
    WriteConf();
    env_ = {{"NETCONFPATH", dir_ / "net.d"}, {"CNI_PATH", dir_ / "bin"}};
  }
  void WriteConf() {
    WriteText(dir_ / "net.d/10-net.conflist",
              R"({"cniVersion":"1.1.0","name":"net","plugins":[{"type":"a"},
                  {"type":"b","capabilities":{"portMappings":true},"fake":)" + b_fake_ + "}]}");
  }
  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    Ctl ctl;
    AddCniCommands(ctl);
    ctl.SetVersion("weftctl 1.2.3 (commit 0123456789ab)");
    Context ctx;
    ctx.getenv = [this](const char* k) -> const char* {
      auto it = env_.find(k);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
    ctx.environ = {"FAKE_LOG=" + (dir_ / "log")};
    for (const auto& e : ctx_env_extra_) ctx.environ.push_back(e);
    ctx.out = &out_;
    ctx.err = &err_;
    args.insert(args.begin(), "weftctl");
    args.insert(args.begin() + 1, {"--cache-dir", dir_ / "cache"});
    std::vector<const char*> argv;
    for (auto& a : args) argv.push_back(a.c_str());
    return ctl.Main(static_cast<int>(argv.size()), argv.data(), ctx);
  }
  std::vector<json> Log() { return ReadLog(dir_ / "log"); }

  ScratchDir dir_;
  std::string b_fake_ = "{}";
  std::vector<std::string> ctx_env_extra_;
  std::map<std::string, std::string> env_;
  std::ostringstream out_, err_;
};

TEST_F(CtlTest, AddHonoursTheCnitoolEnvironmentAndPrintsTheResult) {
  env_["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAME=web";
  env_["CAP_ARGS"] = R"({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]})";
  env_["CNI_IFNAME"] = "net1";
  ASSERT_EQ(Run({"add", "net", "/var/run/netns/x"}), kExitOk) << err_.str();
  json result = json::parse(out_.str());
  EXPECT_EQ(result["cniVersion"], "1.1.0");
  EXPECT_EQ(result["interfaces"].back()["name"], "b");
  auto log = Log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[1]["env"]["CNI_CONTAINERID"], "cnitool-4acf487154af9777be71");
  EXPECT_EQ(log[1]["env"]["CNI_IFNAME"], "net1");
  EXPECT_EQ(log[1]["env"]["CNI_ARGS"], "IgnoreUnknown=1;K8S_POD_NAME=web");
  EXPECT_EQ(log[1]["stdin"]["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "cache/results/net-cnitool-4acf487154af9777be71-net1"));
}

TEST_F(CtlTest, DelFallsBackToTheCacheWhenTheNetworkIsGone) {
  ASSERT_EQ(Run({"add", "net", "/var/run/netns/x", "--container-id", "c1"}), kExitOk) << err_.str();
  json added = json::parse(out_.str());
  std::filesystem::remove(dir_ / "net.d/10-net.conflist");
  std::filesystem::remove(dir_ / "log");
  ASSERT_EQ(Run({"del", "net", "--container-id", "c1"}), kExitOk) << err_.str();
  EXPECT_NE(err_.str().find("torn down from its cache entry"), std::string::npos);
  auto log = Log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0]["stdin"]["type"], "b");
  EXPECT_EQ(log[0]["env"]["CNI_NETNS"], "");
  EXPECT_EQ(log[0]["stdin"]["prevResult"], added);
  // Nothing left: a second DEL has neither config nor cache.
  EXPECT_EQ(Run({"del", "net", "--container-id", "c1"}), kExitConfig);
}

TEST_F(CtlTest, ExitCodesForScripts) {
  EXPECT_EQ(Run({"--help"}), kExitOk);
  EXPECT_NE(out_.str().find("Usage"), std::string::npos);
  EXPECT_NE(out_.str().find("--version"), std::string::npos);
  EXPECT_EQ(Run({"--version"}), kExitOk);  // no subcommand needed
  EXPECT_EQ(out_.str(), "weftctl 1.2.3 (commit 0123456789ab)\n");
  EXPECT_EQ(err_.str(), "");
  EXPECT_EQ(Run({"gc", "--help"}), kExitOk);
  EXPECT_NE(out_.str().find("--valid"), std::string::npos);
  EXPECT_EQ(Run({"add", "net"}), kExitUsage);                      // no netns
  EXPECT_EQ(Run({"add", "nosuch", "/run/netns/x"}), kExitConfig);  // no network
  EXPECT_NE(err_.str().find("no net configuration with name \"nosuch\""), std::string::npos) << err_.str();
  env_["CAP_ARGS"] = "{not json";
  EXPECT_EQ(Run({"add", "net", "/run/netns/x"}), kExitUsage);
  env_.erase("CAP_ARGS");
  env_["CNI_ARGS"] = "novalue";
  EXPECT_EQ(Run({"add", "net", "/run/netns/x"}), kExitUsage);
  env_.erase("CNI_ARGS");
  EXPECT_EQ(Run({"gc", "net", "--valid", "nonsense"}), kExitUsage);
  env_["CNI_PATH"] = dir_ / "nothing";
  EXPECT_EQ(Run({"add", "net", "/run/netns/x"}), kExitExec);
}

TEST_F(CtlTest, PluginErrorsExitOneAndPrintTheCniErrorWithJson) {
  b_fake_ = R"({"fail":{"ADD":7}})";
  WriteConf();
  EXPECT_EQ(Run({"--json", "add", "net", "/run/netns/x"}), kExitFailed);
  json j = json::parse(out_.str());
  EXPECT_EQ(j["code"], 7);
  EXPECT_NE(j["msg"].get<std::string>().find("plugin type=\"b\" failed (add)"), std::string::npos);
  EXPECT_NE(err_.str().find("(CNI error 7)"), std::string::npos);
}

TEST_F(CtlTest, StatusAndGcReachThePlugins) {
  ASSERT_EQ(Run({"add", "net", "/run/netns/x", "--container-id", "c1"}), kExitOk);
  ASSERT_EQ(Run({"add", "net", "/run/netns/y", "--container-id", "c2"}), kExitOk);
  std::filesystem::remove(dir_ / "log");
  ASSERT_EQ(Run({"status", "net"}), kExitOk) << err_.str();
  EXPECT_NE(out_.str().find("is ready"), std::string::npos);
  ASSERT_EQ(Run({"gc", "net", "--valid", "c1/eth0"}), kExitOk) << err_.str();
  std::vector<std::string> calls;
  for (const auto& l : Log()) calls.push_back(l["stdin"]["type"].get<std::string>() + ":" + l["env"]["CNI_COMMAND"].get<std::string>() + ":" + l["env"]["CNI_CONTAINERID"].get<std::string>());
  EXPECT_EQ(calls, (std::vector<std::string>{"a:STATUS:", "b:STATUS:", "b:DEL:c2", "a:DEL:c2", "a:GC:", "b:GC:"}));
}

TEST_F(CtlTest, ConfExplainsTheDefaultAndTheSkippedFiles) {
  WriteText(dir_ / "net.d/00-bad.conf", R"({"name":"bad","plugins":[]})");
  ASSERT_EQ(Run({"conf"}), kExitOk) << err_.str();
  std::string text = out_.str();
  EXPECT_NE(text.find("default:      \"net\" from 10-net.conflist"), std::string::npos) << text;
  EXPECT_NE(text.find("skipped:      00-bad.conf: network type not found"), std::string::npos) << text;
  EXPECT_NE(text.find("containerd:   would refuse"), std::string::npos) << text;
  ASSERT_EQ(Run({"--json", "conf"}), kExitOk);
  json j = json::parse(out_.str());
  EXPECT_EQ(j["networks"][0]["name"], "net");
  EXPECT_EQ(j["networks"][0]["plugins"][1]["capabilities"], json::array({"portMappings"}));
  EXPECT_EQ(j["skipped"][0]["code"], 7);
  EXPECT_EQ(j["lastCNILoadStatus"], "OK");
  std::filesystem::remove(dir_ / "net.d/10-net.conflist");
  EXPECT_EQ(Run({"conf"}), kExitConfig);
  EXPECT_NE(out_.str().find("no valid networks found"), std::string::npos) << out_.str();
}

TEST_F(CtlTest, ConfWatchPrintsEveryReloadWithTheLoadStatus) {
  std::thread writer([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    WriteText(dir_ / "net.d/05-first.conflist", R"({"cniVersion":"1.0.0","name":"first","plugins":[{"type":"a"}]})");
  });
  int rc = Run({"conf", "--watch", "2"});
  writer.join();
  EXPECT_EQ(rc, kExitOk);
  EXPECT_NE(out_.str().find("load 0: default=\"net\" skipped=0 status=OK"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("default=\"first\""), std::string::npos) << out_.str();
}

TEST_F(CtlTest, NegotiateVersionLowersTheListToWhatThePluginsSpeak) {
  WriteText(dir_ / "net.d/10-net.conflist",
            R"({"cniVersions":["0.4.0","1.0.0","1.1.0"],"name":"net","plugins":[{"type":"a"},{"type":"b"}]})");
  ctx_env_extra_ = {"FAKE_VERSIONS=0.4.0,1.0.0"};
  ASSERT_EQ(Run({"--negotiate-version", "add", "net", "/run/netns/x"}), kExitOk) << err_.str();
  EXPECT_EQ(json::parse(out_.str())["cniVersion"], "1.0.0");
  int adds = 0;
  for (const auto& l : Log()) {
    if (l["env"]["CNI_COMMAND"] != "ADD") continue;
    ++adds;
    EXPECT_EQ(l["stdin"]["cniVersion"], "1.0.0");
  }
  EXPECT_EQ(adds, 2);
  ASSERT_EQ(Run({"--negotiate-version", "del", "net", "/run/netns/x"}), kExitOk) << err_.str();
  // Without it, libcni's rule: the highest offered version, 1.1.0.
  ASSERT_EQ(Run({"add", "net", "/run/netns/y"}), kExitOk) << err_.str();
  EXPECT_EQ(json::parse(out_.str())["cniVersion"], "1.1.0");
}

TEST_F(CtlTest, ConfValidateFlagsPluginsThatCannotSpeakTheListsVersion) {
  ASSERT_EQ(Run({"conf", "--validate"}), kExitOk) << out_.str();
  std::filesystem::remove(dir_ / "bin/b");
  EXPECT_EQ(Run({"conf"}), kExitConfig);
  EXPECT_NE(out_.str().find("NOT FOUND"), std::string::npos) << out_.str();
}

}  // namespace
}  // namespace weft::runtime::ctl
