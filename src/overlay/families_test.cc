#include "overlay/families.h"

#include <gtest/gtest.h>

namespace weft::overlay {
namespace {

std::string Err(const Status& st) { return st.msg(); }

TEST(ParseCidrPerFamily, OneOrOnePerFamilyInTheGivenOrder) {
  auto one = ParseCidrPerFamily("--cluster-cidr", "10.244.0.0/16");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(JoinPrefixes(*one), "10.244.0.0/16");
  auto dual = ParseCidrPerFamily("--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56");
  ASSERT_TRUE(dual.ok()) << dual.status().ToString();
  EXPECT_EQ(JoinPrefixes(*dual), "10.244.0.0/16,fd00:10:244::/56");
  auto v6first = ParseCidrPerFamily("--cluster-cidr", " fd00:10:244::/56 , 10.244.0.0/16 ");
  ASSERT_TRUE(v6first.ok());
  EXPECT_EQ(JoinPrefixes(*v6first), "fd00:10:244::/56,10.244.0.0/16");
  EXPECT_EQ(OfFamily(*v6first, false)->ToString(), "10.244.0.0/16");
  EXPECT_EQ(OfFamily(*v6first, true)->ToString(), "fd00:10:244::/56");
  EXPECT_FALSE(OfFamily(*one, true).has_value());
  auto v6 = ParseCidrPerFamily("--cluster-cidr", "fd00:10:244::1/56");  // host bits cleared, as the kube flag does
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(JoinPrefixes(*v6), "fd00:10:244::/56");
  EXPECT_EQ(JoinPrefixes({}), "-");
}

TEST(ParseCidrPerFamily, ErrorsNameTheFlagAndTheCulprit) {
  auto two4 = ParseCidrPerFamily("--cluster-cidr", "10.244.0.0/16,10.245.0.0/16");
  EXPECT_EQ(two4.status().reason(), Reason::kInvalidArgument);
  EXPECT_EQ(Err(two4.status()),
            "--cluster-cidr: two IPv4 CIDRs (10.244.0.0/16 and 10.245.0.0/16); give at most one per family");
  EXPECT_EQ(Err(ParseCidrPerFamily("--cluster-cidr", "fd00::/56,fd01::/56").status()),
            "--cluster-cidr: two IPv6 CIDRs (fd00::/56 and fd01::/56); give at most one per family");
  EXPECT_EQ(Err(ParseCidrPerFamily("--cluster-cidr", "10.244.0.0/33").status()),
            "--cluster-cidr: \"10.244.0.0/33\" is not a CIDR (e.g. 10.244.0.0/16 or fd00:10:244::/56)");
  EXPECT_EQ(Err(ParseCidrPerFamily("--cluster-cidr", "10.244.0.0").status()),
            "--cluster-cidr: \"10.244.0.0\" is not a CIDR (e.g. 10.244.0.0/16 or fd00:10:244::/56)");
  EXPECT_EQ(Err(ParseCidrPerFamily("--cluster-cidr", "10.244.0.0/16,").status()),
            "--cluster-cidr \"10.244.0.0/16,\": an empty entry (give one CIDR per family, comma-separated)");
  EXPECT_EQ(Err(ParseCidrPerFamily("--cluster-cidr", "10.0.0.0/8,fd00::/8,10.1.0.0/16").status()),
            "--cluster-cidr \"10.0.0.0/8,fd00::/8,10.1.0.0/16\": 3 entries; give at most one CIDR per family (IPv4 "
            "and IPv6)");
}

TEST(ParseIpPerFamily, LikeKubeletsNodeIp) {
  auto dual = ParseIpPerFamily("--node-ip", "192.0.2.11,2001:db8::11");
  ASSERT_TRUE(dual.ok());
  ASSERT_EQ(dual->size(), 2u);
  EXPECT_EQ((*dual)[1].ToString(), "2001:db8::11");
  auto v6 = ParseIpPerFamily("--node-ip", "2001:db8::11");
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE((*v6)[0].is_v6());
  EXPECT_EQ(Err(ParseIpPerFamily("--node-ip", "192.0.2.11,192.0.2.12").status()),
            "--node-ip: two IPv4 addresses (192.0.2.11 and 192.0.2.12); give at most one per family");
  EXPECT_EQ(Err(ParseIpPerFamily("--node-ip", "192.0.2.0/24").status()),
            "--node-ip: \"192.0.2.0/24\" is not an IP address (e.g. 192.0.2.11 or 2001:db8::11)");
}

}  // namespace
}  // namespace weft::overlay
