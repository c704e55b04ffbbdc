#include "doctor/doctor.h"

#include <gtest/gtest.h>
#include <linux/rtnetlink.h>

#include "fw/hostport.h"
#include "fw/masquerade.h"

namespace weft::doctor {
namespace {

IpPrefix P(const char* s) { return *IpPrefix::Parse(s); }
IpAddress A(const char* s) { return *IpAddress::Parse(s); }

PodView Pod(const std::string& cid, const char* ip, bool veth, bool netns, const char* state = ipam::kStateReady,
            int64_t age = 5) {
  PodView p;
  p.row.container_id = cid;
  p.row.ifname = "eth0";
  p.row.netns = "/run/netns/" + cid;
  p.row.host_ifname = "wft" + cid;
  p.row.ip_v4 = P(ip);
  p.row.state = state;
  p.veth_present = veth;
  p.netns_alive = netns;
  p.age_s = age;
  return p;
}

sys::LinkInfo Link(int index, const std::string& name, const std::string& kind = "veth") {
  sys::LinkInfo l;
  l.index = index;
  l.name = name;
  l.kind = kind;
  return l;
}

std::vector<Finding> Of(const std::vector<Finding>& fs, Kind k) {
  std::vector<Finding> out;
  for (const auto& f : fs)
    if (f.kind == k) out.push_back(f);
  return out;
}

// A node whose kernel, database and rulesets agree.
Snapshot Healthy() {
  Snapshot s;
  s.data_dir = "/var/lib/weft";
  s.pods = {Pod("a", "10.244.1.2/24", true, true), Pod("b", "10.244.1.3/24", true, true)};
  s.links = {Link(1, "lo", ""), Link(2, "eth0"), Link(10, "wfta"), Link(11, "wftb")};
  sys::RouteSpec r;
  r.dst = P("10.244.1.2/32");
  r.oif = 10;
  r.protocol = sys::kRouteProtoWeft;
  s.host_routes.push_back(r);
  r.dst = P("10.244.1.3/32");
  r.oif = 11;
  s.host_routes.push_back(r);
  std::vector<fw::HostPortRule> hp = {{"", 8080, "tcp", P("10.244.1.2/24"), 80}};
  RulesetView v;
  v.checked = true;
  v.what = "hostPort ruleset (table inet t)";
  v.want = HostPortView("t", hp);
  v.have = v.want;
  s.rulesets.push_back(v);
  return s;
}

TEST(Doctor, HealthyNodeIsClean) { EXPECT_TRUE(Diagnose(Healthy()).empty()); }

TEST(Doctor, AttachmentWhoseVethAndNetnsAreGoneIsFixable) {
  Snapshot s = Healthy();
  s.pods[0].veth_present = false;
  s.pods[0].netns_alive = false;
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kVanishedAttachment);
  EXPECT_TRUE(fs[0].fixable);
  EXPECT_EQ(fs[0].subject, "a/eth0");
  EXPECT_NE(fs[0].message.find("10.244.1.2"), std::string::npos) << fs[0].message;
  EXPECT_NE(fs[0].message.find("both gone"), std::string::npos) << fs[0].message;
}

TEST(Doctor, HalfGoneAttachmentsAreReportedButLeftAlone) {
  Snapshot s = Healthy();
  s.pods[0].veth_present = false;  // netns still there: the pod may be running
  s.pods[1].netns_alive = false;   // veth still there
  auto fs = Diagnose(s);
  ASSERT_EQ(Of(fs, Kind::kMissingVeth).size(), 1u);
  ASSERT_EQ(Of(fs, Kind::kMissingNetns).size(), 1u);
  for (const auto& f : fs) {
    EXPECT_FALSE(f.fixable) << f.message;
    EXPECT_FALSE(f.remedy.empty());
  }
}

TEST(Doctor, StuckAddingOnlyAfterTheThreshold) {
  Snapshot s = Healthy();
  s.pods[0].row.state = ipam::kStateAdding;
  s.pods[0].age_s = 10;  // an ADD in flight
  EXPECT_TRUE(Diagnose(s).empty());
  s.pods[0].age_s = 600;
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kStuckAttachment);
  EXPECT_NE(fs[0].message.find("\"adding\""), std::string::npos) << fs[0].message;
  EXPECT_FALSE(fs[0].fixable);
  // Vanished as well: reported once, as vanished (reclaim finishes it).
  s.pods[0].veth_present = false;
  s.pods[0].netns_alive = false;
  fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kVanishedAttachment);
}

