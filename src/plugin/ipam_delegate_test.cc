#include "plugin/ipam_delegate.h"
#include "cni/errors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace weft::plugin {
namespace {

TEST(DelegatedIpam, NegotiatesTheHighestCommonVersion) {
  std::vector<std::string> host_local = {"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"};
  EXPECT_EQ(NegotiateVersion("1.1.0", host_local), "1.0.0");
  EXPECT_EQ(NegotiateVersion("0.4.0", host_local), "0.4.0");
  EXPECT_EQ(NegotiateVersion("0.3.1", {"1.0.0"}), std::nullopt);
  EXPECT_EQ(NegotiateVersion("1.1.0", {"9.9.9", "0.3.1"}), "0.3.1");
}

TEST(DelegatedIpam, RewritesOnlyTheVersion) {
  auto s = WithCniVersion(R"({"cniVersion":"1.1.0","name":"n","ipam":{"type":"host-local"}})", "1.0.0");
  ASSERT_TRUE(s.ok());
  auto j = nlohmann::json::parse(*s);
  EXPECT_EQ(j["cniVersion"], "1.0.0");
  EXPECT_EQ(j["ipam"]["type"], "host-local");
  EXPECT_FALSE(WithCniVersion("{nope", "1.0.0").ok());
}

TEST(DelegatedIpam, ParsesErrorObjects) {
  auto e = ParsePluginError(R"({"code":1,"msg":"incompatible CNI versions","details":"x"})");
  EXPECT_EQ(e.code, 1);
  EXPECT_EQ(e.msg, "incompatible CNI versions");
  EXPECT_EQ(ParsePluginError("garbage").code, 0);
  EXPECT_EQ(ParsePluginError(R"({"ips":[]})").code, 0);
}

TEST(DelegatedIpam, PicksOneAddressPerFamily) {
  cni::CniResult r;
  r.ips.push_back({*IpPrefix::Parse("10.88.0.2/24"), IpAddress::Parse("10.88.0.1"), std::nullopt});
  r.ips.push_back({*IpPrefix::Parse("fd00::2/64"), IpAddress::Parse("fd00::1"), std::nullopt});
  r.routes.push_back({*IpPrefix::Parse("0.0.0.0/0"), std::nullopt});
  auto a = PickAddrs(r, "host-local");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->v4->address.ToString(), "10.88.0.2/24");
  EXPECT_EQ(a->v6->gateway->ToString(), "fd00::1");
  EXPECT_EQ(a->routes.size(), 1u);
  r.ips.push_back({*IpPrefix::Parse("10.88.0.3/24"), std::nullopt, std::nullopt});
  EXPECT_EQ(cni::CodeOf(PickAddrs(r, "host-local").status()), cni::Code::kDelegatedIpam);
  EXPECT_EQ(cni::CodeOf(PickAddrs(cni::CniResult{}, "host-local").status()), cni::Code::kDelegatedIpam);
}

}  // namespace
}  // namespace weft::plugin
