#include "plugin/runtime_config.h"
#include "cni/errors.h"

#include <gtest/gtest.h>

namespace weft::plugin {
namespace {

Result<RuntimeOptions> Parse(const std::string& extra) {
  auto n = cni::ParseNetConf(R"({"cniVersion":"1.0.0","name":"w","type":"weft",)" + extra + "}");
  if (!n.ok()) return n.status();
  return ParseRuntimeConfig(*n);
}

TEST(RuntimeConfig, BothKeySpellingsGiveTheSameMappings) {
  auto lower = Parse(R"("capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[
      {"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":"192.0.2.10"},
      {"hostPort":5353,"containerPort":53,"protocol":"udp"}]})");
  auto upper = Parse(R"("capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[
      {"HostPort":8080,"ContainerPort":80,"Protocol":"TCP","HostIP":"192.0.2.10"},
      {"HostPort":5353,"ContainerPort":53,"Protocol":"UDP"}]})");
  ASSERT_TRUE(lower.ok()) << lower.status().ToString();
  ASSERT_TRUE(upper.ok()) << upper.status().ToString();
  ASSERT_EQ(lower->port_mappings.size(), 2u);
  EXPECT_EQ(lower->port_mappings, upper->port_mappings);
  EXPECT_EQ(lower->port_mappings[0], (PortMap{"192.0.2.10", 8080, 80, "tcp"}));
  EXPECT_EQ(lower->port_mappings[1], (PortMap{"", 5353, 53, "udp"}));
}

TEST(RuntimeConfig, DefaultsWildcardsZeroPortsAndDuplicates) {
  auto r = Parse(R"("capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[
      {"hostPort":81,"containerPort":80},{"hostPort":81,"containerPort":80,"hostIP":"0.0.0.0"},
      {"hostPort":0,"containerPort":90},{"hostPort":82,"containerPort":80,"hostIP":"::"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->port_mappings.size(), 2u);
  EXPECT_EQ(r->port_mappings[0], (PortMap{"", 81, 80, "tcp"}));
  EXPECT_EQ(r->port_mappings[1], (PortMap{"", 82, 80, "tcp"}));
}

TEST(RuntimeConfig, IgnoredWithoutTheCapability) {
  auto r = Parse(R"("runtimeConfig":{"portMappings":[{"hostPort":81,"containerPort":80}],
                    "dns":{"servers":["10.96.0.10"]}})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->port_mappings.empty());
  EXPECT_FALSE(r->dns.has_value());
}

TEST(RuntimeConfig, BadMappingsAreCode7NamingTheEntry) {
  for (const char* bad : {R"({"hostPort":70000,"containerPort":80})", R"({"hostPort":80})",
                          R"({"hostPort":"80","containerPort":80})",
                          R"({"hostPort":80,"containerPort":80,"protocol":"icmp"})",
                          R"({"hostPort":80,"containerPort":80,"hostIP":"nope"})"}) {
    auto r = Parse(std::string(R"("capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[)") + bad +
                   "]}");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kInvalidConfig) << bad;
    EXPECT_NE(r.status().msg().find("runtimeConfig.portMappings[0]"), std::string::npos) << r.status().msg();
  }
}

TEST(RuntimeConfig, DnsCapabilityAndPrecedence) {
  auto r = Parse(R"("capabilities":{"dns":true},"runtimeConfig":{"dns":{"servers":["10.96.0.10"],
                    "searches":["default.svc.cluster.local"],"options":["ndots:5"]}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->dns.has_value());
  EXPECT_EQ(r->dns->nameservers, std::vector<std::string>{"10.96.0.10"});
  EXPECT_EQ(r->dns->search, std::vector<std::string>{"default.svc.cluster.local"});
  EXPECT_EQ(r->dns->options, std::vector<std::string>{"ndots:5"});
  cni::Dns conf{{"1.1.1.1"}, "", {}, {}};
  cni::Dns ipam{{"168.63.129.16"}, "", {}, {}};
  EXPECT_EQ(EffectiveDns(conf, r->dns, ipam), *r->dns);
  EXPECT_EQ(EffectiveDns(conf, std::nullopt, ipam), conf);
  EXPECT_EQ(EffectiveDns({}, std::nullopt, ipam), ipam);
}

}  // namespace
}  // namespace weft::plugin