TEST(Doctor, OrphanVethAndStaleHostRoute) {
  Snapshot s = Healthy();
  s.links.push_back(Link(12, "wft0123456789ab"));
  s.links.push_back(Link(13, "weft.1", "vxlan"));  // not a pod veth
  sys::RouteSpec r;
  r.dst = P("10.244.1.99/32");
  r.oif = 12;
  r.protocol = sys::kRouteProtoWeft;
  s.host_routes.push_back(r);
  auto fs = Diagnose(s);
  auto orphans = Of(fs, Kind::kOrphanVeth);
  ASSERT_EQ(orphans.size(), 1u);
  EXPECT_EQ(orphans[0].subject, "wft0123456789ab");
  EXPECT_TRUE(orphans[0].fixable);
  auto routes = Of(fs, Kind::kStaleHostRoute);
  ASSERT_EQ(routes.size(), 1u);
  EXPECT_NE(routes[0].message.find("10.244.1.99/32 dev wft0123456789ab"), std::string::npos) << routes[0].message;
  EXPECT_EQ(fs.size(), 2u);
}

TEST(Doctor, MissingPerPodStateIsNamedAndFixable) {
  Snapshot s = Healthy();
  s.pod_state.push_back({"pod-route", "c1/eth0", "host route 10.244.0.2/32 dev wft0000000000c1"});
  s.pod_state.push_back({"pod-proxy-arp", "c1/eth0", "proxy ARP on wft0000000000c1"});
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(std::string(KindName(fs[0].kind)), "pod-state-missing");
  EXPECT_EQ(fs[0].subject, "c1/eth0");
  EXPECT_EQ(fs[0].message,
            "attachment c1/eth0: host route 10.244.0.2/32 dev wft0000000000c1 is missing (the pod is unreachable "
            "from this node and the others)");
  EXPECT_TRUE(fs[0].fixable);
  EXPECT_TRUE(fs[1].fixable);
  EXPECT_NE(fs[1].message.find("proxy ARP on wft0000000000c1 is missing"), std::string::npos);
}

TEST(Doctor, DuplicateAddress) {
  Snapshot s = Healthy();
  s.pods.push_back(Pod("c", "10.244.1.2/24", true, true));
  s.links.push_back(Link(14, "wftc"));
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kDuplicateAddress);
  EXPECT_NE(fs[0].message.find("a/eth0, c/eth0"), std::string::npos) << fs[0].message;
  EXPECT_FALSE(fs[0].fixable);
}

TEST(Doctor, VxlanDeviceWithoutTheOverlayFilterIsNamed) {
  Snapshot s = Healthy();
  s.vxlan_device = true;
  s.overlay_filter = true;
  EXPECT_TRUE(Diagnose(s).empty());
  s.overlay_filter = false;  // `nft delete table inet weft-overlay`
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kRulesetMismatch);
  EXPECT_EQ(fs[0].subject, "overlay filter (table inet weft-overlay)");
  EXPECT_FALSE(fs[0].fixable);  // weftd's to put back
  s.vxlan_device = false;       // host-gw: nothing to filter
  EXPECT_TRUE(Diagnose(s).empty());
}

TEST(Doctor, RulesetFlushedStaleOrLeftOver) {
  Snapshot s = Healthy();
  s.rulesets[0].have.clear();  // `nft flush table`
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kRulesetMismatch);
  EXPECT_NE(fs[0].message.find("missing"), std::string::npos) << fs[0].message;
  EXPECT_TRUE(fs[0].fixable);

  // Rendered for another database state: a stale map element (and the
  // wanted one missing).
  s = Healthy();
  s.rulesets[0].have = HostPortView("t", {{"", 8081, "tcp", P("10.244.1.2/24"), 80}});
  fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_NE(fs[0].message.find("differs from what the database"), std::string::npos) << fs[0].message;
  EXPECT_NE(fs[0].message.find("1 rule(s) or element(s) missing, 1 stale"), std::string::npos) << fs[0].message;
  // One mapping's element gone (`nft delete element`): the rules are fine.
  s = Healthy();
  s.rulesets[0].have.erase("map hp4");
  fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_NE(fs[0].message.find("1 rule(s) or element(s) missing, 0 stale"), std::string::npos) << fs[0].message;

  // The database has no mappings, the kernel still has the table.
  s = Healthy();
  s.rulesets[0].want.clear();
  fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_NE(fs[0].message.find("has nothing for it"), std::string::npos) << fs[0].message;
}

