#include "runtime/conf.h"
#include "cni/errors.h"

#include <gtest/gtest.h>

#include "runtime/test_helpers.h"

namespace weft::runtime {
namespace {

using testing::ScratchDir;
using testing::WriteText;

std::string List(const std::string& name, const std::string& extra = "", const std::string& version = "1.0.0") {
  return R"({"cniVersion":")" + version + R"(","name":")" + name + R"(",)" + extra +
         R"("plugins":[{"type":"bridge"}]})";
}

TEST(ConfDir, FirstFileInLexicalOrderIsTheDefault) {
  ScratchDir d;
  WriteText(d / "20-b.conflist", List("b"));
  WriteText(d / "10-a.conflist", List("a"));
  WriteText(d / "99-c.conflist", List("c"));
  LoadReport r = LoadConfDir({d.path(), 1});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_EQ(r.networks.size(), 1u);
  EXPECT_EQ(r.networks[0].list.name, "a");
  EXPECT_EQ(r.networks[0].list.file, d / "10-a.conflist");
  EXPECT_EQ(r.networks[0].ifname, "eth0");
  EXPECT_EQ(r.candidates.size(), 3u);
  EXPECT_EQ(r.not_read, (std::vector<std::string>{d / "20-b.conflist", d / "99-c.conflist"}));
}

TEST(ConfDir, OnlyConfConflistAndJsonAreCandidatesAndDirsAreIgnored) {
  ScratchDir d;
  WriteText(d / "00-notes.txt", List("txt"));
  WriteText(d / "00-backup.conflist.bak", List("bak"));
  std::filesystem::create_directories(d / "05-dir.conflist");
  WriteText(d / "10-j.json", R"({"cniVersion":"1.0.0","name":"j","type":"bridge"})");
  LoadReport r = LoadConfDir({d.path(), 0});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_EQ(r.candidates.size(), 1u);
  EXPECT_EQ(r.networks[0].list.name, "j");
}

TEST(ConfDir, MaxNetworksLoadsThatManyWithNumberedInterfaces) {
  ScratchDir d;
  for (const char* n : {"a", "b", "c"}) WriteText(d / (std::string("10-") + n + ".conflist"), List(n));
  LoadReport two = LoadConfDir({d.path(), 2});
  ASSERT_EQ(two.networks.size(), 2u);
  EXPECT_EQ(two.networks[1].list.name, "b");
  EXPECT_EQ(two.networks[1].ifname, "eth1");
  EXPECT_EQ(two.not_read.size(), 1u);
  LoadReport all = LoadConfDir({d.path(), 0, "net"});
  ASSERT_EQ(all.networks.size(), 3u);
  EXPECT_EQ(all.networks[2].ifname, "net2");
}

TEST(ConfDir, SingleConfIsPromotedToAOnePluginList) {
  ScratchDir d;
  WriteText(d / "10-x.conf", R"({"cniVersion":"0.4.0","name":"x","type":"ptp","mtu":1400})");
  LoadReport r = LoadConfDir({d.path(), 1});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  const auto& l = r.networks[0].list;
  EXPECT_EQ(l.name, "x");
  EXPECT_EQ(l.cni_version, "0.4.0");
  ASSERT_EQ(l.plugins.size(), 1u);
  EXPECT_EQ(l.plugins[0].type, "ptp");
  EXPECT_EQ(l.plugins[0].raw["mtu"], 1400);
  // The cached "config" of a promoted conf is a list, as libcni makes it.
  auto j = nlohmann::json::parse(l.bytes);
  EXPECT_EQ(j["plugins"][0]["type"], "ptp");
  EXPECT_EQ(j["name"], "x");
}

TEST(ConfDir, ConfWithoutTypeIsSkippedWithTheReasonAndTheNextValidOneIsDefault) {
  ScratchDir d;
  // The classic mistake: a list saved as .conf.
  WriteText(d / "10-list-in-conf.conf", List("oops"));
  WriteText(d / "20-good.conflist", List("good"));
  LoadReport r = LoadConfDir({d.path(), 1});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.networks[0].list.name, "good");
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_EQ(r.skipped[0].file, d / "10-list-in-conf.conf");
  EXPECT_NE(r.skipped[0].reason.msg().find("network type not found"), std::string::npos) << r.skipped[0].reason.msg();
  // containerd's own loader would refuse the whole dir because of it.
  EXPECT_FALSE(r.containerd_status.ok());
  EXPECT_NE(r.containerd_status.msg().find("10-list-in-conf.conf"), std::string::npos);
}

TEST(ConfDir, InvalidJsonAndPluginWithoutTypeAreSkipped) {
  ScratchDir d;
  WriteText(d / "10-broken.conflist", R"({"name": "x", "plugins": [)");
  WriteText(d / "20-notype.conflist", R"({"cniVersion":"1.0.0","name":"n","plugins":[{"mtu":1}]})");
  WriteText(d / "30-ok.conflist", List("ok"));
  LoadReport r = LoadConfDir({d.path(), 1});
  ASSERT_EQ(r.skipped.size(), 2u);
  EXPECT_EQ(cni::CodeOf(r.skipped[0].reason), cni::Code::kDecode);
  EXPECT_EQ(cni::CodeOf(r.skipped[1].reason), cni::Code::kInvalidConfig);
  EXPECT_NE(r.skipped[1].reason.msg().find("missing 'type'"), std::string::npos) << r.skipped[1].reason.msg();
  EXPECT_EQ(r.networks[0].list.name, "ok");
}

TEST(ConfDir, InvalidFilesAfterTheMaxAreNotReadSoContainerdIsFine) {
  ScratchDir d;
  WriteText(d / "10-ok.conflist", List("ok"));
  WriteText(d / "20-broken.conflist", "{");
  LoadReport r = LoadConfDir({d.path(), 1});
  EXPECT_TRUE(r.status.ok());
  EXPECT_TRUE(r.containerd_status.ok());
  EXPECT_TRUE(r.skipped.empty());
}

TEST(ConfDir, EmptyMissingAndAllInvalidDirsFailWithTheReason) {
  ScratchDir d;
  LoadReport empty = LoadConfDir({d.path(), 1});
  EXPECT_FALSE(empty.status.ok());
  EXPECT_NE(empty.status.msg().find("no network config found"), std::string::npos);
  LoadReport missing = LoadConfDir({d / "nope", 1});
  EXPECT_FALSE(missing.status.ok());
  WriteText(d / "10-bad.conf", "[]");
  LoadReport bad = LoadConfDir({d.path(), 1});
  EXPECT_FALSE(bad.status.ok());
  EXPECT_NE(bad.status.msg().find("no valid networks found"), std::string::npos);
  EXPECT_EQ(bad.skipped.size(), 1u);
}

TEST(ConfList, CniVersionsPicksTheHighestNotAbove110) {
  auto l = ParseConfList(R"({"name":"n","cniVersions":["0.4.0","1.1.0","1.0.0","2.0.0"],"plugins":[{"type":"x"}]})");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->cni_version, "1.1.0");
  EXPECT_NE(l->version_reason.find("2.0.0"), std::string::npos);
  auto mixed = ParseConfList(R"({"name":"n","cniVersion":"0.3.1","cniVersions":["1.0.0"],"plugins":[{"type":"x"}]})");
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed->cni_version, "1.0.0");
  auto future = ParseConfList(R"({"name":"n","cniVersion":"1.0.0","cniVersions":["9.9.9"],"plugins":[{"type":"x"}]})");
  ASSERT_TRUE(future.ok());
  EXPECT_EQ(future->cni_version, "1.0.0");
  auto plain = ParseConfList(R"({"name":"n","cniVersion":"0.4.0","plugins":[{"type":"x"}]})");
  EXPECT_EQ(plain->cni_version, "0.4.0");
  EXPECT_FALSE(ParseConfList(R"({"name":"n","cniVersions":["one"],"plugins":[{"type":"x"}]})").ok());
  EXPECT_FALSE(ParseConfList(R"({"name":"n","cniVersions":"1.0.0","plugins":[{"type":"x"}]})").ok());
}

