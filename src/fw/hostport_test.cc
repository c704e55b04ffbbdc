#include "fw/hostport.h"

#include <gtest/gtest.h>

#include "sys/nft_render.h"

#include <algorithm>

namespace weft::fw {
namespace {

HostPortRule Rule(const std::string& hip, int hp, const std::string& proto, const std::string& pod, int cp) {
  return {hip, hp, proto, *IpPrefix::Parse(pod), cp};
}

TEST(HostPorts, NftTableLooksMappingsUpInMaps) {
  std::vector<HostPortRule> rules = {Rule("", 8080, "tcp", "10.244.2.5/24", 80),
                                     Rule("192.0.2.10", 5353, "udp", "10.244.2.6/24", 53),
                                     Rule("", 8080, "tcp", "fd00::5/64", 80)};
  std::string s = sys::nft::RenderTransaction(NftHostPortTransaction("weft-hp-x", rules));
  EXPECT_EQ(s.find("add table inet weft-hp-x\ndelete table inet weft-hp-x\nadd table inet weft-hp-x\n"), 0u) << s;
  EXPECT_NE(s.find("add map inet weft-hp-x hp4 { type inet_proto . inet_service : ipv4_addr . inet_service; }"), std::string::npos) << s;
  EXPECT_NE(s.find("add map inet weft-hp-x hp6a { type ipv6_addr . inet_proto . inet_service : ipv6_addr . inet_service; }"),
            std::string::npos) << s;
  EXPECT_NE(s.find("add set inet weft-hp-x hp4-src { type ipv4_addr; flags interval; }"), std::string::npos) << s;
  EXPECT_NE(s.find("fib daddr type local jump hostports comment \"weft-hp-base:2\""), std::string::npos) << s;
  EXPECT_NE(s.find("type nat hook output priority -100"), std::string::npos) << s;
  // The marks come before the DNATs, which end the chain.
  EXPECT_LT(s.find("ip saddr @hp4-src meta l4proto . th dport @hp4 meta mark set meta mark | 0x00002000"),
            s.find("dnat ip to ip daddr . meta l4proto . th dport map @hp4a")) << s;
  EXPECT_NE(s.find("meta nfproto ipv4 dnat ip to meta l4proto . th dport map @hp4 comment"), std::string::npos) << s;
  EXPECT_NE(s.find("meta nfproto ipv6 dnat ip6 to meta l4proto . th dport map @hp6 comment"), std::string::npos) << s;
  EXPECT_NE(s.find("meta mark & 0x00002000 == 0x00002000 masquerade"), std::string::npos) << s;
  EXPECT_NE(s.find("iifname != \"lo\" ip daddr 127.0.0.0/8"), std::string::npos) << s;
  // The mappings are map elements, the subnets hairpin sources.
  EXPECT_NE(s.find("add element inet weft-hp-x hp4 { tcp . 8080 : 10.244.2.5 . 80 }"), std::string::npos) << s;
  EXPECT_NE(s.find("add element inet weft-hp-x hp4a { 192.0.2.10 . udp . 5353 : 10.244.2.6 . 53 }"),
            std::string::npos) << s;
  EXPECT_NE(s.find("add element inet weft-hp-x hp6 { tcp . 8080 : fd00::5 . 80 }"), std::string::npos) << s;
  EXPECT_NE(s.find("add element inet weft-hp-x hp4-src { 10.244.2.0/24, 127.0.0.0/8 }"), std::string::npos) << s;
  EXPECT_NE(s.find("add element inet weft-hp-x hp6-src { fd00::/64 }"), std::string::npos) << s;
  EXPECT_EQ(NftHostPortElements(rules).size(), 3u);
  // The rules do not depend on the mappings.
  std::string other =
      sys::nft::RenderTransaction(NftHostPortTransaction("weft-hp-x", {Rule("", 1, "udp", "10.0.0.2/8", 2)}));
  EXPECT_EQ(s.substr(0, s.find("add element")), other.substr(0, other.find("add element")));
}

TEST(HostPorts, NftElementsAreInTheKernelsLayout) {
  auto es = NftHostPortElements({Rule("", 8080, "tcp", "10.244.2.5/24", 80)});
  ASSERT_EQ(es.size(), 1u);
  // Each field of a concatenation padded to 4 bytes.
  EXPECT_EQ(es[0].set, "hp4");
  EXPECT_EQ(es[0].key, std::string("\x06\0\0\0\x1f\x90\0\0", 8));
  EXPECT_EQ(es[0].data, std::string("\x0a\xf4\x02\x05\0\x50\0\0", 8));
  EXPECT_EQ(NftElementText(es[0]), "hp4 06000000.1f900000 : 0af40205.00500000");
  auto v6 = NftHostPortElements({Rule("2001:db8::1", 53, "udp", "fd00::5/64", 5353)});
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_EQ(v6[0].set, "hp6a");
  EXPECT_EQ(v6[0].key.size(), 24u);
  EXPECT_EQ(v6[0].data.size(), 20u);
  // A hostIP of the other family publishes nothing in this one.
  EXPECT_TRUE(NftHostPortElements({Rule("192.0.2.1", 53, "udp", "fd00::5/64", 53)}).empty());
}

TEST(HostPorts, NftHairpinSourcesAreRangesWithAnExclusiveEnd) {
  auto src = NftHostPortSources({Rule("", 1, "tcp", "10.244.2.5/24", 80), Rule("", 2, "tcp", "10.244.2.6/24", 80),
                                 Rule("", 3, "tcp", "10.0.0.2/8", 80), Rule("", 4, "tcp", "10.99.0.2/16", 80),
                                 Rule("", 5, "udp", "fd00::5/64", 53)});
  // 10.244.2.0/24 and 10.99.0.0/16 lie in 10.0.0.0/8.
  ASSERT_EQ(src.size(), 3u);
  EXPECT_EQ(src[0].ToString(), "10.0.0.0/8");
  EXPECT_EQ(src[1].ToString(), "127.0.0.0/8");
  EXPECT_EQ(src[2].ToString(), "fd00::/64");
  auto es = NftSourceElements(*IpPrefix::Parse("10.244.2.0/24"));
  ASSERT_EQ(es.size(), 2u);
  EXPECT_EQ(es[0].set, "hp4-src");
  EXPECT_EQ(es[0].key, std::string("\x0a\xf4\x02\x00", 4));
  EXPECT_EQ(es[0].flags, 0u);
  EXPECT_EQ(es[1].key, std::string("\x0a\xf4\x03\x00", 4));
  EXPECT_EQ(es[1].flags, sys::kNftIntervalEnd);
  // The kernel lists ranges as such elements, in any order, with nft's own
  // zero end element; NftIntervals reads them back.
  auto lo = NftSourceElements(*IpPrefix::Parse("127.0.0.0/8"));
  std::vector<sys::NftElement> listed = {lo[1], es[1], lo[0], es[0], {"hp4-src", std::string(4, '\0'), "", "", 1}};
  auto want = es;
  want.insert(want.end(), lo.begin(), lo.end());
  EXPECT_EQ(NftIntervals(listed), NftIntervals(want));
  EXPECT_EQ(NftIntervals(want), (std::vector<std::string>{"hp4-src 0af40200-0af40300", "hp4-src 7f000000-80000000"}));
}

TEST(HostPorts, NftDiffAddsOnlyWhatIsMissing) {
  auto a = Rule("", 8080, "tcp", "10.244.2.5/24", 80), b = Rule("", 9090, "tcp", "10.244.2.6/24", 90);
  auto have = NftHostPortElements({a});
  EXPECT_TRUE(NftHostPortDiff({a}, have).empty());  // in place: nothing to do
  auto d = NftHostPortDiff({a, b}, have);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].op, sys::NftChange::kAddElement);
  EXPECT_EQ(d[0].elem, NftHostPortElements({b})[0]);
}

