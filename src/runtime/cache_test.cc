#include "runtime/cache.h"

#include <gtest/gtest.h>

#include "base/strings.h"
#include "runtime/test_helpers.h"

namespace weft::runtime {
namespace {

using nlohmann::json;
using testing::FileMode;
using testing::ReadText;
using testing::ScratchDir;
using testing::WriteText;

// The Base64 assertions that were here live in base/strings_test.cc.

RuntimeConf Rt(const std::string& cid) {
  return {cid, "/run/netns/" + cid, "eth0", {{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "web"}},
          {{"portMappings", json::array({{{"hostPort", 80}, {"containerPort", 8080}, {"protocol", "tcp"}}})}}};
}

json Result100() {
  return json::parse(R"({"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/c1"}],
                         "ips":[{"address":"10.0.0.5/24","gateway":"10.0.0.1","interface":0}]})");
}

TEST(ResultCache, WritesLibcniFormatAt0600In0700) {
  ScratchDir d;
  ResultCache cache(d.path());
  const std::string config = R"({"cniVersion":"1.0.0","name":"net","plugins":[{"type":"bridge"}]})";
  ASSERT_TRUE(cache.Add("net", config, Rt("c1"), Result100()).ok());
  std::string path = d / "results/net-c1-eth0";
  EXPECT_EQ(FileMode(path), 0600);
  EXPECT_EQ(FileMode(d / "results"), 0700);
  std::string text = ReadText(path);
  // Go's field order for libcni's cachedInfo.
  std::vector<std::string> order = {"\"kind\"", "\"containerId\"", "\"config\"", "\"ifName\"", "\"networkName\"",
                                    "\"netns\"", "\"cniArgs\"", "\"capabilityArgs\"", "\"result\""};
  size_t last = 0;
  for (const auto& k : order) {
    size_t at = text.find(k);
    ASSERT_NE(at, std::string::npos) << k;
    EXPECT_GT(at + 1, last) << k << " out of order in " << text;
    last = at;
  }
  json j = json::parse(text);
  EXPECT_EQ(j["kind"], "cniCacheV1");
  EXPECT_EQ(j["config"], Base64Encode(config));
  EXPECT_EQ(j["cniArgs"][1], json::array({"K8S_POD_NAME", "web"}));
  EXPECT_EQ(j["result"], Result100());
}

TEST(ResultCache, EmptyFieldsAreOmittedAsGoDoes) {
  ScratchDir d;
  ResultCache cache(d.path());
  RuntimeConf rt{"c2", "", "eth1", {}, json::object()};
  ASSERT_TRUE(cache.Add("net", "{}", rt, Result100()).ok());
  json j = json::parse(ReadText(d / "results/net-c2-eth1"));
  EXPECT_FALSE(j.contains("netns"));
  EXPECT_FALSE(j.contains("cniArgs"));
  EXPECT_FALSE(j.contains("capabilityArgs"));
}

// A file exactly as libcni (containerd, podman) writes it.
constexpr const char* kLibcniFile =
    R"({"kind":"cniCacheV1","containerId":"abc123","config":"eyJjbmlWZXJzaW9uIjoiMS4wLjAiLCJuYW1lIjoicG9kbmV0IiwicGx1Z2lucyI6W3sidHlwZSI6ImJyaWRnZSJ9XX0=","ifName":"eth0","networkName":"podnet","netns":"/run/netns/cni-1","cniArgs":[["IgnoreUnknown","1"],["K8S_POD_NAMESPACE","default"]],"capabilityArgs":{"portMappings":[{"HostPort":8080,"ContainerPort":80,"Protocol":"tcp"}]},"result":{"cniVersion":"1.0.0","interfaces":[{"name":"cni0","mac":"aa:bb:cc:dd:ee:ff"},{"name":"eth0","mac":"11:22:33:44:55:66","sandbox":"/run/netns/cni-1"}],"ips":[{"interface":1,"address":"10.88.0.7/16","gateway":"10.88.0.1"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{}}})";

TEST(ResultCache, ReadsWhatLibcniWrote) {
  ScratchDir d;
  WriteText(d / "results/podnet-abc123-eth0", kLibcniFile);
  ResultCache cache(d.path());
  auto a = cache.Get("podnet", "abc123", "eth0");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->config, R"({"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge"}]})");
  EXPECT_EQ((*a)->netns, "/run/netns/cni-1");
  EXPECT_EQ((*a)->args.size(), 2u);
  EXPECT_EQ((*a)->capability_args["portMappings"][0]["HostPort"], 8080);
  RuntimeConf rt{"abc123", "", "eth0", {}, json::object()};
  auto r = cache.GetResult("podnet", "0.4.0", rt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->ips[0].address.ToString(), "10.88.0.7/16");
  auto all = cache.List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].network, "podnet");
}

TEST(ResultCache, LegacyBareResultIsReadWrongKindIsRefusedAndMissingIsNone) {
  ScratchDir d;
  WriteText(d / "results/old-c1-eth0", R"({"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.1.0.2/24"}]})");
  WriteText(d / "results/odd-c1-eth0", R"({"kind":"somethingElse","containerId":"c1"})");
  ResultCache cache(d.path());
  RuntimeConf rt{"c1", "", "eth0", {}, json::object()};
  auto legacy = cache.GetResult("old", "0.3.1", rt);
  ASSERT_TRUE(legacy.ok()) << legacy.status().ToString();
  ASSERT_TRUE(legacy->has_value());
  EXPECT_FALSE(cache.Get("odd", "c1", "eth0").ok());
  auto none = cache.GetResult("nothing", "1.0.0", rt);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto all = cache.List();
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());  // neither is a cniCacheV1 attachment
}

TEST(ResultCache, ListFiltersByContainerAndDelRemoves) {
  ScratchDir d;
  ResultCache cache(d.path());
  ASSERT_TRUE(cache.Add("net", "{}", Rt("c1"), Result100()).ok());
  ASSERT_TRUE(cache.Add("net", "{}", Rt("c2"), Result100()).ok());
  ASSERT_TRUE(cache.Add("other", "{}", Rt("c1"), Result100()).ok());
  auto c1 = cache.List("c1");
  ASSERT_TRUE(c1.ok());
  EXPECT_EQ(c1->size(), 2u);
  ASSERT_TRUE(cache.Del("net", "c1", "eth0").ok());
  EXPECT_TRUE(cache.Del("net", "c1", "eth0").ok());  // already gone is fine
  EXPECT_EQ(cache.List()->size(), 2u);
}

TEST(ResultCache, NamesThatCouldEscapeTheDirAreRefused) {
  ResultCache cache("/nonexistent");
  EXPECT_FALSE(cache.PathFor("..", "c1", "eth0").ok());
  EXPECT_FALSE(cache.PathFor("net", "a/b", "eth0").ok());
  EXPECT_FALSE(cache.PathFor("net", "c1", "").ok());
  EXPECT_EQ(*cache.PathFor("net", "c1", "eth0"), "/nonexistent/results/net-c1-eth0");
}

}  // namespace
}  // namespace weft::runtime
