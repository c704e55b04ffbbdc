#include "overlay/reconcile.h"

#include <algorithm>

#include <gtest/gtest.h>
#include <linux/rtnetlink.h>

namespace weft::overlay {
namespace {

IpPrefix P(const char* s) { return *IpPrefix::Parse(s); }
IpAddress A(const char* s) { return *IpAddress::Parse(s); }

LocalView Local(Backend b = Backend::kVxlan) {
  LocalView v;
  v.name = "n1";
  v.pod_cidrs = {P("10.244.1.0/24")};
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
  EXPECT_EQ(r.priority, 0x0af402);  // the CIDR's network number
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

// Dual-stack: this node has both pod CIDRs, an IPv4 underlay (the VXLAN
// local) and an IPv6 address on the same link.
LocalView DualLocal(Backend b = Backend::kVxlan) {
  LocalView v = Local(b);
  v.pod_cidrs = {P("10.244.1.0/24"), P("fd00:10:244:1::/64")};
  v.host_ip6 = A("2001:db8::11");
  v.uplink_subnets = {P("192.0.2.0/24"), P("2001:db8::/64")};
  return v;
}

NodeInfo DualPeer(const char* name, int i, const char* host6 = nullptr) {
  std::string n = std::to_string(i);
  NodeInfo p = Peer(name, ("10.244." + n + ".0/24").c_str(), ("192.0.2." + std::to_string(10 + i)).c_str(),
                    ("0a:00:00:00:00:0" + n).c_str());
  p.pod_cidrs.push_back(P(("fd00:10:244:" + n + "::/64").c_str()));
  if (host6) p.host_ip6 = A(host6);
  return p;
}

TEST(ComputeDesired, DualStackVxlanRoutesBothFamiliesOverTheIpv4Underlay) {
  PeerMap peers{{"n2", DualPeer("n2", 2, "2001:db8::12")}};
  Desired d = ComputeDesired(DualLocal(), peers);
  ASSERT_EQ(d.state.routes.size(), 2u);
  EXPECT_EQ(d.state.routes[1].dst, P("fd00:10:244:2::/64"));
  EXPECT_EQ(d.state.routes[1].gw, A("fd00:10:244:2::"));  // the peer's IPv6 VTEP address
  EXPECT_EQ(d.state.routes[1].oif, 7);
  EXPECT_TRUE(d.state.routes[1].onlink);
  ASSERT_EQ(d.state.arp.size(), 2u);  // an ARP and an NDP entry, the same MAC
  EXPECT_EQ(d.state.arp[1].dst, A("fd00:10:244:2::"));
  EXPECT_EQ(d.state.arp[1].mac, "0a:00:00:00:00:02");
  ASSERT_EQ(d.state.fdb.size(), 1u);  // one remote for both families: the IPv4 underlay
  EXPECT_EQ(d.state.fdb[0].dst, A("192.0.2.12"));
  EXPECT_EQ(d.peers, 1u);
  EXPECT_EQ(d.peers_v4, 1u);
  EXPECT_EQ(d.peers_v6, 1u);
  EXPECT_EQ(d.vxlan_peers, 2u);
  EXPECT_TRUE(d.skipped.empty());
}

TEST(ComputeDesired, PeersIpv6CidrIsLeftOutWhenThisNodeHasNone) {
  PeerMap peers{{"n2", DualPeer("n2", 2)}};
  Desired d = ComputeDesired(Local(), peers);
  ASSERT_EQ(d.state.routes.size(), 1u);
  EXPECT_EQ(d.state.routes[0].dst, P("10.244.2.0/24"));
  ASSERT_EQ(d.skipped.size(), 1u);
  EXPECT_EQ(d.skipped[0], "n2: pod CIDR fd00:10:244:2::/64: this node has no IPv6 pod CIDR");
  EXPECT_EQ(d.peers, 1u);
  EXPECT_EQ(d.peers_v6, 0u);
}

TEST(ComputeDesired, HostGwRoutesIpv6ViaThePeersIpv6HostAddress) {
  PeerMap peers{{"n2", DualPeer("n2", 2, "2001:db8::12")},
                {"n3", DualPeer("n3", 3)},                    // publishes no IPv6 host address
                {"n4", DualPeer("n4", 4, "2001:db8:ff::14")}};  // not on this node's IPv6 link
  Desired d = ComputeDesired(DualLocal(Backend::kHostGw), peers);
  std::vector<std::string> routes;
  for (const auto& r : d.state.routes) routes.push_back(r.dst.ToString() + " via " + r.gw->ToString());
  EXPECT_EQ(routes, (std::vector<std::string>{"10.244.2.0/24 via 192.0.2.12", "fd00:10:244:2::/64 via 2001:db8::12",
                                              "10.244.3.0/24 via 192.0.2.13", "10.244.4.0/24 via 192.0.2.14"}));
  for (const auto& r : d.state.routes) EXPECT_EQ(r.oif, 2);
  ASSERT_EQ(d.skipped.size(), 2u);
  EXPECT_EQ(d.skipped[0], "n3: no IPv6 host address published for pod CIDR fd00:10:244:3::/64 (host-gw)");
  EXPECT_EQ(d.skipped[1], "n4: host 2001:db8:ff::14 is not on this node's link (host-gw)");
  EXPECT_EQ(d.direct_peers, 4u);
  EXPECT_EQ(d.peers, 3u);
  EXPECT_EQ(d.peers_v6, 1u);
  EXPECT_TRUE(d.state.fdb.empty());
}

TEST(ComputeDesired, AutoChoosesPerFamily) {
  // IPv4 host on link, no IPv6 host address: IPv4 direct, IPv6 through VXLAN
  // (whose FDB remote is the IPv4 host).
  PeerMap peers{{"n2", DualPeer("n2", 2)}};
  Desired d = ComputeDesired(DualLocal(Backend::kAuto), peers);
  ASSERT_EQ(d.state.routes.size(), 2u);
  EXPECT_EQ(d.state.routes[0].gw, A("192.0.2.12"));
  EXPECT_EQ(d.state.routes[1].gw, A("fd00:10:244:2::"));
  ASSERT_EQ(d.state.fdb.size(), 1u);
  EXPECT_EQ(d.state.fdb[0].dst, A("192.0.2.12"));
  EXPECT_EQ(d.direct_peers, 1u);
  EXPECT_EQ(d.vxlan_peers, 1u);
}

// IPv6-only: one IPv6 pod CIDR, an IPv6 underlay (the VXLAN local is IPv6).
LocalView V6Local(Backend b = Backend::kVxlan) {
  LocalView v = Local(b);
  v.pod_cidrs = {P("fd00:10:244:1::/64")};
  v.host_ip = A("2001:db8::11");
  v.host_ip6 = v.host_ip;
  v.uplink_subnets = {P("2001:db8::/64")};
  return v;
}

NodeInfo V6Peer(const char* name, int i) {
  std::string n = std::to_string(i);
  NodeInfo p = Peer(name, ("fd00:10:244:" + n + "::/64").c_str(), ("2001:db8::" + std::to_string(10 + i)).c_str(),
                    ("0a:00:00:00:00:0" + n).c_str());
  p.host_ip6 = p.host_ip;
  return p;
}

TEST(ComputeDesired, Ipv6OnlyVxlanUsesTheIpv6Underlay) {
  PeerMap peers{{"n2", V6Peer("n2", 2)}, {"n3", Peer("n3", "fd00:10:244:3::/64", "192.0.2.13")}};
  Desired d = ComputeDesired(V6Local(), peers);
  ASSERT_EQ(d.state.routes.size(), 1u);
  EXPECT_EQ(d.state.routes[0].gw, A("fd00:10:244:2::"));
  ASSERT_EQ(d.state.fdb.size(), 1u);
  EXPECT_EQ(d.state.fdb[0].dst, A("2001:db8::12"));
  ASSERT_EQ(d.skipped.size(), 1u);  // n3 has only an IPv4 host address
  EXPECT_EQ(d.skipped[0], "n3: no IPv6 host address published (this node's VXLAN runs over IPv6)");
  EXPECT_EQ(d.peers_v4, 0u);
  EXPECT_EQ(d.peers_v6, 1u);
}

TEST(ComputeDesired, Ipv6OnlyHostGwAndOverlaps) {
  PeerMap peers{{"n2", V6Peer("n2", 2)},
                {"n3", Peer("n3", "fd00:10:244:1:8000::/65", "2001:db8::13")},  // inside ours
                {"n4", Peer("n4", "fd00:10:244::/48", "2001:db8::14")}};        // covers everything
  Desired d = ComputeDesired(V6Local(Backend::kHostGw), peers);
  ASSERT_EQ(d.state.routes.size(), 1u);
  EXPECT_EQ(d.state.routes[0].dst, P("fd00:10:244:2::/64"));
  EXPECT_EQ(d.state.routes[0].gw, A("2001:db8::12"));
  ASSERT_EQ(d.skipped.size(), 2u);
  EXPECT_EQ(d.skipped[0], "n3: pod CIDR fd00:10:244:1:8000::/65 overlaps n1's");
  EXPECT_EQ(d.skipped[1].rfind("n4: pod CIDR fd00:10:244::/48 overlaps ", 0), 0u);
}

TEST(Diff, DualStackPeerLeavingTakesBothFamiliesEntries) {
  PeerMap before{{"n2", DualPeer("n2", 2)}, {"n3", DualPeer("n3", 3)}};
  KernelState have = ComputeDesired(DualLocal(), before).state;
  PeerMap after{{"n2", DualPeer("n2", 2)}};
  Plan p = Diff(ComputeDesired(DualLocal(), after).state, have);
  ASSERT_EQ(p.route_deletes.size(), 2u);
  EXPECT_EQ(p.route_deletes[1].dst, P("fd00:10:244:3::/64"));
  ASSERT_EQ(p.arp_deletes.size(), 2u);
  EXPECT_EQ(p.arp_deletes[1].dst, A("fd00:10:244:3::"));
  EXPECT_EQ(p.fdb_deletes.size(), 1u);
  EXPECT_TRUE(p.route_upserts.empty());
  EXPECT_TRUE(p.fdb_adds.empty());
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

// The overlay filter (issue 22 §2): which addresses may send VXLAN, and
// which inner sources each may carry.
std::vector<FilterEntry> Admitted(const Desired& d) { return d.state.filter; }
FilterEntry Peer4(const char* a) { return {A(a), std::nullopt}; }
FilterEntry Pods(const char* a, const char* p) { return {A(a), P(p)}; }
// The peer's own address `self` as an inner source, sent from `a`.
FilterEntry Self(const char* a, const char* self) {
  IpAddress s = A(self);
  return {A(a), IpPrefix(s, s.is_v6() ? 128 : 32)};
}

TEST(ComputeDesired, FilterAdmitsEachPeersUnderlayAddressesWithItsOwnPodCidrsAndAddressesOnly) {
  PeerMap peers{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12")}, {"n3", Peer("n3", "10.244.3.0/24", "192.0.2.13")}};
  peers["n2"].pod_cidrs.push_back(P("fd00:2::/64"));
  peers["n2"].host_ip6 = A("2001:db8::12");
  LocalView l = Local();
  l.pod_cidrs.push_back(P("fd00:1::/64"));
  Desired d = ComputeDesired(l, peers);
  std::vector<FilterEntry> want = {Peer4("192.0.2.12"),
                                   Pods("192.0.2.12", "10.244.2.0/24"),
                                   Pods("192.0.2.12", "fd00:2::/64"),
                                   Self("192.0.2.12", "192.0.2.12"),
                                   Self("192.0.2.12", "2001:db8::12"),
                                   Peer4("192.0.2.13"),
                                   Pods("192.0.2.13", "10.244.3.0/24"),
                                   Self("192.0.2.13", "192.0.2.13"),
                                   Peer4("2001:db8::12"),
                                   Pods("2001:db8::12", "10.244.2.0/24"),
                                   Pods("2001:db8::12", "fd00:2::/64"),
                                   Self("2001:db8::12", "192.0.2.12"),
                                   Self("2001:db8::12", "2001:db8::12")};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Admitted(d), want);
}

TEST(ComputeDesired, FilterAdmitsNoCidrThatIsNotThePeers) {
  PeerMap peers{
      {"n2", Peer("n2", "10.244.1.128/25", "192.0.2.12")},  // overlaps ours: no admission for it
      {"n4", Peer("n4", "10.244.4.0/24", "192.0.2.14")},
      {"n5", Peer("n5", "10.244.4.0/24", "192.0.2.15")},  // overlaps n4's: n5 may send, but not n4's pods
      {"n6", Peer("n6", "10.244.6.0/24", "192.0.2.11")},  // claims our host IP: nothing
  };
  Desired d = ComputeDesired(Local(), peers);
  std::vector<FilterEntry> want = {Peer4("192.0.2.12"), Self("192.0.2.12", "192.0.2.12"),
                                   Peer4("192.0.2.14"), Pods("192.0.2.14", "10.244.4.0/24"),
                                   Self("192.0.2.14", "192.0.2.14"), Peer4("192.0.2.15"),
                                   Self("192.0.2.15", "192.0.2.15")};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Admitted(d), want);
}

TEST(ComputeDesired, FilterIsEmptyWithoutAVxlanDevice) {
  PeerMap peers{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12")}};
  LocalView l = Local(Backend::kHostGw);
  l.vxlan_index = 0;
  EXPECT_TRUE(ComputeDesired(l, peers).state.filter.empty());
}

TEST(ComputeDesired, HostGwBindsDirectPeersCidrsToTheirMacAndChecksOurOwn) {
  LocalView l = Local(Backend::kHostGw);
  l.vxlan_index = 0;
  l.uplink_name = "up0";
  PeerMap peers{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12")},
                {"n3", Peer("n3", "10.244.3.0/24", "192.0.2.13")},   // publishes no MAC: unchecked
                {"n4", Peer("n4", "10.244.4.0/24", "198.51.100.4")}};  // not on link: skipped
  peers["n2"].host_mac = "0A:00:00:00:00:12";
  peers["n4"].host_mac = "0a:00:00:00:00:14";
  Desired d = ComputeDesired(l, peers);
  std::vector<HostGwEntry> want = {{P("10.244.1.0/24"), "up0", ""},
                                   {P("10.244.2.0/24"), "", "0a:00:00:00:00:12"},
                                   {P("10.244.2.0/24"), "up0", ""}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(d.state.hostgw, want);
  // VXLAN: no host-gw check; auto: only for the direct routes.
  EXPECT_TRUE(ComputeDesired(Local(), peers).state.hostgw.empty());
  LocalView a = Local(Backend::kAuto);
  a.uplink_name = "up0";
  EXPECT_EQ(ComputeDesired(a, peers).state.hostgw, want);
  // n2 leaves: its binding and check go, ours stays.
  peers.erase("n2");
  Plan p = Diff(ComputeDesired(l, peers).state, d.state);
  EXPECT_EQ(p.hostgw_deletes.size(), 2u);
  EXPECT_TRUE(p.hostgw_adds.empty());
}

TEST(Diff, PeerLeavingIsRefusedAndJoiningAdmittedInTheFilter) {
  PeerMap before{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12")}, {"n3", Peer("n3", "10.244.3.0/24", "192.0.2.13")}};
  PeerMap after{{"n3", Peer("n3", "10.244.3.0/24", "192.0.2.13")}, {"n4", Peer("n4", "10.244.4.0/24", "192.0.2.14")}};
  Plan p = Diff(ComputeDesired(Local(), after).state, ComputeDesired(Local(), before).state);
  std::vector<FilterEntry> gone = {Peer4("192.0.2.12"), Pods("192.0.2.12", "10.244.2.0/24"),
                                   Self("192.0.2.12", "192.0.2.12")};
  std::vector<FilterEntry> added = {Peer4("192.0.2.14"), Pods("192.0.2.14", "10.244.4.0/24"),
                                    Self("192.0.2.14", "192.0.2.14")};
  EXPECT_EQ(p.filter_deletes, gone);
  EXPECT_EQ(p.filter_adds, added);
  // A peer whose CIDR moves to another node: the old admission goes.
  PeerMap moved{{"n3", Peer("n3", "10.244.2.0/24", "192.0.2.13")}};
  Plan q = Diff(ComputeDesired(Local(), moved).state, ComputeDesired(Local(), before).state);
  EXPECT_EQ(q.filter_adds, std::vector<FilterEntry>{Pods("192.0.2.13", "10.244.2.0/24")});
  std::vector<FilterEntry> q_gone = {Peer4("192.0.2.12"), Pods("192.0.2.12", "10.244.2.0/24"),
                                     Self("192.0.2.12", "192.0.2.12"), Pods("192.0.2.13", "10.244.3.0/24")};
  EXPECT_EQ(q.filter_deletes, q_gone);
  EXPECT_TRUE(Diff(ComputeDesired(Local(), after).state, ComputeDesired(Local(), after).state).empty());
}

TEST(PeerRoutePriority, DistinctPerIpv4CidrKernelDefaultForIpv6) {
  EXPECT_EQ(PeerRoutePriority(P("10.244.3.0/24")), 717827);
  EXPECT_EQ(PeerRoutePriority(P("10.244.3.77/24")), 717827);  // masked
  EXPECT_NE(PeerRoutePriority(P("10.244.4.0/24")), PeerRoutePriority(P("10.244.3.0/24")));
  EXPECT_EQ(PeerRoutePriority(P("10.0.0.0/8")), 10);
  EXPECT_EQ(PeerRoutePriority(P("0.0.0.0/0")), 0);
  EXPECT_GT(PeerRoutePriority(P("255.255.255.255/32")), 0);
  // IPv6: the kernel's own default, which a dump reports (0 there would make
  // every pass delete and re-add the route).
  EXPECT_EQ(PeerRoutePriority(P("fd00:1:2::/64")), 1024);
}

// A route an older weftd added with metric 0 is replaced: the wanted one is
// added beside it (a replace keeps routes with another metric), then it goes.
TEST(Diff, RouteWithAnotherMetricIsReplacedThenDeleted) {
  PeerMap peers{{"n2", Peer("n2", "10.244.2.0/24", "192.0.2.12", "0a:00:00:00:00:02")}};
  KernelState want = ComputeDesired(Local(), peers).state;
  ASSERT_EQ(want.routes.size(), 1u);
  KernelState have = want;
  have.routes[0].priority = 0;
  Plan p = Diff(want, have);
  ASSERT_EQ(p.route_upserts.size(), 1u);
  EXPECT_EQ(p.route_upserts[0].priority, PeerRoutePriority(P("10.244.2.0/24")));
  ASSERT_EQ(p.route_deletes.size(), 1u);
  EXPECT_EQ(p.route_deletes[0].priority, 0);
  // Both in the kernel (the upsert done, the delete not yet): only the delete.
  have.routes.push_back(want.routes[0]);
  p = Diff(want, have);
  EXPECT_TRUE(p.route_upserts.empty());
  ASSERT_EQ(p.route_deletes.size(), 1u);
  EXPECT_EQ(p.route_deletes[0].priority, 0);
  EXPECT_TRUE(Diff(want, want).empty());
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
}  // namespace weft::overlay