TEST(HostPorts, NftDiffDeletesStaleElements) {
  auto a = Rule("", 8080, "tcp", "10.244.2.5/24", 80), b = Rule("192.0.2.1", 9090, "tcp", "10.244.2.6/24", 90);
  auto d = NftHostPortDiff({a}, NftHostPortElements({a, b}));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].op, sys::NftChange::kDeleteElement);
  EXPECT_EQ(d[0].elem.set, "hp4a");
  // Nothing wanted: everything goes.
  EXPECT_EQ(NftHostPortDiff({}, NftHostPortElements({a, b})).size(), 2u);
}

TEST(HostPorts, NftDiffReplacesAKeyHoldingOtherData) {
  auto a = Rule("", 8080, "tcp", "10.244.2.5/24", 80);
  auto stale = Rule("", 8080, "tcp", "10.244.2.9/24", 80);  // a crashed pod's, say
  auto d = NftHostPortDiff({a}, NftHostPortElements({stale}));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].op, sys::NftChange::kDeleteElement);
  EXPECT_EQ(d[1].op, sys::NftChange::kAddElement);
  EXPECT_EQ(d[1].elem, NftHostPortElements({a})[0]);
}

TEST(HostPorts, NftBaseMustBeComplete) {
  std::vector<sys::NftRuleInfo> have;
  for (uint64_t h = 1; h <= 12; ++h) have.push_back({h <= 2 ? "prerouting" : "hostports", h, kNftHostPortBase});
  EXPECT_TRUE(NftHostPortBaseInPlace(have));
  auto extra = have;
  extra.push_back({"hostports", 99, "weft-hp:0123"});  // the previous layout's per-mapping rule
  EXPECT_FALSE(NftHostPortBaseInPlace(extra));
  have.erase(have.begin());  // a jump is gone
  EXPECT_FALSE(NftHostPortBaseInPlace(have));
  EXPECT_FALSE(NftHostPortBaseInPlace({}));
}

