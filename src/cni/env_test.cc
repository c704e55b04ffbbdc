#include "cni/env.h"

#include "base/strings.h"
#include "cni/errors.h"

#include <gtest/gtest.h>

#include <map>

namespace weft::cni {
namespace {

EnvLookup From(std::map<std::string, std::string> m) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [shared](const char* k) -> const char* {
    auto it = shared->find(k);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::map<std::string, std::string> Good() {
  return {{"CNI_COMMAND", "ADD"}, {"CNI_CONTAINERID", "abc123"}, {"CNI_NETNS", "/run/netns/x"},
          {"CNI_IFNAME", "eth0"}, {"CNI_PATH", "/opt/cni/bin:/usr/lib/cni"}};
}

TEST(Env, AcceptsAValidAdd) {
  auto e = ParseEnv(From(Good()));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->command, Command::kAdd);
  EXPECT_EQ(e->path.size(), 2u);
}

TEST(Env, EveryViolationIsCode4) {
  struct Case {
    const char* key;
    const char* value;  // nullptr = unset
  } cases[] = {
      {"CNI_COMMAND", nullptr},          {"CNI_COMMAND", "FROB"},
      {"CNI_CONTAINERID", nullptr},      {"CNI_CONTAINERID", "-bad"},
      {"CNI_CONTAINERID", "a/b"},        {"CNI_CONTAINERID", "a b"},
      {"CNI_IFNAME", nullptr},           {"CNI_IFNAME", "0123456789abcdef"},
      {"CNI_IFNAME", "."},               {"CNI_IFNAME", ".."},
      {"CNI_IFNAME", "a/b"},             {"CNI_IFNAME", "a:b"},
      {"CNI_IFNAME", "a b"},             {"CNI_NETNS", nullptr},
      {"CNI_NETNS", "relative/path"},    {"CNI_PATH", nullptr},
      // Bytes that are not UTF-8, in every variable: refused before they
      // can reach a message, a link or a result.
      {"CNI_COMMAND", "ADD\xff"},        {"CNI_CONTAINERID", "c\xc3"},
      {"CNI_IFNAME", "eth\xff"},         {"CNI_IFNAME", "eth\xc3\xa9"},
      {"CNI_NETNS", "/run/netns/\xfe"},  {"CNI_ARGS", "K8S_POD_NAME=\xed\xa0\x80"},
      {"CNI_PATH", "/opt/cni/bin:/\x80"},
  };
  for (const auto& c : cases) {
    auto m = Good();
    if (c.value) m[c.key] = c.value;
    else m.erase(c.key);
    auto e = ParseEnv(From(m));
    ASSERT_FALSE(e.ok()) << c.key << "=" << (c.value ? c.value : "(unset)");
    EXPECT_EQ(cni::CodeOf(e.status()), cni::Code::kInvalidEnv) << c.key;
    EXPECT_EQ(Utf8ErrorOffset(e.status().msg()), std::string::npos) << c.key << ": " << e.status().msg();
  }
}

TEST(Env, DelNeedsNoNetnsAndVersionNeedsNothing) {
  auto m = Good();
  m["CNI_COMMAND"] = "DEL";
  m.erase("CNI_NETNS");
  EXPECT_TRUE(ParseEnv(From(m)).ok());
  EXPECT_TRUE(ParseEnv(From({{"CNI_COMMAND", "VERSION"}})).ok());
  EXPECT_TRUE(ParseEnv(From({{"CNI_COMMAND", "GC"}})).ok());
}

TEST(CniArgs, ParsesKnownAndRejectsUnknownUnlessIgnored) {
  std::vector<std::string> known = {"K8S_POD_NAME", "K8S_POD_NAMESPACE"};
  auto a = ParseCniArgs("K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1", known);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->Get("K8S_POD_NAME"), "web-1");
  auto u = ParseCniArgs("FOO=1", known);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(cni::CodeOf(u.status()), cni::Code::kInvalidEnv);
  EXPECT_TRUE(ParseCniArgs("IgnoreUnknown=1;FOO=1", known).ok());
  EXPECT_TRUE(ParseCniArgs("FOO=1;IgnoreUnknown=true", known).ok());
  EXPECT_FALSE(ParseCniArgs("novalue", known).ok());
  EXPECT_FALSE(ParseCniArgs("=x", known).ok());
  EXPECT_FALSE(ParseCniArgs("IgnoreUnknown=maybe", known).ok());
  EXPECT_TRUE(ParseCniArgs("", known).ok());
}

}  // namespace
}  // namespace weft::cni
