#include "base/ip.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(IpAddress, ParsesAndFormatsBothFamilies) {
  auto a = IpAddress::Parse("10.244.2.7");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->is_v4());
  EXPECT_EQ(a->ToString(), "10.244.2.7");
  EXPECT_EQ(a->v4_host_order(), 0x0af40207u);
  auto b = IpAddress::Parse("fd00::1");
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->is_v6());
  EXPECT_EQ(b->ToString(), "fd00::1");
  EXPECT_FALSE(IpAddress::Parse("10.0.0.256"));
  EXPECT_FALSE(IpAddress::Parse(""));
  EXPECT_FALSE(IpAddress::Parse("fd00::g"));
}

TEST(IpAddress, ArithmeticCarriesAcrossBytes) {
  auto a = *IpAddress::Parse("10.0.0.255");
  EXPECT_EQ(a.Plus(1).ToString(), "10.0.1.0");
  EXPECT_EQ(a.Plus(1).OffsetFrom(*IpAddress::Parse("10.0.0.0")), 256u);
  auto v6 = *IpAddress::Parse("fd00::ffff");
  EXPECT_EQ(v6.Plus(1).ToString(), "fd00::1:0");
  EXPECT_FALSE(IpAddress::Parse("10.0.0.0")->OffsetFrom(*IpAddress::Parse("10.0.0.1")));
  EXPECT_FALSE(IpAddress::Parse("fd00::1")->OffsetFrom(*IpAddress::Parse("10.0.0.1")));
}

TEST(IpPrefix, ParseStrictAndContains) {
  auto p = IpPrefix::Parse("10.244.2.0/24", true);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->Contains(*IpAddress::Parse("10.244.2.200")));
  EXPECT_FALSE(p->Contains(*IpAddress::Parse("10.244.3.1")));
  EXPECT_FALSE(p->Contains(*IpAddress::Parse("fd00::1")));
  EXPECT_FALSE(IpPrefix::Parse("10.244.2.1/24", true));
  EXPECT_TRUE(IpPrefix::Parse("10.244.2.1/24", false));
  EXPECT_FALSE(IpPrefix::Parse("10.244.2.0/33"));
  EXPECT_FALSE(IpPrefix::Parse("10.244.2.0/"));
  EXPECT_FALSE(IpPrefix::Parse("10.244.2.0"));
  EXPECT_EQ(IpPrefix::Parse("fd00:1::/64")->ToString(), "fd00:1::/64");
  EXPECT_EQ(IpPrefix::Parse("10.1.2.3/16")->Masked().ToString(), "10.1.0.0/16");
}

TEST(IpPrefix, LastAndBytes) {
  EXPECT_EQ(IpPrefix::Parse("10.1.2.3/16")->Last().ToString(), "10.1.255.255");
  EXPECT_EQ(IpPrefix::Parse("10.1.2.3/32")->Last().ToString(), "10.1.2.3");
  EXPECT_EQ(IpPrefix::Parse("10.1.2.3/0")->Last().ToString(), "255.255.255.255");
  EXPECT_EQ(IpPrefix::Parse("fd00:1::5/63")->Last().ToString(), "fd00:1:0:1:ffff:ffff:ffff:ffff");
  EXPECT_EQ(IpAddress::Parse("10.0.0.1")->ToBytes(), std::string("\x0a\x00\x00\x01", 4));
  EXPECT_EQ(IpAddress::Parse("::1")->ToBytes(), std::string(15, '\0') + "\x01");
}

TEST(IpPrefix, Overlaps) {
  auto a = *IpPrefix::Parse("10.0.0.0/16");
  auto b = *IpPrefix::Parse("10.0.5.0/24");
  auto c = *IpPrefix::Parse("10.1.0.0/16");
  EXPECT_TRUE(a.Overlaps(b));
  EXPECT_TRUE(b.Overlaps(a));
  EXPECT_FALSE(a.Overlaps(c));
}

}  // namespace
}  // namespace weft
