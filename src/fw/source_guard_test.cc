#include "fw/source_guard.h"

#include <gtest/gtest.h>

#include "sys/nft_build.h"
#include "sys/nft_fake.h"
#include "sys/nft_render.h"

namespace weft::fw {
namespace {

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s += static_cast<char>(c);
  return s;
}

// The guard's transaction as the nft script that does the same.
std::string Script(GuardMode mode) { return sys::nft::RenderTransaction(GuardTransaction(mode)); }

TEST(SourceGuard, RoutedSharedChainsJudgeWhatThePortChainDoesNotAccept) {
  const std::string s = Script(GuardMode::kRouted);
  EXPECT_EQ(s.find("add table netdev weft-guard\n"), 0u) << s;
  // Created when missing, never deleted: the ports' chains and the opt-out
  // elements survive; no shared chain has a hook (only the ports' do).
  EXPECT_EQ(s.find("delete"), std::string::npos) << s;
  EXPECT_EQ(s.find("hook"), std::string::npos) << s;
  EXPECT_EQ(s.find("fib"), std::string::npos) << s;
  EXPECT_NE(s.find("add rule netdev weft-guard pod meta protocol arp accept comment \"" +
                   GuardMarker(GuardMode::kRouted) + "\""),
            std::string::npos)
      << s;
  // Router advertisements and redirects are judged before link-local
  // sources, which they have.
  EXPECT_LT(s.find("add rule netdev weft-guard pod icmpv6 type { nd-router-advert, nd-redirect } goto drop6"),
            s.find("add rule netdev weft-guard pod ip6 saddr fe80::/10 accept"))
      << s;
  // Whatever is left of IPv4 and IPv6 is dropped through the logged chains.
  EXPECT_LT(s.find("iifname . ip saddr @allow4 accept"), s.find("meta protocol ip goto drop4")) << s;
  EXPECT_NE(s.find("add rule netdev weft-guard drop6 counter name \"spoofed6\" drop"), std::string::npos) << s;
  // The chains are emptied before they are refilled, in the same transaction.
  EXPECT_LT(s.find("flush chain netdev weft-guard pod"), s.find("add rule netdev weft-guard pod"));
  EXPECT_EQ(s.find("@mac"), std::string::npos);
}

TEST(SourceGuard, RoutedPortChainComparesWithTheAddressesAsImmediates) {
  auto rules = PortRules(GuardMode::kRouted, IpAddress::Parse("10.0.0.7"), IpAddress::Parse("fd00::7"));
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(sys::DescribeNftRule(rules[0]), "meta protocol == 0x0800 @nh,96,32 == 0x0a000007 accept");
  EXPECT_EQ(sys::DescribeNftRule(rules[1]),
            "meta protocol == 0x86dd @nh,64,128 == 0xfd000000000000000000000000000007 accept");
  EXPECT_EQ(sys::DescribeNftRule(rules[2]), "goto pod");
  // A single-family pod: one comparison, then the shared chain.
  rules = PortRules(GuardMode::kRouted, std::nullopt, IpAddress::Parse("fd00::7"));
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(sys::DescribeNftRule(rules[1]), "goto pod");
}

TEST(SourceGuard, BridgePortChainLeavesIcmpv6AndForeignMacsToTheSharedChain) {
  auto rules = PortRules(GuardMode::kBridge, IpAddress::Parse("10.0.0.7"), IpAddress::Parse("fd00::7"));
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(sys::DescribeNftRule(rules[0]), "meta protocol == 0x0800 @nh,96,32 == 0x0a000007 accept");
  EXPECT_EQ(sys::DescribeNftRule(rules[1]),
            "meta protocol == 0x86dd @nh,64,128 == 0xfd000000000000000000000000000007 meta l4proto != 0x3a accept");
  EXPECT_EQ(sys::DescribeNftRule(rules[2]), "goto pod");
  // What reaches the shared chain from a foreign MAC is dropped first (the
  // bridge drops the rest: the port is locked to the pod's MAC).
  EXPECT_NE(Script(GuardMode::kBridge).find("add rule netdev weft-guard-bridge pod iifname . ether saddr != @mac "
                                                 "goto drop-mac comment"),
            std::string::npos);
}

TEST(SourceGuard, BridgeBindsEachPortByElements) {
  const std::string s = Script(GuardMode::kBridge);
  EXPECT_EQ(s.find("add table netdev weft-guard-bridge\n"), 0u) << s;
  for (const char* want : {"add set netdev weft-guard-bridge mac { type ifname . ether_addr; }",
                           "add set netdev weft-guard-bridge addr4 { type ifname . ipv4_addr; }",
                           "add set netdev weft-guard-bridge nd6 { typeof iifname . @th,64,128; }",
                           "add limit netdev weft-guard-bridge drop-log { rate 1000/second burst 100 packets; }",
                           "add rule netdev weft-guard-bridge pod iifname . ether saddr != @mac",
                           "add rule netdev weft-guard-bridge pod-arp iifname . arp saddr ip @addr4 accept",
                           "add rule netdev weft-guard-bridge pod-ip6 icmpv6 type nd-neighbor-advert"})
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
  EXPECT_NE(GuardMarker(GuardMode::kBridge), GuardMarker(GuardMode::kRouted));
  // The constants are the rules' hash: a change to the rules (or to the
  // ports' rules' shape) must come with its new marker, or nodes would keep
  // the old shared chains.
  for (GuardMode m : {GuardMode::kRouted, GuardMode::kBridge})
    EXPECT_EQ(GuardMarker(m), ComputedGuardMarker(m)) << "update GuardMarker in src/fw/source_guard.cc";
  EXPECT_EQ(GuardMarker(GuardMode::kBridge), GuardMarker(GuardMode::kBridge));
}

TEST(SourceGuard, ReappliedTheTransactionLeavesOneAnonymousSetAndTheElements) {
  for (GuardMode mode : {GuardMode::kRouted, GuardMode::kBridge}) {
    sys::nft::Fake fake;
    ASSERT_TRUE(fake.Apply(GuardTransaction(mode)).ok());
    sys::nft::Transaction optout(GuardFamily(mode), GuardTable(mode));
    optout.Add(sys::nft::Elements{"optouts", {sys::nft::Element{sys::nft::IfnameBytes("wft0123456789ab")}}});
    ASSERT_TRUE(fake.Apply(optout).ok());
    auto once = fake.Dump(GuardFamily(mode), GuardTable(mode));
    ASSERT_TRUE(once.ok());
    ASSERT_TRUE(fake.Apply(GuardTransaction(mode)).ok());
    auto twice = fake.Dump(GuardFamily(mode), GuardTable(mode));
    ASSERT_TRUE(twice.ok());
    for (auto* t : {&*once, &*twice})
      for (auto& r : t->rules) r.handle = 0;
    EXPECT_EQ(*once, *twice);  // the shared chains' anonymous set went with its rule and came back as __set0
    EXPECT_EQ(twice->elements["__set0"].size(), 2u);
    EXPECT_EQ(twice->elements["optouts"].size(), 1u);
  }
}

TEST(SourceGuard, BindingKeysAreTheSetsLayout) {
  const std::string mac = Bytes({0x0a, 1, 2, 3, 4, 5});
  auto e = BridgeElements({"wft0123456789ab", mac, IpAddress::Parse("10.0.0.7"), IpAddress::Parse("fd00::7")});
  ASSERT_EQ(e.size(), 4u);
  // ifname: 16 bytes; a MAC padded to 8; an IPv4 address 4; IPv6 16.
  std::string port = "wft0123456789ab";
  port.resize(16, '\0');
  EXPECT_EQ(e[0].set, "mac");
  EXPECT_EQ(e[0].key, port + mac + std::string(2, '\0'));
  EXPECT_EQ(e[1].set, "addr4");
  EXPECT_EQ(e[1].key, port + Bytes({10, 0, 0, 7}));
  EXPECT_EQ(e[2].set, "addr6");
  EXPECT_EQ(e[3].set, "nd6");
  EXPECT_EQ(e[2].key, e[3].key);
  EXPECT_EQ(e[2].key.size(), 32u);
  EXPECT_EQ(BridgeElements({"wftx", mac, std::nullopt, std::nullopt}).size(), 1u);
}

TEST(SourceGuard, AllowedPrefixesAreRangesOfTheirPort) {
  auto e = AllowElements("wftx", {*IpPrefix::Parse("10.8.0.0/23"), *IpPrefix::Parse("fd00:8::/64")});
  ASSERT_EQ(e.size(), 2u);
  std::string port = "wftx";
  port.resize(16, '\0');
  EXPECT_EQ(e[0].set, "allow4");
  EXPECT_EQ(e[0].key, port + Bytes({10, 8, 0, 0}));
  EXPECT_EQ(e[0].key_end, port + Bytes({10, 8, 1, 255}));
  EXPECT_EQ(e[1].set, "allow6");
  EXPECT_EQ(e[1].key_end.substr(16, 8), Bytes({0xfd, 0, 0, 8, 0, 0, 0, 0}));
  EXPECT_EQ(e[1].key_end.substr(24), std::string(8, '\xff'));
}

}  // namespace
}  // namespace weft::fw
