#include "agent/reconcile.h"

#include <gtest/gtest.h>
#include <linux/rtnetlink.h>

namespace weft::agent {
namespace {

IpPrefix P(const char* s) { return *IpPrefix::Parse(s); }
IpAddress A(const char* s) { return *IpAddress::Parse(s); }

LocalView Local(Backend b = Backend::kVxlan) {
  LocalView v;
  v.name = "n1";
  v.pod_cidr = P("10.244.1.0/24");
  v.host_ip = A("192.0.2.11");
  v.backend = b;
  v.vxlan_index = 7;
  v.uplink_index = 2;
  v.uplink_subnets = {P("192.0.2.0/24")};
  return v;
}

NodeInfo Peer(const char* name, const char* cidr, const char* host, const char* mac = "0a:00:00:00:00:02") {
  NodeInfo n;
  n.name = name;
  n.pod_cidrs = {P(cidr)};
  n.host_ip = A(host);
  n.vtep_mac = mac;
  return n;
}

TEST(ComputeDesired, VxlanPeerGetsRouteArpAndFdb) {
  PeerMap peers{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12", "0A:00:00:00:00:02")}};
  Desired d = ComputeDesired(Local(), peers);
  ASSERT_EQ(d.state.routes.size(), 1u);
  const auto& r = d.state.routes[0];
  EXPECT_EQ(r.dst, P("10.244.2.0/24"));
  EXPECT_EQ(r.gw, A("10.244.2.0"));
  EXPECT_EQ(r.oif, 7);
  EXPECT_TRUE(r.onlink);
  EXPECT_EQ(r.protocol, sys::kRouteProtoWeft);
  ASSERT_EQ(d.state.arp.size(), 1u);
  EXPECT_EQ(d.state.arp[0].dst, A("10.244.2.0"));
  EXPECT_EQ(d.state.arp[0].mac, "0a:00:00:00:00:02");  // normalised
  ASSERT_EQ(d.state.fdb.size(), 1u);
  EXPECT_EQ(d.state.fdb[0].dst, A("192.0.2.12"));
  EXPECT_TRUE(d.state.fdb[0].fdb);
  EXPECT_EQ(d.vxlan_peers, 1u);
}

TEST(ComputeDesired, SelfMissingDataAndOverlapsAreSkipped) {
  PeerMap peers{
      {"n1", Peer("n1", "10.244.1.0/24", "192.0.2.11")},             // ourselves
      {"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12", "")},         // no MAC yet
      {"n3", Peer("n3", "10.244.1.128/25", "192.0.2.13")},           // overlaps ours
      {"n4", Peer("n4", "10.244.4.0/24", "192.0.2.14")},
      {"n5", Peer("n5", "10.244.4.0/24", "192.0.2.15")},             // overlaps n4
      {"n6", Peer("n6", "10.244.6.0/24", "192.0.2.16", "01:00:5e:00:00:01")},  // multicast MAC
  };
  peers["n7"] = Peer("n7", "10.244.7.0/24", "192.0.2.17");
  peers["n7"].host_ip.reset();
  Desired d = ComputeDesired(Local(), peers);
  ASSERT_EQ(d.state.routes.size(), 1u);
  EXPECT_EQ(d.state.routes[0].dst, P("10.244.4.0/24"));
  EXPECT_EQ(d.skipped.size(), 5u);
}

TEST(ComputeDesired, OverlapsAreFoundWhicheverSideIsLarger) {
  PeerMap peers{
      {"a", Peer("a", "10.244.8.0/24", "192.0.2.20")},
      {"b", Peer("b", "10.244.0.0/20", "192.0.2.21")},   // covers a's and ours
      {"c", Peer("c", "10.244.9.0/24", "192.0.2.22")},   // adjacent to a: fine
      {"d", Peer("d", "10.244.9.64/26", "192.0.2.23")},  // inside c's
      {"e", Peer("e", "10.0.0.0/8", "192.0.2.24")},      // covers everything
      {"f", Peer("f", "10.245.0.0/24", "192.0.2.25")},   // e's range (e was skipped): fine
  };
  Desired d = ComputeDesired(Local(), peers);
  std::vector<IpPrefix> routed;
  for (const auto& r : d.state.routes) routed.push_back(r.dst);
  EXPECT_EQ(routed, (std::vector<IpPrefix>{P("10.244.8.0/24"), P("10.244.9.0/24"), P("10.245.0.0/24")}));
  ASSERT_EQ(d.skipped.size(), 3u);
  EXPECT_EQ(d.skipped[0], "b: pod CIDR 10.244.0.0/20 overlaps a's");
  EXPECT_EQ(d.skipped[1], "d: pod CIDR 10.244.9.64/26 overlaps c's");
  EXPECT_EQ(d.skipped[2].rfind("e: pod CIDR 10.0.0.0/8 overlaps ", 0), 0u);
}

TEST(ComputeDesired, HostGwRoutesOnLinkPeersAndSkipsOthers) {
  PeerMap peers{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12")},
                {"n3", Peer("n3", "10.244.3.0/24", "198.18.0.3")}};
  Desired d = ComputeDesired(Local(Backend::kHostGw), peers);
  ASSERT_EQ(d.state.routes.size(), 1u);
  EXPECT_EQ(d.state.routes[0].gw, A("192.0.2.12"));
  EXPECT_EQ(d.state.routes[0].oif, 2);
  EXPECT_FALSE(d.state.routes[0].onlink);
  EXPECT_TRUE(d.state.arp.empty());
  EXPECT_EQ(d.skipped.size(), 1u);
}

TEST(ComputeDesired, AutoIsDirectOnLinkAndVxlanOtherwise) {
  PeerMap peers{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12")},
                {"n3", Peer("n3", "10.244.3.0/24", "198.18.0.3")}};
  Desired d = ComputeDesired(Local(Backend::kAuto), peers);
  EXPECT_EQ(d.direct_peers, 1u);
  EXPECT_EQ(d.vxlan_peers, 1u);
  ASSERT_EQ(d.state.routes.size(), 2u);
  EXPECT_EQ(d.state.routes[0].gw, A("192.0.2.12"));
  EXPECT_EQ(d.state.routes[1].oif, 7);
  ASSERT_EQ(d.state.fdb.size(), 1u);
  EXPECT_EQ(d.state.fdb[0].dst, A("198.18.0.3"));
}

TEST(Diff, EmptyWhenKernelMatches) {
  PeerMap peers{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12")}};
  Desired d = ComputeDesired(Local(), peers);
  KernelState have = d.state;
  have.arp[0].mac = "0A:00:00:00:00:02";  // case differences are not changes
  EXPECT_TRUE(Diff(d.state, have).empty());
}

TEST(Diff, AddsMissingRemovesStaleAndReplacesChanged) {
  PeerMap before{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12")},
                 {"n3", Peer("n3", "10.244.3.0/24", "192.0.2.13", "0a:00:00:00:00:03")}};
  KernelState have = ComputeDesired(Local(), before).state;
  // n3 left while we were down; n2 moved hosts and got a new MAC; n4 joined.
  PeerMap after{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.22", "0a:00:00:00:00:22")},
                {"n4", Peer("n4", "10.244.4.0/24", "192.0.2.14", "0a:00:00:00:00:04")}};
  Plan p = Diff(ComputeDesired(Local(), after).state, have);
  ASSERT_EQ(p.route_upserts.size(), 1u);  // n4 (n2's route is unchanged: via its VTEP IP)
  EXPECT_EQ(p.route_upserts[0].dst, P("10.244.4.0/24"));
  ASSERT_EQ(p.route_deletes.size(), 1u);
  EXPECT_EQ(p.route_deletes[0].dst, P("10.244.3.0/24"));
  EXPECT_EQ(p.arp_upserts.size(), 2u);  // n2's new MAC, n4
  ASSERT_EQ(p.arp_deletes.size(), 1u);
  EXPECT_EQ(p.arp_deletes[0].dst, A("10.244.3.0"));
  EXPECT_EQ(p.fdb_adds.size(), 2u);     // n2 (new MAC+host), n4
  EXPECT_EQ(p.fdb_deletes.size(), 2u);  // n2's old entry, n3
}

TEST(Diff, SwitchingModeReplacesTheRoute) {
  PeerMap peers{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12")}};
  KernelState have = ComputeDesired(Local(Backend::kVxlan), peers).state;
  Plan p = Diff(ComputeDesired(Local(Backend::kHostGw), peers).state, have);
  ASSERT_EQ(p.route_upserts.size(), 1u);
  EXPECT_EQ(p.route_upserts[0].gw, A("192.0.2.12"));
  EXPECT_TRUE(p.route_deletes.empty());
  EXPECT_EQ(p.arp_deletes.size(), 1u);
  EXPECT_EQ(p.fdb_deletes.size(), 1u);
}

TEST(IsAgentRoute, OnlyGatewayRoutesWithOurProtocol) {
  sys::RouteSpec pod{P("10.244.1.5/32"), std::nullopt, 9, RT_SCOPE_LINK, RT_TABLE_MAIN, sys::kRouteProtoWeft};
  EXPECT_FALSE(IsAgentRoute(pod));  // the plugin's per-pod route
  sys::RouteSpec peer{P("10.244.2.0/24"), A("10.244.2.0"), 7, 0, RT_TABLE_MAIN, sys::kRouteProtoWeft, true};
  EXPECT_TRUE(IsAgentRoute(peer));
  peer.protocol = 4;  // static: somebody else's
  EXPECT_FALSE(IsAgentRoute(peer));
}

TEST(NormalizeMac, Validates) {
  EXPECT_EQ(NormalizeMac("AA:bb:0c:dd:ee:ff"), "aa:bb:0c:dd:ee:ff");
  EXPECT_EQ(NormalizeMac("00:00:00:00:00:00"), "");
  EXPECT_EQ(NormalizeMac("ff:ff:ff:ff:ff:ff"), "");
  EXPECT_EQ(NormalizeMac("aa:bb:cc"), "");
  EXPECT_EQ(NormalizeMac("aa:bb:cc:dd:ee:ff:00"), "");
}

}  // namespace
}  // namespace weft::agent
