#include "agent/etcd.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace weft::agent {
namespace {

// Bodies as etcd 3.4's gateway sends them (captured from etcd-server 3.4.23).
constexpr char kRange[] =
    R"({"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"7","raft_term":"2"},)"
    R"("kvs":[{"key":"L3cvc3VibmV0cy8xMC4yNDQuMi4wLTI0","create_revision":"2","mod_revision":"5","version":"1",)"
    R"("value":"eyJub2RlIjoibjIiLCJob3N0SVAiOiIxOTIuMC4yLjEyIiwidnRlcE1BQyI6IjBhOjAwOjAwOjAwOjAwOjAyIiwiYmFja2VuZCI6InZ4bGFuIn0=",)"
    R"("lease":"2324035537149665541"}],"count":"1"})";

TEST(EtcdParse, Range) {
  auto r = etcd::ParseRangeResponse(kRange);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->revision, 7);
  ASSERT_EQ(r->kvs.size(), 1u);
  EXPECT_EQ(r->kvs[0].key, "/w/subnets/10.244.2.0-24");
  EXPECT_EQ(r->kvs[0].mod_revision, 5);
  EXPECT_EQ(r->kvs[0].lease, 2324035537149665541);
  auto n = DecodeSubnet("/w", r->kvs[0]);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->name, "n2");
  EXPECT_EQ(n->pod_cidrs[0].ToString(), "10.244.2.0/24");
  EXPECT_EQ(n->host_ip->ToString(), "192.0.2.12");
  EXPECT_EQ(n->vtep_mac, "0a:00:00:00:00:02");
}

TEST(EtcdKeys, SubnetKeyRoundTrip) {
  IpPrefix p = *IpPrefix::Parse("10.244.3.0/24");
  std::string k = SubnetKey("/weft/network", p);
  EXPECT_EQ(k, "/weft/network/subnets/10.244.3.0-24");
  EXPECT_EQ(SubnetFromKey("/weft/network", k), p);
  EXPECT_FALSE(SubnetFromKey("/weft/network", "/weft/network/subnets/junk").has_value());
  EXPECT_FALSE(SubnetFromKey("/weft/network", "/other/subnets/10.244.3.0-24").has_value());
  EXPECT_FALSE(SubnetFromKey("/weft/network", "/weft/network/subnets/10.244.3.1-24").has_value());  // host bits
}

