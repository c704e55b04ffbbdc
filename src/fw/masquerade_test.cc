#include "fw/masquerade.h"

#include <gtest/gtest.h>

#include "sys/nft_fake.h"
#include "sys/nft_render.h"

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

// The table the transaction leaves, as nft would list it (the fake holds
// what the kernel would; the netns suite compares with the kernel's).
std::string Listed(const MasqueradeSpec& spec, sys::nft::Fake* fake = nullptr) {
  sys::nft::Fake own;
  if (!fake) fake = &own;
  Status st = fake->Apply(NftMasqueradeTransaction(spec));
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto t = fake->Dump(sys::nft::Family::kInet, NftTableName(spec.network));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? sys::nft::RenderTable(*t) : "";
}

TEST(Masquerade, NftRulesetIsOneAtomicReplacement) {
  const auto tx = NftMasqueradeTransaction(Spec());
  const std::string script = sys::nft::RenderTransaction(tx);
  EXPECT_EQ(script.find("add table inet weft-weft\ndelete table inet weft-weft\nadd table inet weft-weft\n"), 0u)
      << script;
  const std::string s = Listed(Spec());
  EXPECT_NE(s.find("set pods4 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 10.244.2.0/24 }"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("elements = { 10.244.0.0/16 }"), std::string::npos) << s;
  EXPECT_NE(s.find("type nat hook postrouting priority srcnat; policy accept;"), std::string::npos) << s;
  EXPECT_NE(s.find("ip saddr @pods4 ip daddr != @nomasq4 masquerade comment \"" + MasqMarker(Spec()) + "\""),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("ip6"), std::string::npos);  // no IPv6 rule without an IPv6 range
  // Applied over an older table, it replaces it whole.
  sys::nft::Fake fake;
  auto other = Spec();
  other.pod_ranges = {*IpPrefix::Parse("10.244.9.0/24")};
  Listed(other, &fake);
  EXPECT_EQ(Listed(Spec(), &fake), s);
  ASSERT_TRUE(fake.Apply(NftMasqueradeRemoval(Spec())).ok());
  EXPECT_FALSE(fake.Dump(sys::nft::Family::kInet, NftTableName(Spec().network)).ok());
  EXPECT_TRUE(fake.Apply(NftMasqueradeRemoval(Spec())).ok());  // none there: no error
}

TEST(Masquerade, DualStackGetsOneRulePerFamily) {
  auto spec = Spec();
  spec.pod_ranges.push_back(*IpPrefix::Parse("fd00:10:244:2::/64"));
  spec.no_masq.push_back(*IpPrefix::Parse("::/0"));  // a range to the family's end has no end element
  std::string s = Listed(spec);
  EXPECT_NE(s.find("ip6 saddr @pods6 ip6 daddr != @nomasq6 masquerade"), std::string::npos) << s;
  EXPECT_NE(s.find("elements = { ::/0 }"), std::string::npos) << s;
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
