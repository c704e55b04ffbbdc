#include "base/strings.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(Strings, SplitKeepsEmptyFields) {
  auto v = Split("a=1;;b=2", ';');
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0], "a=1");
  EXPECT_EQ(v[1], "");
  EXPECT_EQ(v[2], "b=2");
}

TEST(Strings, CniNames) {
  EXPECT_TRUE(IsValidCniName("abc-123_x.y"));
  EXPECT_FALSE(IsValidCniName(""));
  EXPECT_FALSE(IsValidCniName("-abc"));
  EXPECT_FALSE(IsValidCniName("a/b"));
  EXPECT_FALSE(IsValidCniName("a b"));
  EXPECT_FALSE(IsValidCniName("../x"));
}

TEST(Strings, InterfaceNames) {
  EXPECT_EQ(InterfaceNameProblem("eth0"), "");
  EXPECT_NE(InterfaceNameProblem(""), "");
  EXPECT_NE(InterfaceNameProblem("0123456789abcdef"), "");
  EXPECT_EQ(InterfaceNameProblem("0123456789abcde"), "");
  EXPECT_NE(InterfaceNameProblem("."), "");
  EXPECT_NE(InterfaceNameProblem(".."), "");
  EXPECT_NE(InterfaceNameProblem("a/b"), "");
  EXPECT_NE(InterfaceNameProblem("a:b"), "");
  EXPECT_NE(InterfaceNameProblem("a b"), "");
}

TEST(Strings, HashIsStable) {
  // Deterministic link names depend on this never changing.
  EXPECT_EQ(Hex(Fnv1a64("abc"), 16), "e71fa2190541574b");
  EXPECT_EQ(Hex(0xabc, 5), "00abc");
}

}  // namespace
}  // namespace weft