TEST(ConfList, BooleanFieldsAcceptBoolsAndTrueFalseStrings) {
  auto l = ParseConfList(
      R"({"name":"n","disableCheck":true,"disableGC":"True","loadOnlyInlinedPlugins":"false","plugins":[{"type":"x"}]})");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_TRUE(l->disable_check);
  EXPECT_TRUE(l->disable_gc);
  EXPECT_FALSE(l->load_only_inlined_plugins);
  auto bad = ParseConfList(R"({"name":"n","disableCheck":"yes","plugins":[{"type":"x"}]})");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(cni::CodeOf(bad.status()), cni::Code::kInvalidConfig);
}

TEST(ConfList, StructuralErrors) {
  EXPECT_EQ(cni::CodeOf(ParseConfList("{").status()), cni::Code::kDecode);
  EXPECT_FALSE(ParseConfList(R"({"plugins":[{"type":"x"}]})").ok());            // no name
  EXPECT_FALSE(ParseConfList(R"({"name":"n","plugins":[]})").ok());             // empty list
  EXPECT_FALSE(ParseConfList(R"({"name":"n","plugins":{"type":"x"}})").ok());   // not an array
  EXPECT_FALSE(ParseConfList(R"({"name":"n","plugins":[{"type":"x","capabilities":{"a":1}}]})").ok());
  EXPECT_FALSE(ParseConfList(R"({"name":"n","loadOnlyInlinedPlugins":true})").ok());
  EXPECT_TRUE(ParseConfList(R"({"name":"n"})").ok());  // drop-ins may supply the plugins
}

