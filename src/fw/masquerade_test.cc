#include "fw/masquerade.h"

#include <gtest/gtest.h>

namespace weft::fw {
namespace {

MasqueradeSpec Spec() {
  MasqueradeSpec s;
  s.network = "weft";
  s.pod_ranges = {*IpPrefix::Parse("10.244.2.0/24")};
  s.no_masq = {*IpPrefix::Parse("10.244.0.0/16")};
  return s;
}

TEST(Masquerade, NormalizeDropsCoveredPrefixes) {
  auto n = Normalize({*IpPrefix::Parse("10.244.2.0/24"), *IpPrefix::Parse("10.244.0.0/16"),
                      *IpPrefix::Parse("fd00::/64"), *IpPrefix::Parse("10.1.2.3/8")});
  // 10.244.2.0/24 and 10.244.0.0/16 both sit inside 10.0.0.0/8.
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(n[0].ToString(), "10.0.0.0/8");
  EXPECT_EQ(n[1].ToString(), "fd00::/64");
  auto m = Normalize({*IpPrefix::Parse("10.244.2.0/24"), *IpPrefix::Parse("10.244.0.0/16")});
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].ToString(), "10.244.0.0/16");
}

TEST(Masquerade, NftRulesetIsOneAtomicReplacement) {
  std::string s = RenderNftMasquerade(Spec());
  EXPECT_EQ(s.find("table inet weft-weft\ndelete table inet weft-weft\ntable inet weft-weft {"), 0u) << s;
  EXPECT_NE(s.find("elements = { 10.244.2.0/24 }"), std::string::npos) << s;
  EXPECT_NE(s.find("elements = { 10.244.0.0/16 }"), std::string::npos) << s;
  EXPECT_NE(s.find("ip saddr @pods4 ip daddr != @nomasq4 masquerade comment \"" + MasqMarker(Spec()) + "\""),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("ip6"), std::string::npos);  // no IPv6 rule without an IPv6 range
}

TEST(Masquerade, DualStackGetsOneRulePerFamily) {
  auto spec = Spec();
  spec.pod_ranges.push_back(*IpPrefix::Parse("fd00:10:244:2::/64"));
  std::string s = RenderNftMasquerade(spec);
  EXPECT_NE(s.find("ip6 saddr @pods6 ip6 daddr != @nomasq6 masquerade"), std::string::npos) << s;
}

TEST(Masquerade, MarkerChangesWithTheRanges) {
  auto a = Spec();
  auto b = Spec();
  b.pod_ranges = {*IpPrefix::Parse("10.244.3.0/24")};
  EXPECT_NE(MasqMarker(a), MasqMarker(b));
  EXPECT_EQ(MasqMarker(a), MasqMarker(Spec()));
}

TEST(Masquerade, IptablesRestoreInput) {
  std::string chain = IptablesChain("weft");
  EXPECT_LE(chain.size(), 28u);
  std::string s = RenderIptablesMasquerade(Spec(), false, true);
  EXPECT_NE(s.find(":" + chain + " - [0:0]"), std::string::npos);
  EXPECT_NE(s.find("-A " + chain + " -d 10.244.0.0/16 -j RETURN"), std::string::npos) << s;
  EXPECT_NE(s.find("-A " + chain + " -j MASQUERADE"), std::string::npos);
  EXPECT_NE(s.find("-A POSTROUTING -s 10.244.2.0/24"), std::string::npos);
  EXPECT_EQ(RenderIptablesMasquerade(Spec(), false, false).find("POSTROUTING"), std::string::npos);
}

}  // namespace
}  // namespace weft::fw
