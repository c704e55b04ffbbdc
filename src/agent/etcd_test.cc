#include "agent/etcd.h"

#include <gtest/gtest.h>

namespace weft::agent {
namespace {

// Bodies as etcd 3.4's gateway sends them (captured from etcd-server 3.4.23).
constexpr char kRange[] =
    R"({"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"7","raft_term":"2"},)"
    R"("kvs":[{"key":"L3cvc3VibmV0cy8xMC4yNDQuMi4wLTI0","create_revision":"2","mod_revision":"5","version":"1",)"
    R"("value":"eyJub2RlIjoibjIiLCJob3N0SVAiOiIxOTIuMC4yLjEyIiwidnRlcE1BQyI6IjBhOjAwOjAwOjAwOjAwOjAyIiwiYmFja2VuZCI6InZ4bGFuIn0=",)"
    R"("lease":"2324035537149665541"}],"count":"1"})";

TEST(Base64, RoundTripsAndRejectsGarbage) {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)})
    EXPECT_EQ(Base64Decode(Base64Encode(s)), s);
  EXPECT_EQ(Base64Encode("/w/subnets/"), "L3cvc3VibmV0cy8=");
  EXPECT_FALSE(Base64Decode("a$b=").has_value());
  EXPECT_EQ(PrefixRangeEnd("/w/"), "/w0");
  EXPECT_EQ(PrefixRangeEnd("a\xff"), "b");
}

TEST(EtcdParse, Range) {
  auto r = ParseRangeResponse(kRange);
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

TEST(EtcdParse, EmptyRangeAndErrors) {
  auto r = ParseRangeResponse(R"({"header":{"revision":"3"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->kvs.empty());
  EXPECT_EQ(r->revision, 3);
  auto bad = ParseRangeResponse(R"({"header":{"revision":"3"},"kvs":[{"key":"L3c)");
  EXPECT_EQ(bad.status().code(), Code::kDecode);
  auto err = ParseRangeResponse(R"({"error":"etcdserver: mvcc: required revision has been compacted","code":11,"message":"etcdserver: mvcc: required revision has been compacted"})");
  EXPECT_EQ(err.status().code(), Code::kControlPlane);
  EXPECT_NE(err.status().msg().find("compacted"), std::string::npos);
}

TEST(EtcdParse, WatchCreatedEventsDeleteAndCompaction) {
  auto c = ParseWatchLine(R"({"result":{"header":{"revision":"2"},"created":true}})");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->created);
  EXPECT_TRUE(c->events.empty());
  auto e = ParseWatchLine(
      R"({"result":{"header":{"revision":"9"},"events":[{"kv":{"key":"YQ==","mod_revision":"8","value":"Yg=="}},)"
      R"({"type":"DELETE","kv":{"key":"Yw==","mod_revision":"9"}}]}})");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->events.size(), 2u);
  EXPECT_FALSE(e->events[0].is_delete);  // PUT is omitted by the gateway
  EXPECT_EQ(e->events[0].kv.key, "a");
  EXPECT_EQ(e->events[0].kv.value, "b");
  EXPECT_TRUE(e->events[1].is_delete);
  EXPECT_EQ(e->events[1].kv.mod_revision, 9);
  auto k = ParseWatchLine(R"({"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"2"}})");
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(k->canceled);
  EXPECT_EQ(k->compact_revision, 2);
  auto err = ParseWatchLine(R"({"error":{"grpc_code":14,"http_code":503,"message":"transport is closing"}})");
  EXPECT_EQ(err.status().code(), Code::kControlPlane);
  EXPECT_FALSE(ParseWatchLine(R"({"result":{"header":{},"events":[{"kv":{"key":"***"}}]}})").ok());
}

TEST(EtcdParse, TxnLeaseAndKeepAlive) {
  int64_t rev = 0;
  auto t = ParseTxnResponse(R"({"header":{"revision":"4"},"succeeded":true,"responses":[{"response_put":{}}]})", &rev);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(*t);
  EXPECT_EQ(rev, 4);
  auto f = ParseTxnResponse(R"({"header":{"revision":"4"}})", nullptr);  // failed: "succeeded" omitted
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(*f);
  auto g = ParseLeaseGrant(R"({"header":{"revision":"1"},"ID":"2324035537149665541","TTL":"2"})");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, 2324035537149665541);
  EXPECT_FALSE(ParseLeaseGrant(R"({"header":{}})").ok());
  auto alive = ParseLeaseKeepAlive(R"({"result":{"header":{},"ID":"5","TTL":"10"}})");
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(*alive, 10);
  auto gone = ParseLeaseKeepAlive("{\"result\":{\"header\":{},\"ID\":\"12345\"}}\n");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, 0);
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
  EXPECT_FALSE(ParseNetworkConfig(R"({"network":"10.244.0.0/16","subnetLen":8})").ok());
  EXPECT_FALSE(ParseNetworkConfig(R"({"network":"fd00::/64"})").ok());
  EXPECT_FALSE(ParseNetworkConfig("nope").ok());
}

TEST(PickSubnet, PrefersRememberedThenLowestFree) {
  NetworkConfig c{*IpPrefix::Parse("10.244.0.0/22"), 24};
  std::vector<IpPrefix> taken = {*IpPrefix::Parse("10.244.0.0/24"), *IpPrefix::Parse("10.244.2.0/24")};
  EXPECT_EQ(PickSubnet(c, taken, std::nullopt)->ToString(), "10.244.1.0/24");
  EXPECT_EQ(PickSubnet(c, taken, IpPrefix::Parse("10.244.3.0/24"))->ToString(), "10.244.3.0/24");
  EXPECT_EQ(PickSubnet(c, taken, IpPrefix::Parse("10.244.2.0/24"))->ToString(), "10.244.1.0/24");  // taken
  EXPECT_EQ(PickSubnet(c, taken, IpPrefix::Parse("10.9.0.0/24"))->ToString(), "10.244.1.0/24");    // outside
  taken.push_back(*IpPrefix::Parse("10.244.1.0/24"));
  taken.push_back(*IpPrefix::Parse("10.244.3.0/24"));
  EXPECT_FALSE(PickSubnet(c, taken, std::nullopt).has_value());
}

TEST(EtcdKeys, SubnetValueRoundTrip) {
  LocalNode self{"n9", *IpAddress::Parse("192.0.2.19"), "0a:00:00:00:00:09", Backend::kAuto};
  EtcdKv kv{SubnetKey("/p", *IpPrefix::Parse("10.1.9.0/24")), EncodeSubnetValue(self)};
  auto n = DecodeSubnet("/p", kv);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->name, "n9");
  EXPECT_EQ(n->backend, "auto");
  EXPECT_EQ(n->vtep_mac, self.vtep_mac);
  kv.value = R"({"hostIP":"1.2.3.4"})";
  EXPECT_FALSE(DecodeSubnet("/p", kv).ok());
}

}  // namespace
}  // namespace weft::agent