TEST(HostPorts, NoRulesMeansDeleteTheTable) {
  EXPECT_EQ(sys::nft::RenderTransaction(NftHostPortTransaction("t", {})), "add table inet t\ndelete table inet t\n");
  EXPECT_TRUE(NftHostPortElements({}).empty());
}

TEST(HostPorts, MarkerIgnoresOrderAndDuplicatesButNotContent) {
  auto a = Rule("", 1, "tcp", "10.0.0.2/24", 80), b = Rule("", 2, "udp", "10.0.0.3/24", 53);
  EXPECT_EQ(HostPortMarker({a, b}), HostPortMarker({b, a, a}));
  auto c = b;
  c.container_port = 54;
  EXPECT_NE(HostPortMarker({a, b}), HostPortMarker({a, c}));
  EXPECT_EQ(Canonical({b, a, a}).size(), 2u);
}

TEST(HostPorts, TablesAndChainsArePerDataDir) {
  EXPECT_NE(HostPortTable("/var/lib/weft"), HostPortTable("/tmp/x"));
  auto ch = IptablesHostPortChainNames("/var/lib/weft");
  EXPECT_LE(ch.masq.size(), 28u);
}

TEST(HostPorts, IptablesRestoreInput) {
  std::vector<HostPortRule> rules = {Rule("", 8080, "tcp", "10.244.2.5/24", 80)};
  auto ch = IptablesHostPortChainNames("/d");
  auto jumps = IptablesHostPortJumps("/d", false);
  std::string s = RenderIptablesHostPorts("/d", rules, false, jumps, false);
  EXPECT_NE(s.find("*nat\n:" + ch.dnat + " - [0:0]\n:" + ch.masq + " - [0:0]\n"), std::string::npos) << s;
  EXPECT_NE(s.find("-p tcp -m tcp --dport 8080 -m comment --comment " + HostPortMarker(rules) +
                   " -j DNAT --to-destination 10.244.2.5:80"),
            std::string::npos) << s;
  EXPECT_NE(s.find("-A PREROUTING -m addrtype --dst-type LOCAL -m comment --comment weft-hostports -j " + ch.dnat),
            std::string::npos) << s;
  EXPECT_NE(s.find("*filter\n:" + ch.guard), std::string::npos) << s;
  // v6 has no IPv4 rules, so nothing in its chains.
  EXPECT_TRUE(IptablesHostPortRules("/d", rules, true).empty());
  std::string rm = RenderIptablesHostPorts("/d", rules, false, jumps, true);
  EXPECT_NE(rm.find("-D PREROUTING -m addrtype"), std::string::npos) << rm;
  EXPECT_NE(rm.find("-X " + ch.dnat), std::string::npos) << rm;
  EXPECT_EQ(rm.find("DNAT"), std::string::npos) << rm;
}

}  // namespace
}  // namespace weft::fw
