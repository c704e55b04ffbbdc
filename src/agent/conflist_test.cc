#include "agent/conflist.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cni/netconf.h"
#include "plugin/config.h"

namespace weft::agent {
namespace {

ConflistSpec Spec() {
  ConflistSpec s;
  s.ranges = {*IpPrefix::Parse("10.244.2.0/24")};
  s.data_dir = "/var/lib/weft";
  return s;
}

// The plugin's view of the conflist's weft entry, as libcni hands it over:
// the list's cniVersion and name injected.
Result<plugin::Config> AsPluginSees(const std::string& conflist) {
  auto j = nlohmann::json::parse(conflist);
  nlohmann::json p = j["plugins"][0];
  p["cniVersion"] = j["cniVersion"];
  p["name"] = j["name"];
  WEFT_ASSIGN_OR_RETURN(auto net, cni::ParseNetConf(p.dump()));
  return plugin::ParseConfig(net);
}

TEST(Conflist, NoNetworkPolicyKeyUnlessEnabled) {
  auto j = nlohmann::json::parse(RenderConflist(Spec()));
  EXPECT_FALSE(j["plugins"][0].contains("networkPolicy")) << j.dump();
  auto c = AsPluginSees(RenderConflist(Spec()));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->network_policy.has_value());
}

TEST(Conflist, DualStackRangesAndClusterCidrsReachThePlugin) {
  ConflistSpec s = Spec();
  s.ranges = {*IpPrefix::Parse("10.244.2.0/24"), *IpPrefix::Parse("fd00:10:244:2::/64")};
  s.cluster_cidrs = {*IpPrefix::Parse("10.244.0.0/16"), *IpPrefix::Parse("fd00:10:244::/56")};
  auto j = nlohmann::json::parse(RenderConflist(s));
  EXPECT_EQ(j["plugins"][0]["ranges"], nlohmann::json({"10.244.2.0/24", "fd00:10:244:2::/64"}));
  EXPECT_EQ(j["plugins"][0]["clusterCIDRs"], nlohmann::json({"10.244.0.0/16", "fd00:10:244::/56"}));
  auto c = AsPluginSees(RenderConflist(s));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ranges.size(), 2u);
  EXPECT_EQ(c->cluster_cidrs.size(), 2u);
  // IPv6-only.
  s.ranges = {*IpPrefix::Parse("fd00:10:244:2::/64")};
  s.cluster_cidrs = {*IpPrefix::Parse("fd00:10:244::/56")};
  auto only6 = AsPluginSees(RenderConflist(s));
  ASSERT_TRUE(only6.ok()) << only6.status().ToString();
  EXPECT_EQ(only6->ranges[0].ToString(), "fd00:10:244:2::/64");
}

TEST(Conflist, NetworkPolicyKeyReachesThePlugin) {
  ConflistSpec s = Spec();
  s.network_policy = true;
  s.netpol_namespaces_file = "/var/lib/weftd/netpol-namespaces";
  auto j = nlohmann::json::parse(RenderConflist(s));
  ASSERT_TRUE(j["plugins"][0].contains("networkPolicy")) << j.dump();
  EXPECT_EQ(j["plugins"][0]["networkPolicy"]["namespacesFile"], "/var/lib/weftd/netpol-namespaces");
  EXPECT_EQ(j["plugins"][0]["networkPolicy"]["pendingGroup"], 22342);
  auto c = AsPluginSees(RenderConflist(s));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->network_policy.has_value());
  EXPECT_EQ(c->network_policy->namespaces_file, "/var/lib/weftd/netpol-namespaces");
  EXPECT_EQ(c->network_policy->pending_group, plugin::kDefaultPendingGroup);

  s.netpol_pending_group = 4000000000u;
  auto big = AsPluginSees(RenderConflist(s));
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(big->network_policy->pending_group, 4000000000u);
}

TEST(Conflist, RendersWeftAndPortmap) {
  ConflistSpec s;
  s.ranges = {*IpPrefix::Parse("10.244.2.0/24")};
  s.mtu = 1450;
  s.cluster_cidrs = {*IpPrefix::Parse("10.244.0.0/16")};
  s.data_dir = "/var/lib/weft";
  auto j = nlohmann::json::parse(RenderConflist(s));
  EXPECT_EQ(j["name"], "weft");
  EXPECT_EQ(j["cniVersion"], "1.0.0");
  ASSERT_EQ(j["plugins"].size(), 1u);
  EXPECT_EQ(j["plugins"][0]["type"], "weft");
  EXPECT_EQ(j["plugins"][0]["ranges"][0], "10.244.2.0/24");
  EXPECT_EQ(j["plugins"][0]["mtu"], 1450);
  EXPECT_EQ(j["plugins"][0]["masquerade"], false);
  EXPECT_EQ(j["plugins"][0]["clusterCIDRs"][0], "10.244.0.0/16");
  EXPECT_EQ(j["plugins"][0]["capabilities"]["portMappings"], true);
}

}  // namespace
}  // namespace weft::agent
