// Dual-stack in both modes (pod to pod over IPv4 and IPv6, no DAD wait),
// ipsToRouteViaHost, and DNS from the config and from runtimeConfig.
#include "plugin_fixture.h"

namespace weft::testing {
namespace {

class DualStackTest : public PluginTest, public ::testing::WithParamInterface<std::string> {
 protected:
  json DsConf(json extra = json::object()) {
    json c = Conf("1.1.0", {{"mode", GetParam()}, {"bridge", "dsbr0"}, {"ranges", {"10.244.2.0/24", "fd00:10:244:2::/64"}}});
    for (auto& [k, v] : extra.items()) c[k] = v;
    return c;
  }
};

TEST_P(DualStackTest, OneAddressPerFamilyAndPodToPodOverBoth) {
  auto a = Add("a", DsConf());
  auto b = Add("b", DsConf());
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.out;
  ASSERT_EQ(a.Json()["ips"].size(), 2u) << a.out;
  std::string a6 = PodIp(a, true), b6 = PodIp(b, true);
  EXPECT_EQ(a6.rfind("fd00:10:244:2::", 0), 0u) << a6;
  // The address is usable at once: not tentative (no DAD).
  json addrs = Pod("a").IpJson({"-6", "addr", "show", "dev", "eth0"});
  ASSERT_EQ(addrs.size(), 1u);
  for (auto& ad : addrs[0]["addr_info"])
    if (ad["local"] == a6) {
      EXPECT_FALSE(ad.value("tentative", false)) << ad.dump();
    }
  EXPECT_TRUE(Pod("a").Ping(PodIp(b)));
  EXPECT_TRUE(Pod("a").Ping(b6));
  EXPECT_TRUE(Pod("b").Ping(a6));
  EXPECT_TRUE(node_->Ping(a6));
  json check = DsConf();
  check["prevResult"] = a.Json();
  EXPECT_EQ(Cni("CHECK", "a", Pod("a").path(), check).exit_code, 0);
  EXPECT_EQ(Del("a", DsConf()).exit_code, 0);
  EXPECT_EQ(Del("b", DsConf()).exit_code, 0);
  ExpectNoPodsLeft();
}

TEST_P(DualStackTest, IpsToRouteViaHostAndDns) {
  // A node-local DNS cache address on the node's loopback.
  Cmd({"ip", "-n", node_->name(), "addr", "add", "169.254.20.10/32", "dev", "lo"});
  json conf = DsConf({{"ipsToRouteViaHost", {"169.254.20.10"}},
                      {"dns", {{"nameservers", {"169.254.20.10"}}, {"search", {"svc.cluster.local"}}}}});
  auto r = Add("d", conf);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  bool route = false;
  for (auto& rt : Pod("d").IpJson({"route", "show"}))
    if (rt["dst"] == "169.254.20.10") route = true;
  EXPECT_TRUE(route);
  bool listed = false;
  json result = r.Json();
  for (auto& rt : result["routes"])
    if (rt["dst"] == "169.254.20.10/32") listed = true;
  EXPECT_TRUE(listed) << r.out;
  EXPECT_TRUE(Pod("d").Ping("169.254.20.10"));
  EXPECT_EQ(r.Json()["dns"]["nameservers"], json({"169.254.20.10"}));
  // runtimeConfig.dns wins when the capability is declared, and only then.
  json rc = conf;
  rc["runtimeConfig"] = {{"dns", {{"servers", {"10.96.0.10"}}, {"searches", {"default.svc.cluster.local"}}}}};
  auto ignored = Add("e", rc);
  ASSERT_EQ(ignored.exit_code, 0) << ignored.out;
  EXPECT_EQ(ignored.Json()["dns"]["nameservers"], json({"169.254.20.10"}));
  rc["capabilities"] = {{"dns", true}};
  auto honoured = Add("f", rc);
  ASSERT_EQ(honoured.exit_code, 0) << honoured.out;
  EXPECT_EQ(honoured.Json()["dns"]["nameservers"], json({"10.96.0.10"}));
  EXPECT_EQ(honoured.Json()["dns"]["search"], json({"default.svc.cluster.local"}));
}

INSTANTIATE_TEST_SUITE_P(Modes, DualStackTest, ::testing::Values("routed", "bridge"));

}  // namespace
}  // namespace weft::testing
