#include "fw/hostport.h"

#include <gtest/gtest.h>

namespace weft::fw {
namespace {

HostPortRule Rule(const std::string& hip, int hp, const std::string& proto, const std::string& pod, int cp) {
  return {hip, hp, proto, *IpPrefix::Parse(pod), cp};
}

TEST(HostPorts, NftRulesetDnatsMarksAndMasquerades) {
  std::vector<HostPortRule> rules = {Rule("", 8080, "tcp", "10.244.2.5/24", 80),
                                     Rule("192.0.2.10", 5353, "udp", "10.244.2.6/24", 53),
                                     Rule("", 8080, "tcp", "fd00::5/64", 80)};
  std::string s = RenderNftHostPorts("weft-hp-x", rules);
  EXPECT_EQ(s.find("table inet weft-hp-x\ndelete table inet weft-hp-x\ntable inet weft-hp-x {"), 0u) << s;
  EXPECT_NE(s.find("fib daddr type local jump hostports"), std::string::npos) << s;
  EXPECT_NE(s.find("type nat hook output priority -100"), std::string::npos) << s;
  EXPECT_NE(s.find("meta nfproto ipv4 tcp dport 8080 dnat ip to 10.244.2.5:80 comment \"weft-hp:"),
            std::string::npos) << s;
  EXPECT_NE(s.find("fib daddr type local jump hostports comment \"weft-hp-base:1\""), std::string::npos) << s;
  EXPECT_NE(s.find("meta nfproto ipv4 tcp dport 8080 ip saddr { 10.244.2.0/24, 127.0.0.0/8 } meta mark set"),
            std::string::npos) << s;
  EXPECT_NE(s.find("ip daddr 192.0.2.10 udp dport 5353 dnat ip to 10.244.2.6:53"), std::string::npos) << s;
  EXPECT_NE(s.find("meta nfproto ipv6 tcp dport 8080 dnat ip6 to [fd00::5]:80"), std::string::npos) << s;
  EXPECT_NE(s.find("meta mark & 0x2000 == 0x2000 masquerade"), std::string::npos) << s;
  EXPECT_NE(s.find("iifname != \"lo\" ip daddr 127.0.0.0/8"), std::string::npos) << s;
  EXPECT_EQ(NftHostPortChainRules(rules), 6u);
}

// The table as the kernel would report it after RenderNftHostPorts(want).
std::vector<sys::NftRuleInfo> Installed(const std::vector<HostPortRule>& want) {
  std::vector<sys::NftRuleInfo> have;
  uint64_t h = 1;
  for (const char* c : {"prerouting", "output"}) have.push_back({c, h++, kNftHostPortBase});
  for (const auto& r : NftHostPortChain(want)) have.push_back({"hostports", h++, r.comment});
  for (const char* c : {"postrouting", "localhost-guard"}) have.push_back({c, h++, kNftHostPortBase});
  return have;
}

TEST(HostPorts, NftDiffAddsANewMappingWithoutDeletingAnything) {
  auto a = Rule("", 8080, "tcp", "10.244.2.5/24", 80), b = Rule("", 9090, "tcp", "10.244.2.6/24", 90);
  auto have = Installed({a});
  EXPECT_TRUE(NftHostPortBaseInPlace(have));
  EXPECT_EQ(RenderNftHostPortDiff("t", {a}, have), "");  // in place: nothing to do
  std::string s = RenderNftHostPortDiff("t", {a, b}, have);
  EXPECT_EQ(s.find("delete"), std::string::npos) << s;
  auto chain = NftHostPortChain({b});
  EXPECT_EQ(s, "add rule inet t hostports " + chain[0].text + " comment \"" + chain[0].comment + "\"\n" +
                   "add rule inet t hostports " + chain[1].text + " comment \"" + chain[1].comment + "\"\n");
}

TEST(HostPorts, NftDiffDeletesStaleMappingsByHandle) {
  auto a = Rule("", 8080, "tcp", "10.244.2.5/24", 80), b = Rule("", 9090, "tcp", "10.244.2.6/24", 90);
  auto have = Installed({a, b});
  uint64_t b_mark = 0, b_dnat = 0;
  auto bc = NftHostPortChain({b});
  for (const auto& r : have) {
    if (r.comment == bc[0].comment) b_mark = r.handle;
    if (r.comment == bc[1].comment) b_dnat = r.handle;
  }
  std::string s = RenderNftHostPortDiff("t", {a}, have);
  EXPECT_EQ(s, "delete rule inet t hostports handle " + std::to_string(b_mark) + "\n" +
                   "delete rule inet t hostports handle " + std::to_string(b_dnat) + "\n");
}

TEST(HostPorts, NftDiffRepairsABrokenMappingWhole) {
  auto a = Rule("", 8080, "tcp", "10.244.2.5/24", 80);
  auto have = Installed({a});
  // Someone deleted the mark rule: the DNAT one goes too, and both come back
  // in order (the mark must precede the DNAT).
  have.erase(std::find_if(have.begin(), have.end(), [](const sys::NftRuleInfo& r) { return r.chain == "hostports"; }));
  std::string s = RenderNftHostPortDiff("t", {a}, have);
  EXPECT_NE(s.find("delete rule inet t hostports handle"), std::string::npos) << s;
  auto c = NftHostPortChain({a});
  EXPECT_LT(s.find(c[0].comment), s.find(c[1].comment)) << s;
  // Duplicates are trimmed as well.
  auto dup = Installed({a});
  dup.push_back({"hostports", 99, c[1].comment});
  EXPECT_NE(RenderNftHostPortDiff("t", {a}, dup), "");
}

TEST(HostPorts, NftBaseMustBeComplete) {
  auto a = Rule("", 8080, "tcp", "10.244.2.5/24", 80);
  auto have = Installed({a});
  have.erase(have.begin());  // the prerouting jump is gone
  EXPECT_FALSE(NftHostPortBaseInPlace(have));
  EXPECT_FALSE(NftHostPortBaseInPlace({}));
}

TEST(HostPorts, NoRulesMeansDeleteTheTable) {
  EXPECT_EQ(RenderNftHostPorts("t", {}), "table inet t\ndelete table inet t\n");
  EXPECT_EQ(NftHostPortChainRules({}), 0u);
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