TEST(Doctor, ChainCommentsReadTheRenderers) {
  fw::MasqueradeSpec m{"weft", {P("10.244.1.0/24")}, {P("10.244.0.0/16")}};
  auto c = TransactionChainComments(fw::NftMasqueradeTransaction(m));
  ASSERT_EQ(c.size(), 1u);
  ASSERT_EQ(c.count("postrouting"), 1u);
  ASSERT_EQ(c["postrouting"].size(), 1u);
  EXPECT_EQ(c["postrouting"][0], fw::MasqMarker(m));
  // A spec for other ranges renders another marker.
  fw::MasqueradeSpec m2{"weft", {P("10.244.2.0/24")}, {P("10.244.0.0/16")}};
  EXPECT_NE(TransactionChainComments(fw::NftMasqueradeTransaction(m2)), c);
  // An empty hostPort set renders no table at all.
  EXPECT_TRUE(TransactionChainComments(fw::NftHostPortTransaction("t", {})).empty());
  EXPECT_FALSE(TransactionChainComments(fw::NftHostPortTransaction("t", {{"", 1, "tcp", P("10.0.0.2/24"), 1}})).empty());
}

// Peers: node n1 (this one, 10.244.1.0/24) and n2 (10.244.2.0/24) over
// VXLAN device #20.
PeerView Peers() {
  PeerView v;
  v.local.name = "n1";
  v.local.pod_cidrs = {P("10.244.1.0/24")};
  v.local.host_ip = A("192.0.2.1");
  v.local.vxlan_index = 20;
  v.local.uplink_index = 2;
  v.local.uplink_subnets = {P("192.0.2.0/24")};
  overlay::NodeInfo n2{"n2", {P("10.244.2.0/24")}, A("192.0.2.2"), "aa:bb:cc:00:00:02", "vxlan"};
  overlay::NodeInfo self{"n1", {P("10.244.1.0/24")}, A("192.0.2.1"), "aa:bb:cc:00:00:01", "vxlan"};
  v.peers = {{"n1", self}, {"n2", n2}};
  v.kernel = overlay::ComputeDesired(v.local, v.peers).state;  // in sync
  return v;
}

TEST(Doctor, PeersInSyncAreClean) {
  Snapshot s = Healthy();
  s.links.push_back(Link(20, "weft.1", "vxlan"));
  s.peers = Peers();
  EXPECT_TRUE(Diagnose(s).empty());
  EXPECT_TRUE(PeerPlan(*s.peers).empty());
}

TEST(Doctor, PeerGoneLeavesStaleEntries) {
  Snapshot s = Healthy();
  s.links.push_back(Link(20, "weft.1", "vxlan"));
  s.peers = Peers();
  s.peers->peers.erase("n2");
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 6u);  // route, ARP, FDB, the overlay filter's three admissions
  for (const auto& f : fs) {
    EXPECT_EQ(f.kind, Kind::kPeerStale);
    EXPECT_TRUE(f.fixable);
    EXPECT_NE(f.message.find("no live peer"), std::string::npos) << f.message;
  }
  EXPECT_NE(fs[0].message.find("10.244.2.0/24 via 10.244.2.0 dev weft.1"), std::string::npos) << fs[0].message;
  auto plan = PeerPlan(*s.peers);
  EXPECT_EQ(plan.route_deletes.size(), 1u);
  EXPECT_EQ(plan.arp_deletes.size(), 1u);
  EXPECT_EQ(plan.fdb_deletes.size(), 1u);
  EXPECT_EQ(plan.filter_deletes.size(), 3u);
  EXPECT_EQ(fs[4].message,
            "overlay filter admission 192.0.2.2 . 10.244.2.0/24 belongs to no live peer (VXLAN from it is accepted)");
  EXPECT_EQ(fs[5].message,
            "overlay filter admission 192.0.2.2 . 192.0.2.2/32 belongs to no live peer (VXLAN from it is accepted)");
}

TEST(Doctor, MissingHostGwBindingNamesThePeer) {
  Snapshot s = Healthy();
  s.peers = Peers();
  s.peers->local.backend = overlay::Backend::kHostGw;
  s.peers->local.vxlan_index = 0;
  s.peers->local.uplink_name = "up0";
  s.peers->peers["n2"].host_mac = "aa:bb:cc:00:00:12";
  s.peers->kernel = overlay::ComputeDesired(s.peers->local, s.peers->peers).state;
  EXPECT_TRUE(Diagnose(s).empty());
  std::erase_if(s.peers->kernel.hostgw, [](const overlay::HostGwEntry& e) { return !e.mac.empty(); });
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kPeerMissing);
  EXPECT_EQ(fs[0].message, "missing host-gw check element for node n2: 10.244.2.0/24 from aa:bb:cc:00:00:12");
}