TEST(EtcdKeys, NetworkConfig) {
  auto c = ParseNetworkConfig(R"({"network":"10.244.0.0/16","subnetLen":24})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->subnet_len, 24);
  EXPECT_EQ(ParseNetworkConfig(EncodeNetworkConfig(*c))->network, c->network);
  EXPECT_FALSE(c->network6.has_value());
  EXPECT_EQ(EncodeNetworkConfig(*c), R"({"network":"10.244.0.0/16","subnetLen":24})");  // as before dual-stack
  EXPECT_FALSE(ParseNetworkConfig(R"({"network":"10.244.0.0/16","subnetLen":8})").ok());
  EXPECT_FALSE(ParseNetworkConfig(R"({"network":"fd00::/64"})").ok());
  EXPECT_FALSE(ParseNetworkConfig("nope").ok());
  EXPECT_FALSE(ParseNetworkConfig("{}").ok());
}

// Found by fuzz_etcd's long run: a subnet length that is a JSON float out of
// int's range was converted to int (undefined behaviour) before the range
// check. Every non-integer is refused now, with the reason.
TEST(EtcdKeys, NetworkConfigSubnetLengthsMustBeIntegers) {
  for (const char* bad : {R"({"network":"10.244.0.0/16","subnetLen":5e117})",
                          R"({"network":"10.244.0.0/16","subnetLen":24.5})",
                          R"({"network":"10.244.0.0/16","subnetLen":24.0})",
                          R"({"network":"10.244.0.0/16","subnetLen":"24"})",
                          R"({"network":"10.244.0.0/16","subnetLen":-1})",
                          R"({"network":"10.244.0.0/16","subnetLen":18446744073709551615})",
                          R"({"ipv6Network":"fd00::/56","ipv6SubnetLen":1e300})",
                          R"({"ipv6Network":"fd00::/56","ipv6SubnetLen":127})"}) {
    auto c = ParseNetworkConfig(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().ToString().find("must be an integer between"), std::string::npos) << c.status().ToString();
  }
  auto null_len = ParseNetworkConfig(R"({"network":"10.244.0.0/16","subnetLen":null})");
  ASSERT_TRUE(null_len.ok());
  EXPECT_EQ(null_len->subnet_len, 24);  // null is "not set", as flannel reads it
}

TEST(EtcdKeys, DualStackAndIpv6OnlyNetworkConfig) {
  auto d = ParseNetworkConfig(
      R"({"network":"10.244.0.0/16","subnetLen":24,"ipv6Network":"fd00:10:244::/56","ipv6SubnetLen":64})");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->network6->ToString(), "fd00:10:244::/56");
  EXPECT_EQ(d->subnet_len6, 64);
  EXPECT_EQ(d->Networks().size(), 2u);
  auto back = ParseNetworkConfig(EncodeNetworkConfig(*d));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->network, d->network);
  EXPECT_EQ(back->network6, d->network6);
  auto v6 = ParseNetworkConfig(R"({"ipv6Network":"fd00:10:244::/56"})");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_FALSE(v6->network.has_value());
  EXPECT_EQ(v6->subnet_len6, 64);  // kube-controller-manager's --node-cidr-mask-size-ipv6 default
  EXPECT_EQ(EncodeNetworkConfig(*v6), R"({"ipv6Network":"fd00:10:244::/56","ipv6SubnetLen":64})");
  EXPECT_FALSE(ParseNetworkConfig(R"({"ipv6Network":"fd00:10:244::/56","ipv6SubnetLen":48})").ok());
  EXPECT_FALSE(ParseNetworkConfig(R"({"ipv6Network":"fd00:10:244::/56","ipv6SubnetLen":127})").ok());
  EXPECT_FALSE(ParseNetworkConfig(R"({"ipv6Network":"10.0.0.0/8"})").ok());
  EXPECT_FALSE(ParseNetworkConfig(R"({"ipv6Network":"fd00:10:244::1/56"})").ok());  // host bits
}

TEST(EtcdKeys, Ipv6SubnetKeysLiveBesideTheIpv4Ones) {
  IpPrefix p = *IpPrefix::Parse("fd00:10:244:3::/64");
  std::string k = SubnetKey("/weft/network", p);
  EXPECT_EQ(k, "/weft/network/subnets6/fd00:10:244:3::-64");
  EXPECT_EQ(SubnetFromKey("/weft/network", k), p);
  // Each family in its own directory only.
  EXPECT_FALSE(SubnetFromKey("/weft/network", "/weft/network/subnets/fd00:10:244:3::-64").has_value());
  EXPECT_FALSE(SubnetFromKey("/weft/network", "/weft/network/subnets6/10.244.3.0-24").has_value());
  // One range from SubnetsKeyPrefix reads both directories.
  std::string from = SubnetsKeyPrefix("/weft/network"), to = etcd::PrefixRangeEnd(from);
  for (const std::string& key : {SubnetKey("/weft/network", *IpPrefix::Parse("10.244.3.0/24")), k})
    EXPECT_TRUE(key >= from && key < to) << key;
  EXPECT_FALSE(std::string("/weft/network/config") >= from && std::string("/weft/network/config") < to);
}

TEST(PickSubnet, PrefersRememberedThenLowestFree) {
  IpPrefix net = *IpPrefix::Parse("10.244.0.0/22");
  std::vector<IpPrefix> taken = {*IpPrefix::Parse("10.244.0.0/24"), *IpPrefix::Parse("10.244.2.0/24")};
  EXPECT_EQ(PickSubnet(net, 24, taken, std::nullopt)->ToString(), "10.244.1.0/24");
  EXPECT_EQ(PickSubnet(net, 24, taken, IpPrefix::Parse("10.244.3.0/24"))->ToString(), "10.244.3.0/24");
  EXPECT_EQ(PickSubnet(net, 24, taken, IpPrefix::Parse("10.244.2.0/24"))->ToString(), "10.244.1.0/24");  // taken
  EXPECT_EQ(PickSubnet(net, 24, taken, IpPrefix::Parse("10.9.0.0/24"))->ToString(), "10.244.1.0/24");    // outside
  taken.push_back(*IpPrefix::Parse("10.244.1.0/24"));
  taken.push_back(*IpPrefix::Parse("10.244.3.0/24"));
  EXPECT_FALSE(PickSubnet(net, 24, taken, std::nullopt).has_value());
}

