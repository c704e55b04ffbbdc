#include "plugin/config.h"

#include <gtest/gtest.h>

namespace weft::plugin {
namespace {

Result<Config> Parse(const std::string& s) {
  auto n = cni::ParseNetConf(s);
  if (!n.ok()) return n.status();
  return ParseConfig(*n);
}

TEST(Config, TheDocumentedExampleParses) {
  auto c = Parse(R"({"cniVersion":"1.1.0","name":"weft","type":"weft","mode":"routed","mtu":1450,
     "masquerade":true,"dataDir":"/var/lib/weft","ranges":["10.244.2.0/24"]})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->mode, Mode::kRouted);
  EXPECT_EQ(c->mtu, 1450);
  EXPECT_TRUE(c->masquerade);
  EXPECT_EQ(c->ranges.size(), 1u);
}

TEST(Config, UnknownKeysAreIgnored) {
  auto c = Parse(R"({"cniVersion":"1.0.0","name":"w","type":"weft","ranges":["10.0.0.0/24"],"fancy":{"x":1}})");
  EXPECT_TRUE(c.ok());
}

TEST(Config, InvalidValuesAreCode7NamingTheField) {
  struct Case {
    const char* json;
    const char* field;
  } cases[] = {
      {R"("ranges":["10.0.0.0/33"])", "ranges"},
      {R"("ranges":["10.0.0.1/24"])", "ranges"},
      {R"("ranges":["banana"])", "ranges"},
      {R"("ranges":[])", "ranges"},
      {R"("ranges":"10.0.0.0/24")", "ranges"},
      {R"("ranges":["10.0.0.0/24","10.0.0.0/25"])", "ranges"},
      {R"("ranges":["10.0.0.0/24"],"mode":"vxlan")", "mode"},
      {R"("ranges":["10.0.0.0/24"],"mode":5)", "mode"},
      {R"("ranges":["10.0.0.0/24"],"mtu":10)", "mtu"},
      {R"("ranges":["10.0.0.0/24"],"mtu":70000)", "mtu"},
      {R"("ranges":["10.0.0.0/24"],"mtu":"1500")", "mtu"},
      {R"("ranges":["10.0.0.0/24"],"masquerade":"yes")", "masquerade"},
      {R"("ranges":["10.0.0.0/24"],"masqueradeBackend":"pf")", "masqueradeBackend"},
      {R"("ranges":["10.0.0.0/24"],"dataDir":"relative")", "dataDir"},
      {R"("ranges":["10.0.0.0/24"],"dataDir":"/var/../etc")", "dataDir"},
      {R"("ranges":["10.0.0.0/24"],"clusterCIDRs":["x"])", "clusterCIDRs"},
      {R"("ranges":["10.0.0.0/24"],"logLevel":"loud")", "logLevel"},
  };
  for (const auto& c : cases) {
    auto r = Parse(std::string(R"({"cniVersion":"1.0.0","name":"w","type":"weft",)") + c.json + "}");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), Code::kInvalidConfig) << c.json;
    EXPECT_NE(r.status().msg().find(std::string("\"") + c.field + "\""), std::string::npos)
        << c.json << " -> " << r.status().msg();
  }
}

TEST(Config, HostVethNamesAreStableAndShort) {
  std::string a = HostVethName("abc", "eth0");
  EXPECT_EQ(a, HostVethName("abc", "eth0"));
  EXPECT_NE(a, HostVethName("abc", "eth1"));
  EXPECT_NE(a, HostVethName("abd", "eth0"));
  EXPECT_EQ(a.size(), 15u);
  EXPECT_EQ(a.substr(0, 3), "wft");
}

}  // namespace
}  // namespace weft::plugin

namespace weft::plugin {
namespace {

TEST(Config, SeedZeroConflistIsBridgeModeWithDelegatedIpam) {
  auto c = Parse(R"({"cniVersion":"1.0.0","name":"custom-bridge","type":"weft","bridge":"cnibr0","mtu":1450,
     "masquerade":true,"masqueradeBackend":"iptables","ipam":{"type":"host-local",
     "routes":[{"dst":"0.0.0.0/0"}],"ranges":[[{"subnet":"10.88.0.0/24"}]]}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->mode, Mode::kBridge);
  EXPECT_EQ(c->bridge, "cnibr0");
  EXPECT_EQ(c->delegated_ipam, "host-local");
  ASSERT_EQ(c->ipam_subnets.size(), 1u);
  EXPECT_EQ(c->ipam_subnets[0].ToString(), "10.88.0.0/24");
  EXPECT_EQ(c->masquerade_backend, FwBackend::kIptables);
}

TEST(Config, BuiltinIpamTypeAndBridgeDefaults) {
  auto c = Parse(R"({"cniVersion":"1.0.0","name":"w","type":"weft","mode":"bridge","ipam":{"type":"weft"},
     "ranges":["10.0.0.0/24","fd00::/64"],"gateways":["10.0.0.254"],"ipsToRouteViaHost":["169.254.20.10"]})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->mode, Mode::kBridge);
  EXPECT_EQ(c->bridge, kDefaultBridge);
  EXPECT_TRUE(c->delegated_ipam.empty());
  ASSERT_EQ(c->route_via_host.size(), 1u);
  EXPECT_EQ(c->route_via_host[0].ToString(), "169.254.20.10/32");
  // An explicit routed mode wins over a stray bridge key.
  auto r = Parse(R"({"cniVersion":"1.0.0","name":"w","type":"weft","mode":"routed","bridge":"x","ranges":["10.0.0.0/24"]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->mode, Mode::kRouted);
}

TEST(Config, NewKeysRejectBadValues) {
  for (const char* bad : {R"("ranges":["10.0.0.0/24"],"bridge":"way-too-long-bridge-name")",
                          R"("ranges":["10.0.0.0/24"],"bridge":5)",
                          R"("ranges":["10.0.0.0/24"],"gateways":["10.1.0.1"])",
                          R"("ranges":["10.0.0.0/24"],"ipsToRouteViaHost":["x"])",
                          R"("ipam":{"type":"../evil"})", R"("ipam":{"ranges":[]})",
                          R"("ipam":{"type":"host-local","ranges":[[{"subnet":"nope"}]]})"}) {
    auto r = Parse(std::string(R"({"cniVersion":"1.0.0","name":"w","type":"weft",)") + bad + "}");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidConfig) << bad;
  }
}

}  // namespace
}  // namespace weft::plugin
