#include "agent/kube.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace weft::agent {
namespace {

constexpr char kNode[] = R"({"kind":"Node","apiVersion":"v1","metadata":{"name":"n2","resourceVersion":"1234",
  "annotations":{"weft.io/vtep-mac":"0a:00:00:00:00:02","weft.io/backend":"vxlan"}},
  "spec":{"podCIDR":"10.244.2.0/24","podCIDRs":["fd00:2::/64","10.244.2.0/24"]},
  "status":{"addresses":[{"type":"Hostname","address":"n2"},{"type":"InternalIP","address":"192.0.2.12"}]}})";

TEST(KubeParse, NodePrefersAnnotationsAndSortsIpv4First) {
  auto n = ParseNode(kNode);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->info.name, "n2");
  EXPECT_EQ(n->resource_version, "1234");
  ASSERT_EQ(n->info.pod_cidrs.size(), 2u);
  EXPECT_EQ(n->info.pod_cidrs[0].ToString(), "10.244.2.0/24");
  EXPECT_EQ(n->info.host_ip->ToString(), "192.0.2.12");  // InternalIP fallback
  EXPECT_EQ(n->info.vtep_mac, "0a:00:00:00:00:02");
  auto j = nlohmann::json::parse(kNode);
  j["metadata"]["annotations"]["weft.io/host-ip"] = "198.18.0.2";
  j["spec"].erase("podCIDRs");
  auto m = ParseNode(j.dump());
  EXPECT_EQ(m->info.host_ip->ToString(), "198.18.0.2");
  EXPECT_EQ(m->info.pod_cidrs.size(), 1u);
  EXPECT_FALSE(ParseNode(R"({"metadata":{}})").ok());
  EXPECT_EQ(ParseNode("{").status().reason(), Reason::kMalformed);
}

TEST(KubeParse, AnnotationPatchAndMatch) {
  overlay::LocalNode self{"n2", *IpAddress::Parse("192.0.2.12"), "0a:00:00:00:00:02", overlay::Backend::kVxlan};
  auto patch = nlohmann::json::parse(AnnotationPatch(self));
  EXPECT_EQ(patch["metadata"]["annotations"]["weft.io/vtep-mac"], "0a:00:00:00:00:02");
  EXPECT_EQ(patch["metadata"]["annotations"]["weft.io/host-ip"], "192.0.2.12");
  auto n = ParseNode(kNode);
  EXPECT_FALSE(AnnotationsMatch(*n, self));  // host-ip annotation missing
  n->annotations["weft.io/host-ip"] = "192.0.2.12";
  EXPECT_TRUE(AnnotationsMatch(*n, self));
  overlay::LocalNode gw = self;
  gw.vtep_mac.clear();
  gw.backend = overlay::Backend::kHostGw;
  EXPECT_TRUE(nlohmann::json::parse(AnnotationPatch(gw))["metadata"]["annotations"]["weft.io/vtep-mac"].is_null());
  // The uplink MAC (host-gw's binding): published when known, and read back.
  EXPECT_EQ(patch["metadata"]["annotations"].count("weft.io/host-mac"), 0u);
  gw.host_mac = "0a:00:00:00:00:12";
  EXPECT_EQ(nlohmann::json::parse(AnnotationPatch(gw))["metadata"]["annotations"]["weft.io/host-mac"],
            "0a:00:00:00:00:12");
  self.host_mac = "0a:00:00:00:00:12";
  EXPECT_FALSE(AnnotationsMatch(*n, self));  // host-mac annotation missing
  n->annotations["weft.io/host-mac"] = "0a:00:00:00:00:12";
  EXPECT_TRUE(AnnotationsMatch(*n, self));
  auto j = nlohmann::json::parse(kNode);
  j["metadata"]["annotations"]["weft.io/host-mac"] = "0a:00:00:00:00:12";
  EXPECT_EQ(ParseNode(j.dump())->info.host_mac, "0a:00:00:00:00:12");
}

TEST(KubeParse, DualStackNodeAddresses) {
  // Both pod CIDRs; the IPv6 host address from the annotation, else the
  // first IPv6 InternalIP.
  auto j = nlohmann::json::parse(kNode);
  j["status"]["addresses"].push_back({{"type", "InternalIP"}, {"address", "2001:db8::12"}});
  auto n = ParseNode(j.dump());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->info.host_ip->ToString(), "192.0.2.12");
  EXPECT_EQ(n->info.host_ip6->ToString(), "2001:db8::12");
  EXPECT_EQ(overlay::UnderlayAddress(n->info, true)->ToString(), "2001:db8::12");
  j["metadata"]["annotations"]["weft.io/host-ip6"] = "2001:db8:1::12";
  EXPECT_EQ(ParseNode(j.dump())->info.host_ip6->ToString(), "2001:db8:1::12");
  j["metadata"]["annotations"]["weft.io/host-ip6"] = "192.0.2.99";  // not IPv6: ignored, no fallback
  EXPECT_FALSE(ParseNode(j.dump())->info.host_ip6.has_value());
  // IPv6-only: the only InternalIP is the host IP.
  auto v6 = nlohmann::json::parse(kNode);
  v6["spec"] = {{"podCIDRs", {"fd00:10:244:2::/64"}}};
  v6["status"]["addresses"] = {{{"type", "InternalIP"}, {"address", "2001:db8::12"}}};
  auto m = ParseNode(v6.dump());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->info.host_ip->ToString(), "2001:db8::12");
  EXPECT_EQ(m->info.host_ip6->ToString(), "2001:db8::12");
  EXPECT_EQ(m->info.pod_cidrs.size(), 1u);
  EXPECT_FALSE(overlay::UnderlayAddress(m->info, false).has_value());
}

TEST(KubeParse, AnnotationPatchPublishesTheIpv6Address) {
  overlay::LocalNode self{"n2", *IpAddress::Parse("192.0.2.12"), "0a:00:00:00:00:02", overlay::Backend::kVxlan,
                 *IpAddress::Parse("2001:db8::12")};
  auto a = nlohmann::json::parse(AnnotationPatch(self))["metadata"]["annotations"];
  EXPECT_EQ(a["weft.io/host-ip6"], "2001:db8::12");
  auto n = ParseNode(kNode);
  n->annotations["weft.io/host-ip"] = "192.0.2.12";
  EXPECT_FALSE(AnnotationsMatch(*n, self));  // host-ip6 missing
  n->annotations["weft.io/host-ip6"] = "2001:db8::12";
  EXPECT_TRUE(AnnotationsMatch(*n, self));
  self.host_ip6.reset();  // none: the annotation is removed (null in the merge patch)
  EXPECT_TRUE(nlohmann::json::parse(AnnotationPatch(self))["metadata"]["annotations"]["weft.io/host-ip6"].is_null());
  EXPECT_FALSE(AnnotationsMatch(*n, self));
}

}  // namespace
}  // namespace weft::agent