TEST(Doctor, MissingOverlayFilterAdmissionNamesThePeer) {
  Snapshot s = Healthy();
  s.links.push_back(Link(20, "weft.1", "vxlan"));
  s.peers = Peers();
  s.peers->kernel.filter.clear();  // the elements deleted by hand
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 3u);  // its address; its pod CIDR and its own address as inner sources
  EXPECT_EQ(fs[0].kind, Kind::kPeerMissing);
  EXPECT_EQ(fs[0].message, "missing overlay filter admission for node n2: 192.0.2.2 (VXLAN from it is dropped)");
  EXPECT_EQ(fs[1].message,
            "missing overlay filter admission for node n2: 192.0.2.2 . 10.244.2.0/24 (VXLAN from it carrying that "
            "CIDR's sources is dropped)");
  EXPECT_TRUE(fs[1].fixable);
  EXPECT_EQ(fs[2].message,
            "missing overlay filter admission for node n2: 192.0.2.2 . 192.0.2.2/32 (VXLAN from it carrying that "
            "CIDR's sources is dropped)");
}

TEST(Doctor, MissingAndChangedPeerEntriesNameThePeer) {
  Snapshot s = Healthy();
  s.links.push_back(Link(20, "weft.1", "vxlan"));
  s.peers = Peers();
  s.peers->kernel.fdb.clear();                                 // FDB flushed
  s.peers->peers["n2"].vtep_mac = "aa:bb:cc:00:00:22";          // MAC rewritten
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 2u);  // ARP wrong, FDB for the new MAC missing (no stale FDB: none left)
  int arp_wrong = 0, fdb_missing = 0;
  for (const auto& f : fs) {
    EXPECT_EQ(f.kind, Kind::kPeerMissing) << f.message;
    EXPECT_NE(f.message.find("node n2"), std::string::npos) << f.message;
    if (f.message.find("wrong ARP") == 0) ++arp_wrong;
    if (f.message.find("missing FDB") == 0) ++fdb_missing;
  }
  EXPECT_EQ(arp_wrong, 1);
  EXPECT_EQ(fdb_missing, 1);
}

TEST(Doctor, DualStackPeerEntriesPerFamily) {
  Snapshot s = Healthy();
  s.links.push_back(Link(20, "weft.1", "vxlan"));
  s.peers = Peers();
  s.peers->local.pod_cidrs.push_back(P("fd00:10:244:1::/64"));
  s.peers->peers["n2"].pod_cidrs.push_back(P("fd00:10:244:2::/64"));
  s.peers->peers["n2"].host_ip6 = A("2001:db8::2");
  overlay::KernelState full = overlay::ComputeDesired(s.peers->local, s.peers->peers).state;
  s.peers->kernel = full;
  EXPECT_TRUE(Diagnose(s).empty());
  // The IPv6 route and NDP entry gone; the shared FDB entry stays.
  s.peers->kernel.routes.pop_back();
  s.peers->kernel.arp.pop_back();
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0].message,
            "missing route to node n2's pod CIDR: want fd00:10:244:2::/64 via fd00:10:244:2:: dev weft.1");
  EXPECT_EQ(fs[1].message, "missing NDP entry on weft.1 for node n2: fd00:10:244:2:: lladdr aa:bb:cc:00:00:02");
  // n2 leaves: both families' entries are stale.
  s.peers->kernel = full;
  s.peers->peers.erase("n2");
  int ndp_stale = 0;
  for (const auto& f : Diagnose(s)) ndp_stale += f.message.rfind("NDP entry on weft.1 fd00:10:244:2:: ", 0) == 0;
  EXPECT_EQ(ndp_stale, 1);
  EXPECT_EQ(PeerPlan(*s.peers).route_deletes.size(), 2u);
}

// NetworkPolicy: weftd's table as nft lists it back, and the kernel's.
NftTable NetpolTable(const std::string& extra_rule = "", const std::string& local4 = "10.0.1.1, 10.0.1.2") {
  std::string text = "table inet weft-netpol {\n\tcounter drop-ingress {\n\t\tpackets 0 bytes 0\n\t}\n"
                     "\tset local4 {\n\t\ttype ipv4_addr\n\t\telements = { " + local4 + " }\n\t}\n"
                     "\tmap ingress4 {\n\t\ttype ipv4_addr : verdict\n\t\telements = { 10.0.1.1 : jump in-a }\n\t}\n"
                     "\tchain in-a {\n\t\tct state invalid drop\n" + extra_rule +
                     "\t\tcounter name \"drop-ingress\" drop\n\t}\n"
                     "\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n"
                     "\t\tip daddr vmap @ingress4\n\t}\n}\n";
  auto t = ParseNftTable(text);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : NftTable{};
}

