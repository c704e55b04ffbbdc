#include "plugin/config.h"
#include "cni/errors.h"

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
      {R"("ranges":["10.0.0.0/24"],"logFile":"/var/log/../../etc/passwd")", "logFile"},
      {R"("ranges":["10.0.0.0/24"],"logFile":"relative.log")", "logFile"},
  };
  for (const auto& c : cases) {
    auto r = Parse(std::string(R"({"cniVersion":"1.0.0","name":"w","type":"weft",)") + c.json + "}");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kInvalidConfig) << c.json;
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
    EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kInvalidConfig) << bad;
  }
}

}  // namespace
}  // namespace weft::plugin

namespace weft::plugin {
namespace {

Result<Config> ParseWith(const std::string& extra) {
  return Parse(std::string(R"({"cniVersion":"1.0.0","name":"w","type":"weft","ranges":["10.0.0.0/24"],)") + extra +
               "}");
}

TEST(Config, NetworkPolicyIsOffByDefault) {
  auto c = ParseWith(R"("mode":"routed")");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->network_policy.has_value());
  auto n = ParseWith(R"("networkPolicy":null)");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_FALSE(n->network_policy.has_value());
}

TEST(Config, NetworkPolicyTheDocumentedExampleParses) {
  auto c = ParseWith(R"("mode":"routed","networkPolicy":{"namespacesFile":"/var/lib/weftd/netpol-namespaces",
     "pendingGroup":22342})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->network_policy.has_value());
  EXPECT_EQ(c->network_policy->namespaces_file, "/var/lib/weftd/netpol-namespaces");
  EXPECT_EQ(c->network_policy->pending_group, 22342u);
}

TEST(Config, NetworkPolicyPendingGroupDefaultsAndBounds) {
  auto d = ParseWith(R"("networkPolicy":{"namespacesFile":"/x/ns"})");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->network_policy->pending_group, 0x5746u);
  auto lo = ParseWith(R"("networkPolicy":{"namespacesFile":"/x/ns","pendingGroup":1})");
  ASSERT_TRUE(lo.ok()) << lo.status().ToString();
  EXPECT_EQ(lo->network_policy->pending_group, 1u);
  auto hi = ParseWith(R"("networkPolicy":{"namespacesFile":"/x/ns","pendingGroup":4294967295})");
  ASSERT_TRUE(hi.ok()) << hi.status().ToString();
  EXPECT_EQ(hi->network_policy->pending_group, 4294967295u);
}

TEST(Config, NetworkPolicyBadValuesAreCode7NamingTheKey) {
  struct Case {
    const char* json;
    const char* key;
  } cases[] = {
      {R"("networkPolicy":true)", "networkPolicy"},
      {R"("networkPolicy":"/var/lib/weftd/netpol-namespaces")", "networkPolicy"},
      {R"("networkPolicy":{})", "networkPolicy.namespacesFile"},
      {R"("networkPolicy":{"pendingGroup":5})", "networkPolicy.namespacesFile"},
      {R"("networkPolicy":{"namespacesFile":5})", "networkPolicy.namespacesFile"},
      {R"("networkPolicy":{"namespacesFile":""})", "networkPolicy.namespacesFile"},
      {R"("networkPolicy":{"namespacesFile":"netpol-namespaces"})", "networkPolicy.namespacesFile"},
      {R"("networkPolicy":{"namespacesFile":"/var/lib/../etc/ns"})", "networkPolicy.namespacesFile"},
      {R"("networkPolicy":{"namespacesFile":"/x","pendingGroup":0})", "networkPolicy.pendingGroup"},
      {R"("networkPolicy":{"namespacesFile":"/x","pendingGroup":-1})", "networkPolicy.pendingGroup"},
      {R"("networkPolicy":{"namespacesFile":"/x","pendingGroup":4294967296})", "networkPolicy.pendingGroup"},
      {R"("networkPolicy":{"namespacesFile":"/x","pendingGroup":18446744073709551615})",
       "networkPolicy.pendingGroup"},
      {R"("networkPolicy":{"namespacesFile":"/x","pendingGroup":1.5})", "networkPolicy.pendingGroup"},
      {R"("networkPolicy":{"namespacesFile":"/x","pendingGroup":"22342"})", "networkPolicy.pendingGroup"},
      {R"("mode":"bridge","networkPolicy":{"namespacesFile":"/x"})", "networkPolicy"},
      // A bridge key without mode is bridge mode too.
      {R"("bridge":"cnibr0","networkPolicy":{"namespacesFile":"/x"})", "networkPolicy"},
  };
  for (const auto& c : cases) {
    auto r = ParseWith(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kInvalidConfig) << c.json;
    EXPECT_NE(r.status().msg().find(std::string("\"") + c.key + "\""), std::string::npos)
        << c.json << " -> " << r.status().msg();
  }
  auto br = ParseWith(R"("mode":"bridge","networkPolicy":{"namespacesFile":"/x"})");
  ASSERT_FALSE(br.ok());
  EXPECT_NE(br.status().msg().find("bridge mode"), std::string::npos) << br.status().msg();
}

