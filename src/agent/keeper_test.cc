#include "agent/keeper.h"

#include <gtest/gtest.h>
#include <linux/netfilter.h>
#include <sys/socket.h>

namespace weft::agent {
namespace {

using Kind = sys::KernelEvent::Kind;

const KeptNames kNames{"weft.1", 7, "weft-weft"};

sys::KernelEvent Nft(Kind kind, bool deleted, int family, const std::string& table) {
  sys::KernelEvent e;
  e.kind = kind;
  e.deleted = deleted;
  e.family = family;
  e.table = table;
  return e;
}

sys::KernelEvent Route(bool deleted, int protocol, bool gateway) {
  sys::KernelEvent e;
  e.kind = Kind::kRoute;
  e.deleted = deleted;
  e.protocol = protocol;
  e.gateway = gateway;
  return e;
}

std::string Wakes(const sys::KernelEvent& e) {
  WakeFor w = Classify(e, kNames);
  return std::string(w.pods ? "pods " : "") + (w.node ? "node " : "") + (w.netpol ? "netpol " : "");
}

TEST(Keeper, WeftdsOwnNetpolCommitsCallForNoCheck) {
  // weftd's own deltas delete rules of table inet weft-netpol: a check of
  // the table after each would dump every rule per event.
  KeptNames names = kNames;
  names.own_netpol_commit = [](uint32_t portid) { return portid == 4242; };
  for (Kind k : {Kind::kNftTable, Kind::kNftChain, Kind::kNftRule}) {
    sys::KernelEvent own = Nft(k, true, NFPROTO_INET, "weft-netpol");
    own.portid = 4242;
    EXPECT_FALSE(Classify(own, names).netpol);
    sys::KernelEvent other = own;
    other.portid = 777;  // an operator's nft, another process
    EXPECT_TRUE(Classify(other, names).netpol);
    // Only weft-netpol's commits are told apart: the guard's still wake.
    sys::KernelEvent guard = Nft(k, true, NFPROTO_NETDEV, "weft-guard");
    guard.portid = 4242;
    EXPECT_TRUE(Classify(guard, names).pods);
  }
}

TEST(Keeper, WeftdsOwnServicesCommitsCallForNoCheckOthersDo) {
  // The Service proxy's deltas delete chains and elements of table inet
  // weft-services; another process's deletion there wakes its check.
  KeptNames names = kNames;
  names.own_netpol_commit = [](uint32_t portid) { return portid == 4242; };
  names.own_services_commit = [](uint32_t portid) { return portid == 5151; };
  for (Kind k : {Kind::kNftTable, Kind::kNftChain, Kind::kNftRule}) {
    sys::KernelEvent own = Nft(k, true, NFPROTO_INET, "weft-services");
    own.portid = 5151;
    WakeFor w = Classify(own, names);
    EXPECT_FALSE(w.services || w.netpol || w.pods || w.node);
    sys::KernelEvent other = own;
    other.portid = 4242;  // weftd's NetworkPolicy socket is not the proxy's
    EXPECT_TRUE(Classify(other, names).services);
    EXPECT_FALSE(Classify(other, names).netpol);
    EXPECT_FALSE(Classify(Nft(k, false, NFPROTO_INET, "weft-services"), names).services);  // additions never
  }
  // No proxy (no function): every deletion there calls for a check nobody runs.
  EXPECT_TRUE(Classify(Nft(Kind::kNftChain, true, NFPROTO_INET, "weft-services"), kNames).services);
}

TEST(Keeper, DeletionsOfWeftsTablesWakeTheirPass) {
  for (Kind k : {Kind::kNftTable, Kind::kNftChain, Kind::kNftRule}) {
    EXPECT_EQ(Wakes(Nft(k, true, NFPROTO_NETDEV, "weft-guard")), "pods ");
    EXPECT_EQ(Wakes(Nft(k, true, NFPROTO_NETDEV, "weft-guard-bridge")), "pods ");
    EXPECT_EQ(Wakes(Nft(k, true, NFPROTO_INET, "weft-netpol")), "netpol ");
    EXPECT_EQ(Wakes(Nft(k, true, NFPROTO_INET, "weft-overlay")), "node ");
    EXPECT_EQ(Wakes(Nft(k, true, NFPROTO_INET, "weft-weft")), "node ");
    // What is added, and what is not Weft's, wakes nothing.
    EXPECT_EQ(Wakes(Nft(k, false, NFPROTO_NETDEV, "weft-guard")), "");
    EXPECT_EQ(Wakes(Nft(k, true, NFPROTO_INET, "kube-proxy")), "");
    EXPECT_EQ(Wakes(Nft(k, true, NFPROTO_INET, "weft-guard")), "");  // another family's table of that name
  }
}

TEST(Keeper, RoutesOfProtocol201WakeThePodsOrTheNodePass) {
  EXPECT_EQ(Wakes(Route(true, 201, false)), "pods ");  // a pod's host route
  EXPECT_EQ(Wakes(Route(true, 201, true)), "node ");   // a peer's route
  EXPECT_EQ(Wakes(Route(false, 201, false)), "");
  EXPECT_EQ(Wakes(Route(true, 4, false)), "");  // somebody else's
}

TEST(Keeper, LinksAddressesAndNetconf) {
  sys::KernelEvent l;
  l.kind = Kind::kLink;
  l.name = "weft.1";
  l.deleted = true;
  EXPECT_EQ(Wakes(l), "node ");
  l.deleted = false;
  l.up = false;
  EXPECT_EQ(Wakes(l), "node ");
  l.up = true;
  EXPECT_EQ(Wakes(l), "");
  l.name = "wft0123456789ab";
  l.deleted = true;
  EXPECT_EQ(Wakes(l), "");  // a DEL's
  sys::KernelEvent a;
  a.kind = Kind::kAddress;
  a.family = AF_INET6;
  a.index = 12;
  EXPECT_EQ(Wakes(a), "pods ");  // IPv6 back on a port
  a.index = 7;
  a.deleted = true;
  EXPECT_EQ(Wakes(a), "node ");  // a VTEP address gone
  sys::KernelEvent n;
  n.kind = Kind::kNetconf;
  n.index = 12;
  n.proxy_arp = 0;
  EXPECT_EQ(Wakes(n), "pods ");
  n.proxy_arp = 1;
  EXPECT_EQ(Wakes(n), "");
  n.proxy_arp = -1;
  EXPECT_EQ(Wakes(n), "");
}

TEST(Keeper, RepairsAreCountedPerObjectEveryObjectListedFromTheStart) {
  RepairCounter c;
  std::string none = c.Render();
  EXPECT_NE(none.find("# TYPE weft_repairs_total counter\n"), std::string::npos);
  EXPECT_NE(none.find("weft_repairs_total{object=\"pod-route\"} 0\n"), std::string::npos);
  EXPECT_NE(none.find("weft_repairs_total{object=\"guard-table\"} 0\n"), std::string::npos);
  c.Add("pod-route");
  c.Add("pod-route");
  c.Add("overlay-entry", 3);
  std::string m = c.Render({{"netpol-table", 1}});
  EXPECT_NE(m.find("weft_repairs_total{object=\"pod-route\"} 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("weft_repairs_total{object=\"overlay-entry\"} 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("weft_repairs_total{object=\"netpol-table\"} 1\n"), std::string::npos) << m;
}

}  // namespace
}  // namespace weft::agent
