#include "cni/version.h"

#include <gtest/gtest.h>

namespace weft::cni {
namespace {

TEST(Version, OrdersNumerically) {
  EXPECT_TRUE(VersionLess("0.3.1", "0.4.0"));
  EXPECT_TRUE(VersionLess("0.9.0", "0.10.0"));
  EXPECT_FALSE(VersionLess("1.1.0", "1.0.0"));
  EXPECT_TRUE(AtLeast("1.1.0", "0.4.0"));
  EXPECT_FALSE(AtLeast("0.3.1", "0.4.0"));
  EXPECT_FALSE(AtLeast("garbage", "0.1.0"));
}

TEST(Version, SupportsEveryReleasedVersion) {
  for (const char* v : {"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"})
    EXPECT_TRUE(IsSupported(v)) << v;
  EXPECT_FALSE(IsSupported("1.2.0"));
  EXPECT_FALSE(IsSupported("0.5.0"));
}

}  // namespace
}  // namespace weft::cni