TEST(PickSubnet, Ipv6SubnetsOfAnyLength) {
  IpPrefix net = *IpPrefix::Parse("fd00:10:244::/56");
  std::vector<IpPrefix> taken = {*IpPrefix::Parse("fd00:10:244::/64"), *IpPrefix::Parse("10.244.1.0/24")};
  EXPECT_EQ(PickSubnet(net, 64, taken, std::nullopt)->ToString(), "fd00:10:244:1::/64");
  EXPECT_EQ(PickSubnet(net, 64, taken, IpPrefix::Parse("fd00:10:244:ff::/64"))->ToString(), "fd00:10:244:ff::/64");
  EXPECT_EQ(PickSubnet(net, 64, taken, IpPrefix::Parse("fd00:10:244:1::/64"))->ToString(), "fd00:10:244:1::/64");
  EXPECT_EQ(PickSubnet(net, 64, taken, IpPrefix::Parse("10.244.2.0/24"))->ToString(), "fd00:10:244:1::/64");
  // Subnets shorter than /64 and longer ones; the last of a small network.
  EXPECT_EQ(PickSubnet(*IpPrefix::Parse("fd00::/48"), 60, {*IpPrefix::Parse("fd00::/60")}, std::nullopt)->ToString(),
            "fd00:0:0:10::/60");
  EXPECT_EQ(PickSubnet(*IpPrefix::Parse("fd00::/64"), 112, {}, std::nullopt)->ToString(), "fd00::/112");
  IpPrefix small = *IpPrefix::Parse("fd00:10:244::/62");
  std::vector<IpPrefix> three = {*IpPrefix::Parse("fd00:10:244::/64"), *IpPrefix::Parse("fd00:10:244:1::/64"),
                                 *IpPrefix::Parse("fd00:10:244:2::/64")};
  EXPECT_EQ(PickSubnet(small, 64, three, std::nullopt)->ToString(), "fd00:10:244:3::/64");
  three.push_back(*IpPrefix::Parse("fd00:10:244:3::/64"));
  EXPECT_FALSE(PickSubnet(small, 64, three, std::nullopt).has_value());
  EXPECT_FALSE(PickSubnet(small, 60, {}, std::nullopt).has_value());  // shorter than the network
}

TEST(EtcdKeys, SubnetValueRoundTrip) {
  overlay::LocalNode self{"n9", *IpAddress::Parse("192.0.2.19"), "0a:00:00:00:00:09", overlay::Backend::kAuto};
  etcd::EtcdKv kv{SubnetKey("/p", *IpPrefix::Parse("10.1.9.0/24")), EncodeSubnetValue(self)};
  auto n = DecodeSubnet("/p", kv);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->name, "n9");
  EXPECT_EQ(n->backend, "auto");
  EXPECT_EQ(n->vtep_mac, self.vtep_mac);
  EXPECT_FALSE(n->host_ip6.has_value());
  EXPECT_EQ(nlohmann::json::parse(kv.value).count("hostIP6"), 0u);  // no IPv6 address, no field
  kv.value = R"({"hostIP":"1.2.3.4"})";
  EXPECT_FALSE(DecodeSubnet("/p", kv).ok());
}