NetpolView Netpol() {
  NetpolView v;
  v.weftd = "127.0.0.1:9641";
  v.want = NetpolTable();
  v.have = NetpolTable();
  return v;
}

TEST(Doctor, NetpolInStepIsClean) {
  Snapshot s = Healthy();
  s.netpol = Netpol();
  EXPECT_TRUE(Diagnose(s).empty());
  // weftd without network policy and no table: nothing to say.
  s.netpol->enforced = false;
  s.netpol->have.reset();
  EXPECT_TRUE(Diagnose(s).empty());
}

TEST(Doctor, NetpolTableMissingIsAFixableError) {
  Snapshot s = Healthy();
  s.netpol = Netpol();
  s.netpol->have.reset();  // nft delete table inet weft-netpol
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kNetpolMismatch);
  EXPECT_STREQ(KindName(fs[0].kind), "netpol-mismatch");
  EXPECT_EQ(fs[0].subject, "table inet weft-netpol");
  EXPECT_TRUE(fs[0].fixable);
  EXPECT_NE(fs[0].message.find("is missing from the kernel although weftd enforces NetworkPolicy (it wants 2 chain(s), "
                               "1 set(s), 1 map(s))"),
            std::string::npos)
      << fs[0].message;
  EXPECT_NE(fs[0].remedy.find("one nft transaction"), std::string::npos);
}

// A ruleset doctor cannot read (another release's weftd): a missing table
// is still named, a present one is not compared (the snapshot carries the
// warning that says so).
TEST(Doctor, NetpolWithoutWeftdsListingJudgesOnlyAMissingTable) {
  Snapshot s = Healthy();
  s.netpol = Netpol();
  s.netpol->want_listed = false;
  s.netpol->want = NftTable{};
  s.netpol->have->chains.clear();  // whatever the kernel holds: not compared
  EXPECT_TRUE(Diagnose(s).empty());
  s.netpol->have.reset();
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kNetpolMismatch);
  EXPECT_TRUE(fs[0].fixable);
  EXPECT_NE(fs[0].message.find("is missing from the kernel although weftd enforces NetworkPolicy: this node's pods"),
            std::string::npos)
      << fs[0].message;
}

TEST(Doctor, NetpolDifferencesAreSummedUpAndListed) {
  Snapshot s = Healthy();
  s.netpol = Netpol();
  s.netpol->have = NetpolTable("\t\tip saddr 10.9.9.9 accept\n", "10.0.1.1");
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_TRUE(fs[0].fixable);
  EXPECT_EQ(fs[0].message,
            "table inet weft-netpol differs from weftd's ruleset: 1 extra rule(s), 1 set element(s) missing");
  EXPECT_EQ(fs[0].details, (std::vector<std::string>{"chain in-a: extra rule: ip saddr 10.9.9.9 accept",
                                                     "set local4: missing element 10.0.1.2"}));
}

TEST(Doctor, NetpolDetailsAreCapped) {
  Snapshot s = Healthy();
  s.netpol = Netpol();
  std::string many;
  for (int i = 0; i < 100; ++i) many += (i ? ", " : "") + std::string("10.0.2.") + std::to_string(i);
  s.netpol->want = NetpolTable("", "10.0.1.1, 10.0.1.2, " + many);
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_NE(fs[0].message.find("100 set element(s) missing"), std::string::npos) << fs[0].message;
  ASSERT_EQ(fs[0].details.size(), kMaxDetails + 1);
  EXPECT_EQ(fs[0].details.back(), "... and 60 more difference(s)");
}

TEST(Doctor, NetpolTableLeftOverWithoutWeftdPolicyIsReportedNotFixed) {
  Snapshot s = Healthy();
  s.netpol = Netpol();
  s.netpol->enforced = false;
  auto fs = Diagnose(s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, Kind::kNetpolMismatch);
  EXPECT_FALSE(fs[0].fixable);
  EXPECT_NE(fs[0].message.find("does not enforce NetworkPolicy: its rules are left over"), std::string::npos)
      << fs[0].message;
  EXPECT_NE(fs[0].remedy.find("nft delete table inet weft-netpol"), std::string::npos) << fs[0].remedy;
}

TEST(Doctor, SqliteTime) {
  EXPECT_EQ(ParseSqliteTime("1970-01-01 00:01:00"), 60);
  EXPECT_EQ(ParseSqliteTime("2024-02-29 12:00:00"), 1709208000);
  EXPECT_FALSE(ParseSqliteTime("yesterday"));
  EXPECT_FALSE(ParseSqliteTime("2024-13-01 00:00:00"));
}

}  // namespace
}  // namespace weft::doctor