TEST(ConfList, DropInPluginsAreAppendedInOrderUnlessOnlyInlined) {
  ScratchDir d;
  WriteText(d / "10-net.conflist", List("net"));
  WriteText(d / "net/20-second.conf", R"({"type":"portmap","capabilities":{"portMappings":true}})");
  WriteText(d / "net/10-first.conf", R"({"type":"tuning"})");
  WriteText(d / "net/30-ignored.json", R"({"type":"ignored"})");
  auto l = LoadConfFile(d / "10-net.conflist");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->plugins.size(), 3u);
  EXPECT_EQ(l->plugins[0].type, "bridge");
  EXPECT_EQ(l->plugins[1].type, "tuning");
  EXPECT_EQ(l->plugins[2].type, "portmap");
  EXPECT_EQ(l->plugins[2].source, d / "net/20-second.conf");
  EXPECT_EQ(l->plugins[2].Capabilities(), std::vector<std::string>{"portMappings"});

  WriteText(d / "20-inl.conflist", List("net", R"("loadOnlyInlinedPlugins":true,)"));
  auto inl = LoadConfFile(d / "20-inl.conflist");
  ASSERT_TRUE(inl.ok());
  EXPECT_EQ(inl->plugins.size(), 1u);
}

TEST(ConfList, AListOfOnlyDropInsIsValidAndABadDropInFailsTheList) {
  ScratchDir d;
  WriteText(d / "10-dyn.conflist", R"({"cniVersion":"1.1.0","name":"dyn"})");
  auto none = LoadConfFile(d / "10-dyn.conflist");
  EXPECT_FALSE(none.ok());
  EXPECT_NE(none.status().msg().find("no plugin configs found"), std::string::npos);
  WriteText(d / "dyn/10-a.conf", R"({"type":"a"})");
  auto one = LoadConfFile(d / "10-dyn.conflist");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->plugins.size(), 1u);
  WriteText(d / "dyn/20-b.conf", R"({"notype":true})");
  auto bad = LoadConfFile(d / "10-dyn.conflist");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().msg().find("20-b.conf"), std::string::npos);
}

TEST(ConfList, FindNetworkByNamePrefersConflists) {
  ScratchDir d;
  WriteText(d / "10-x.conf", R"({"cniVersion":"1.0.0","name":"x","type":"from-conf"})");
  WriteText(d / "90-x.conflist", R"({"cniVersion":"1.0.0","name":"x","plugins":[{"type":"from-list"}]})");
  auto l = FindNetwork(d.path(), "x");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->plugins[0].type, "from-list");
  WriteText(d / "00-broken.conflist", "{");
  ASSERT_TRUE(FindNetwork(d.path(), "x").ok());  // a broken file does not hide x
  auto missing = FindNetwork(d.path(), "y");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().msg().find("no net configuration with name \"y\""), std::string::npos);
  EXPECT_NE(missing.status().msg().find("00-broken.conflist does not load"), std::string::npos) << missing.status().msg();
}

TEST(ConfList, LoopbackNetworkIsWhatContainerdAdds) {
  NetworkConfigList lo = LoopbackNetwork();
  EXPECT_EQ(lo.name, "cni-loopback");
  EXPECT_EQ(lo.cni_version, "0.3.1");
  ASSERT_EQ(lo.plugins.size(), 1u);
  EXPECT_EQ(lo.plugins[0].type, "loopback");
}

}  // namespace
}  // namespace weft::runtime