TEST(Config, NetworkPolicyWorksWithADelegatedIpamInRoutedMode) {
  auto c = Parse(R"({"cniVersion":"1.0.0","name":"w","type":"weft","mode":"routed",
     "ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.0.0/24"}]]},
     "networkPolicy":{"namespacesFile":"/var/lib/weftd/netpol-namespaces"}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->network_policy.has_value());
}

}  // namespace
}  // namespace weft::plugin

namespace weft::plugin {
namespace {

// Ranges the kernel or the routed datapath already gives a meaning to, and
// ranges that overlap across families, are code 7 naming the range.
TEST(Config, ReservedAndCrossFamilyRangesAreCode7NamingTheRange) {
  struct Case {
    const char* extra;  // JSON members after "type"
    const char* named;  // the range the message must name
  } cases[] = {
      {R"("ranges":["10.0.0.0/24","::ffff:10.0.0.0/120"])", "::ffff:10.0.0.0/120"},
      {R"("ranges":["::ffff:0.0.0.0/96"])", "::ffff:0.0.0.0/96"},
      {R"("ranges":["169.254.1.0/24"])", "169.254.1.0/24"},
      {R"("ranges":["169.0.0.0/8"])", "169.0.0.0/8"},  // contains the link-local block
      {R"("ranges":["fe80::/64"])", "fe80::/64"},
      {R"("ranges":["127.0.0.0/24"])", "127.0.0.0/24"},
      {R"("ranges":["::1/128"])", "::1/128"},
      {R"("ranges":["224.0.0.0/24"])", "224.0.0.0/24"},
      {R"("ranges":["ff02::/64"])", "ff02::/64"},
      {R"("ranges":["::/0"])", "::/0"},
      {R"("ranges":["10.0.0.0/24","fd00::/64"],"mtu":1279)", "fd00::/64"},
  };
  for (const auto& c : cases) {
    auto r = Parse(std::string(R"({"cniVersion":"1.0.0","name":"w","type":"weft",)") + c.extra + "}");
    ASSERT_FALSE(r.ok()) << c.extra;
    EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kInvalidConfig) << c.extra;
    EXPECT_NE(r.status().msg().find(c.named), std::string::npos) << c.extra << " -> " << r.status().msg();
    EXPECT_NE(r.status().msg().find("\"ranges\""), std::string::npos) << r.status().msg();
  }
  // The limits themselves are fine: IPv6 at exactly 1280, IPv4 below it,
  // and the neighbours of every reserved block.
  for (const char* ok : {R"("ranges":["fd00::/64"],"mtu":1280)", R"("ranges":["10.0.0.0/24"],"mtu":576)",
                         R"("ranges":["169.253.0.0/16","169.255.0.0/16","126.0.0.0/8","128.0.0.0/8"])",
                         R"("ranges":["223.255.0.0/16","240.0.0.0/8"])", R"("ranges":["fe00::/16","fd00::/8"])",
                         R"("ranges":["::fffe:0:0/96","64:ff9b::/96"])"}) {
    auto r = Parse(std::string(R"({"cniVersion":"1.0.0","name":"w","type":"weft",)") + ok + "}");
    EXPECT_TRUE(r.ok()) << ok << " -> " << r.status().ToString();
  }
}

}  // namespace
}  // namespace weft::plugin
