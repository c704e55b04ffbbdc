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
  // Bytes a CNI result could not carry, and UTF-8 it could but tools mangle.
  EXPECT_EQ(InterfaceNameProblem("eth\xff"), "may contain only ASCII characters");
  EXPECT_EQ(InterfaceNameProblem("eth\xc3\xa9"), "may contain only ASCII characters");
}

TEST(Strings, Utf8ErrorOffset) {
  constexpr size_t kOk = std::string_view::npos;
  EXPECT_EQ(Utf8ErrorOffset(""), kOk);
  EXPECT_EQ(Utf8ErrorOffset("plain"), kOk);
  EXPECT_EQ(Utf8ErrorOffset("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), kOk);  // 2, 3 and 4 bytes
  EXPECT_EQ(Utf8ErrorOffset(std::string_view("a\0b", 3)), kOk);  // NUL is UTF-8 (JSON escapes it)
  EXPECT_EQ(Utf8ErrorOffset("ab\xff"), 2u);
  EXPECT_EQ(Utf8ErrorOffset("\x80"), 0u);              // a lone continuation byte
  EXPECT_EQ(Utf8ErrorOffset("x\xc3"), 1u);             // truncated
  EXPECT_EQ(Utf8ErrorOffset("\xc3\x28"), 0u);         // a bad continuation
  EXPECT_EQ(Utf8ErrorOffset("\xc0\xaf"), 0u);         // overlong '/'
  EXPECT_EQ(Utf8ErrorOffset("\xe0\x80\xaf"), 0u);    // overlong, 3 bytes
  EXPECT_EQ(Utf8ErrorOffset("\xed\xa0\x80"), 0u);    // a UTF-16 surrogate
  EXPECT_EQ(Utf8ErrorOffset("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(Utf8ErrorOffset("ok\xe2\x82"), 2u);
}

TEST(Strings, HashIsStable) {
  // Deterministic link names depend on this never changing.
  EXPECT_EQ(Hex(Fnv1a64("abc"), 16), "e71fa2190541574b");
  EXPECT_EQ(Hex(0xabc, 5), "00abc");
}

// The assertions of the two copies this replaced (runtime/cache_test.cc's and
// agent/etcd_test.cc's), plus the strictness both callers rely on.
TEST(Base64, KnownVectorsRoundTripAndGarbage) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode("/w/subnets/"), "L3cvc3VibmV0cy8=");
  std::string bin;
  for (int i = 0; i < 256; ++i) bin.push_back(static_cast<char>(i));
  EXPECT_EQ(*Base64Decode(Base64Encode(bin)), bin);
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)})
    EXPECT_EQ(Base64Decode(Base64Encode(s)), s);
  EXPECT_FALSE(Base64Decode("Zg=").has_value());   // padding missing
  EXPECT_FALSE(Base64Decode("Z!==").has_value());  // outside the alphabet
  EXPECT_FALSE(Base64Decode("a$b=").has_value());
  EXPECT_FALSE(Base64Decode("Zg==Zg==").has_value());  // data after padding
  EXPECT_FALSE(Base64Decode("Zm=v").has_value());
}

TEST(Strings, QueryEscapeKeepsUnreservedOnly) {
  EXPECT_EQ(QueryEscape("a-b_c.d~e"), "a-b_c.d~e");
  EXPECT_EQ(QueryEscape("k=v,w in (x)"), "k%3Dv%2Cw%20in%20%28x%29");
  EXPECT_EQ(QueryEscape("n/1\xff"), "n%2F1%FF");
}

}  // namespace
}  // namespace weft
