#include "cni/result.h"
#include "cni/errors.h"

#include <gtest/gtest.h>

#include "cni/version.h"

namespace weft::cni {
namespace {

using nlohmann::json;

CniResult Sample() {
  CniResult r;
  r.interfaces.push_back({"wft0123", "aa:bb:cc:dd:ee:01", 1450, "", "", ""});
  r.interfaces.push_back({"eth0", "aa:bb:cc:dd:ee:02", 1450, "/run/netns/p1", "", ""});
  r.ips.push_back({*IpPrefix::Parse("10.244.2.5/32"), IpAddress::Parse("169.254.1.1"), 1});
  r.ips.push_back({*IpPrefix::Parse("fd00:10::5/128"), IpAddress::Parse("fe80::1"), 1});
  Route def{*IpPrefix::Parse("0.0.0.0/0"), IpAddress::Parse("169.254.1.1")};
  def.mtu = 1400;
  r.routes.push_back(def);
  r.routes.push_back({*IpPrefix::Parse("::/0"), IpAddress::Parse("fe80::1")});
  r.dns.nameservers = {"10.96.0.10"};
  r.dns.search = {"svc.cluster.local"};
  return r;
}

TEST(Result, ShapePerVersion) {
  auto r = Sample();
  auto v010 = *EncodeResult(r, "0.1.0");
  EXPECT_EQ(v010["ip4"]["ip"], "10.244.2.5/32");
  EXPECT_EQ(v010["ip4"]["gateway"], "169.254.1.1");
  EXPECT_EQ(v010["ip4"]["routes"][0]["dst"], "0.0.0.0/0");
  EXPECT_EQ(v010["ip6"]["ip"], "fd00:10::5/128");
  EXPECT_FALSE(v010.contains("ips"));
  EXPECT_FALSE(v010.contains("interfaces"));

  auto v040 = *EncodeResult(r, "0.4.0");
  EXPECT_EQ(v040["ips"][0]["version"], "4");
  EXPECT_EQ(v040["ips"][1]["version"], "6");
  EXPECT_EQ(v040["ips"][0]["interface"], 1);
  EXPECT_FALSE(v040["interfaces"][0].contains("mtu"));
  EXPECT_FALSE(v040["routes"][0].contains("mtu"));

  auto v100 = *EncodeResult(r, "1.0.0");
  EXPECT_FALSE(v100["ips"][0].contains("version"));
  EXPECT_FALSE(v100["interfaces"][1].contains("mtu"));

  auto v110 = *EncodeResult(r, "1.1.0");
  EXPECT_EQ(v110["cniVersion"], "1.1.0");
  EXPECT_EQ(v110["interfaces"][1]["mtu"], 1450);
  EXPECT_EQ(v110["interfaces"][1]["sandbox"], "/run/netns/p1");
  EXPECT_EQ(v110["routes"][0]["mtu"], 1400);
  EXPECT_EQ(v110["dns"]["nameservers"][0], "10.96.0.10");

  EXPECT_EQ(cni::CodeOf(EncodeResult(r, "9.9.9").status()), cni::Code::kIncompatibleVersion);
}

TEST(Result, RoundTripsThroughEveryVersion) {
  auto r = Sample();
  for (const auto& v : SupportedVersions()) {
    auto j = *EncodeResult(r, v);
    auto back = DecodeResult(j, "");
    ASSERT_TRUE(back.ok()) << v << ": " << back.status().ToString();
    EXPECT_EQ(back->ips.size(), 2u) << v;
    EXPECT_EQ(back->ips[0].address, r.ips[0].address) << v;
    EXPECT_EQ(back->routes.size(), 2u) << v;
    EXPECT_EQ(back->dns, r.dns) << v;
    if (v == "1.1.0") {
      back->cni_version.clear();
      EXPECT_EQ(*back, r);
    }
  }
}

TEST(Result, DecodeRejectsMalformedResults) {
  const char* bad[] = {
      R"([])",
      R"({"cniVersion":"1.0.0","ips":{}})",
      R"({"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1"}]})",
      R"({"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/24","interface":3}]})",
      R"({"cniVersion":"0.4.0","ips":[{"version":"6","address":"10.0.0.1/24"}]})",
      R"({"cniVersion":"1.0.0","routes":[{"gw":"10.0.0.1"}]})",
      R"({"cniVersion":"1.0.0","interfaces":[{"mac":"x"}]})",
      R"({"cniVersion":"0.2.0","ip4":{"gateway":"10.0.0.1"}})",
      R"({"cniVersion":"1.0.0","dns":{"nameservers":"1.1.1.1"}})",
  };
  for (const char* s : bad) {
    auto r = DecodeResult(json::parse(s), "1.0.0");
    EXPECT_FALSE(r.ok()) << s;
    EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kDecode) << s;
  }
  EXPECT_EQ(cni::CodeOf(DecodeResult(json::parse(R"({"cniVersion":"7.0.0"})"), "").status()),
            cni::Code::kIncompatibleVersion);
}

}  // namespace
}  // namespace weft::cni