TEST(EtcdKeys, DualStackRecords) {
  overlay::LocalNode self{"n9", *IpAddress::Parse("192.0.2.19"), "0a:00:00:00:00:09", overlay::Backend::kVxlan,
                 *IpAddress::Parse("2001:db8::19")};
  std::string value = EncodeSubnetValue(self);
  EXPECT_EQ(value, R"({"backend":"vxlan","hostIP":"192.0.2.19","hostIP6":"2001:db8::19","node":"n9",)"
                   R"("vtepMAC":"0a:00:00:00:00:09"})");
  etcd::EtcdKv v6{SubnetKey("/p", *IpPrefix::Parse("fd00:10:244:9::/64")), value};
  auto n = DecodeSubnet("/p", v6);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->pod_cidrs, std::vector<IpPrefix>{*IpPrefix::Parse("fd00:10:244:9::/64")});
  EXPECT_EQ(n->host_ip6, self.host_ip6);
  EXPECT_EQ(n->host_mac, "");  // a record without hostMAC (an older weftd's)
  self.host_mac = "0a:00:00:00:00:19";
  v6.value = EncodeSubnetValue(self);
  EXPECT_EQ(nlohmann::json::parse(v6.value)["hostMAC"], "0a:00:00:00:00:19");
  EXPECT_EQ(DecodeSubnet("/p", v6)->host_mac, "0a:00:00:00:00:19");
  // IPv6-only: the host IP is IPv6 too.
  overlay::LocalNode only6{"n8", *IpAddress::Parse("2001:db8::18"), "0a:00:00:00:00:08", overlay::Backend::kHostGw,
                  *IpAddress::Parse("2001:db8::18")};
  auto m = DecodeSubnet("/p", {SubnetKey("/p", *IpPrefix::Parse("fd00:10:244:8::/64")), EncodeSubnetValue(only6)});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->host_ip->ToString(), "2001:db8::18");
  // A record from before dual-stack (the captured one above) has no hostIP6.
  auto old = DecodeSubnet("/w", etcd::ParseRangeResponse(kRange)->kvs[0]);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->host_ip6.has_value());
}

overlay::NodeInfo Rec(const char* node, const char* cidr, const char* host) {
  overlay::NodeInfo n;
  n.name = node;
  n.pod_cidrs = {*IpPrefix::Parse(cidr)};
  n.host_ip = IpAddress::Parse(host);
  return n;
}

TEST(SubnetRecords, MergePerNodeAndFamily) {
  SubnetRecords r;
  EXPECT_EQ(r.Put("/p/subnets6/fd00:2::-64", Rec("n2", "fd00:2::/64", "192.0.2.12"), 5),
            std::vector<std::string>{"n2"});
  r.Put("/p/subnets/10.2.0.0-24", Rec("n2", "10.2.0.0/24", "192.0.2.12"), 5);
  r.Put("/p/subnets/10.3.0.0-24", Rec("n3", "10.3.0.0/24", "192.0.2.13"), 6);
  auto n2 = r.Node("n2");
  ASSERT_TRUE(n2.has_value());
  EXPECT_EQ(n2->pod_cidrs, (std::vector<IpPrefix>{*IpPrefix::Parse("10.2.0.0/24"), *IpPrefix::Parse("fd00:2::/64")}));
  EXPECT_EQ(r.Peers("n3").size(), 1u);
  EXPECT_EQ(r.Peers("").size(), 2u);

  // A newer record sets the node's fields; per family the newer subnet wins.
  r.Put("/p/subnets/10.2.9.0-24", Rec("n2", "10.2.9.0/24", "192.0.2.22"), 9);
  n2 = r.Node("n2");
  EXPECT_EQ(n2->host_ip->ToString(), "192.0.2.22");
  EXPECT_EQ(n2->pod_cidrs, (std::vector<IpPrefix>{*IpPrefix::Parse("10.2.9.0/24"), *IpPrefix::Parse("fd00:2::/64")}));
  r.Delete("/p/subnets/10.2.9.0-24");
  EXPECT_EQ(r.Node("n2")->pod_cidrs[0].ToString(), "10.2.0.0/24");

  // A key rewritten by another node touches both.
  EXPECT_EQ(r.Put("/p/subnets/10.3.0.0-24", Rec("n4", "10.3.0.0/24", "192.0.2.14"), 10),
            (std::vector<std::string>{"n3", "n4"}));
  EXPECT_FALSE(r.Node("n3").has_value());
  EXPECT_EQ(r.Delete("/p/subnets6/fd00:2::-64"), std::vector<std::string>{"n2"});
  EXPECT_EQ(r.Node("n2")->pod_cidrs.size(), 1u);
  EXPECT_TRUE(r.Delete("/p/nothing").empty());
  r.Clear();
  EXPECT_TRUE(r.Peers("").empty());
}

}  // namespace
}  // namespace weft::agent
