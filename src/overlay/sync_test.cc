#include "overlay/sync.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace weft::overlay {
namespace {

IpPrefix P(const char* s) { return *IpPrefix::Parse(s); }
IpAddress A(const char* s) { return *IpAddress::Parse(s); }

LocalView Local() {
  LocalView v;
  v.name = "n1";
  v.pod_cidrs = {P("10.244.1.0/24")};
  v.host_ip = A("192.0.2.11");
  v.vxlan_index = 7;
  v.uplink_index = 2;
  v.uplink_subnets = {P("192.0.2.0/24")};
  return v;
}

PeerMap Peers(int n) {
  PeerMap m;
  for (int i = 2; i < 2 + n; ++i) {
    NodeInfo p;
    p.name = "n" + std::to_string(i);
    p.pod_cidrs = {P(("10.244." + std::to_string(i) + ".0/24").c_str())};
    p.host_ip = A(("192.0.2." + std::to_string(10 + i)).c_str());
    char mac[32];
    std::snprintf(mac, sizeof mac, "0a:00:00:00:00:%02x", i);
    p.vtep_mac = mac;
    m[p.name] = p;
  }
  return m;
}

KernelState Want(const PeerMap& peers) { return ComputeDesired(Local(), peers).state; }

// A kernel in memory: applies plans step by step, and fails the steps it is
// told to (by route destination / neighbour IP), as the real one would.
class FakeDatapath : public Datapath {
 public:
  KernelState kernel;
  int reads = 0;
  int applies = 0;
  size_t ops = 0;               // kernel changes attempted, all passes
  bool fail_read = false;
  std::set<IpPrefix> fail_routes;  // route upserts to these destinations fail
  bool clear_failures_on_read = false;

  Result<KernelState> Read() override {
    ++reads;
    if (clear_failures_on_read) fail_routes.clear();
    if (fail_read) return Status::Error(Reason::kFailed, Domain::kKernel, "dump routes", "interrupted", EINTR);
    return kernel;
  }

  Status Apply(const Plan& plan, int* errors) override {
    ++applies;
    ops += plan.size();
    *errors = 0;
    Status first;
    auto fail = [&](const std::string& what) {
      ++*errors;
      if (first.ok()) first = Status::Error(Reason::kFailed, Domain::kKernel, what, "no such device", ENODEV);
    };
    for (const auto& e : plan.filter_deletes) std::erase(kernel.filter, e);
    for (const auto& e : plan.filter_adds) kernel.filter.push_back(e);
    for (const auto& e : plan.hostgw_deletes) std::erase(kernel.hostgw, e);
    for (const auto& e : plan.hostgw_adds) kernel.hostgw.push_back(e);
    for (const auto& n : plan.fdb_adds) Upsert(kernel.fdb, n, true);
    for (const auto& n : plan.arp_upserts) Upsert(kernel.arp, n, false);
    for (const auto& r : plan.route_upserts) {
      if (fail_routes.count(r.dst)) {
        fail("add route " + r.dst.ToString());
        continue;
      }
      std::erase_if(kernel.routes, [&](const sys::RouteSpec& x) { return x.dst == r.dst; });
      kernel.routes.push_back(r);
    }
    for (const auto& r : plan.route_deletes)
      std::erase_if(kernel.routes, [&](const sys::RouteSpec& x) { return x.dst == r.dst; });
    for (const auto& n : plan.arp_deletes)
      std::erase_if(kernel.arp, [&](const sys::NeighSpec& x) { return x.dst == n.dst; });
    for (const auto& n : plan.fdb_deletes)
      std::erase_if(kernel.fdb, [&](const sys::NeighSpec& x) { return x.dst == n.dst && x.mac == n.mac; });
    return first;
  }

 private:
  static void Upsert(std::vector<sys::NeighSpec>& v, const sys::NeighSpec& n, bool fdb) {
    std::erase_if(v, [&](const sys::NeighSpec& x) { return x.dst == n.dst && (!fdb || x.mac == n.mac); });
    v.push_back(n);
  }
};

bool Matches(const KernelState& kernel, const KernelState& want) { return Diff(want, kernel).empty(); }

TEST(KernelSync, FirstPassReadsThenOnePeerIsSixChangesWithoutADump) {
  FakeDatapath dp;
  KernelSync sync(&dp);
  PeerMap peers = Peers(100);
  SyncResult r = sync.Sync(Want(peers), /*full=*/false);  // nothing known yet: reads
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(r.read_kernel);
  EXPECT_EQ(r.changes, 600u);  // a route, an ARP and an FDB entry, three filter admissions each
  EXPECT_EQ(dp.reads, 1);
  EXPECT_TRUE(sync.knows_kernel());

  // A join: its route, ARP and FDB entry, its address, pod CIDR and own
  // address as an inner source admitted by the filter, and no read.
  peers.merge(Peers(101));
  dp.ops = 0;
  r = sync.Sync(Want(peers), false);
  ASSERT_TRUE(r.status.ok());
  EXPECT_FALSE(r.read_kernel);
  EXPECT_EQ(dp.reads, 1);
  EXPECT_EQ(dp.ops, 6u);
  EXPECT_EQ(r.plan.filter_adds.size(), 3u);
  EXPECT_EQ(r.plan.route_upserts.size(), 1u);
  EXPECT_EQ(r.plan.arp_upserts.size(), 1u);
  EXPECT_EQ(r.plan.fdb_adds.size(), 1u);
  EXPECT_EQ(r.plan.route_upserts[0].dst, P("10.244.102.0/24"));

  // A leave: six deletes (the filter's first), no read.
  peers.erase("n50");
  dp.ops = 0;
  r = sync.Sync(Want(peers), false);
  ASSERT_TRUE(r.status.ok());
  EXPECT_FALSE(r.read_kernel);
  EXPECT_EQ(dp.ops, 6u);
  EXPECT_EQ(r.plan.filter_deletes.size(), 3u);
  EXPECT_EQ(r.plan.route_deletes.size(), 1u);
  EXPECT_EQ(r.plan.arp_deletes.size(), 1u);
  EXPECT_EQ(r.plan.fdb_deletes.size(), 1u);
  EXPECT_TRUE(Matches(dp.kernel, Want(peers)));

  // Nothing changed: nothing applied.
  int applies = dp.applies;
  r = sync.Sync(Want(peers), false);
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(dp.applies, applies);
  EXPECT_EQ(dp.reads, 1);
}

TEST(KernelSync, FullPassRepairsWhatChangedUnderneath) {
  FakeDatapath dp;
  KernelSync sync(&dp);
  PeerMap peers = Peers(3);
  ASSERT_TRUE(sync.Sync(Want(peers), false).status.ok());
  dp.kernel.routes.pop_back();  // `ip route del` behind weftd's back
  // An incremental pass trusts what it applied: it does not see the hole...
  SyncResult r = sync.Sync(Want(peers), false);
  EXPECT_TRUE(r.plan.empty());
  EXPECT_FALSE(Matches(dp.kernel, Want(peers)));
  // ...the resync's full pass does.
  r = sync.Sync(Want(peers), /*full=*/true);
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.read_kernel);
  EXPECT_EQ(r.changes, 1u);
  EXPECT_TRUE(Matches(dp.kernel, Want(peers)));
}

TEST(KernelSync, FailedIncrementalPassFallsBackToAFullPass) {
  FakeDatapath dp;
  KernelSync sync(&dp);
  PeerMap peers = Peers(3);
  ASSERT_TRUE(sync.Sync(Want(peers), false).status.ok());
  // Meanwhile somebody removed a peer's ARP entry; the next join's route
  // fails once. The fallback re-reads the kernel and fixes both.
  dp.kernel.arp.erase(dp.kernel.arp.begin());
  peers.merge(Peers(4));
  dp.fail_routes = {P("10.244.5.0/24")};
  SyncResult r = sync.Sync(Want(peers), false);
  EXPECT_TRUE(r.fell_back);
  EXPECT_TRUE(r.read_kernel);
  EXPECT_EQ(dp.reads, 2);
  EXPECT_FALSE(r.status.ok());  // the route still fails in the full pass
  EXPECT_EQ(r.errors, 2);
  EXPECT_FALSE(sync.knows_kernel());
  EXPECT_EQ(dp.kernel.arp.size(), 4u);  // the missing ARP entry is back

  // The retry: the kernel is unknown, so it reads again; now it works.
  dp.fail_routes.clear();
  r = sync.Sync(Want(peers), false);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(r.read_kernel);
  EXPECT_FALSE(r.fell_back);
  EXPECT_EQ(r.changes, 1u);
  EXPECT_TRUE(Matches(dp.kernel, Want(peers)));
  EXPECT_TRUE(sync.knows_kernel());

  // Back to incremental.
  peers.erase("n2");
  r = sync.Sync(Want(peers), false);
  EXPECT_TRUE(r.status.ok());
  EXPECT_FALSE(r.read_kernel);
  EXPECT_EQ(dp.reads, 3);
}

TEST(KernelSync, FallbackSucceedsWhenTheFailureWasTransient) {
  FakeDatapath dp;
  KernelSync sync(&dp);
  PeerMap peers = Peers(2);
  ASSERT_TRUE(sync.Sync(Want(peers), false).status.ok());
  // The join's route fails once (say the device was being recreated); by
  // the time the fallback reads the kernel it works.
  peers.merge(Peers(3));
  dp.fail_routes = {P("10.244.4.0/24")};
  dp.clear_failures_on_read = true;
  SyncResult r = sync.Sync(Want(peers), false);
  EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(r.fell_back);
  EXPECT_TRUE(r.read_kernel);
  EXPECT_EQ(r.errors, 1);
  EXPECT_TRUE(Matches(dp.kernel, Want(peers)));
  EXPECT_TRUE(sync.knows_kernel());
}

TEST(KernelSync, FailedReadLeavesTheKernelUnknown) {
  FakeDatapath dp;
  KernelSync sync(&dp);
  dp.fail_read = true;
  SyncResult r = sync.Sync(Want(Peers(2)), false);
  EXPECT_FALSE(r.status.ok());
  EXPECT_EQ(dp.applies, 0);  // nothing applied from an unknown starting point
  EXPECT_FALSE(sync.knows_kernel());
  dp.fail_read = false;
  r = sync.Sync(Want(Peers(2)), false);
  EXPECT_TRUE(r.status.ok());
  EXPECT_TRUE(r.read_kernel);
  EXPECT_TRUE(Matches(dp.kernel, Want(Peers(2))));
}

TEST(KernelSync, InvalidateForcesARead) {
  FakeDatapath dp;
  KernelSync sync(&dp);
  ASSERT_TRUE(sync.Sync(Want(Peers(2)), false).status.ok());
  sync.Invalidate();
  SyncResult r = sync.Sync(Want(Peers(2)), false);
  EXPECT_TRUE(r.read_kernel);
  EXPECT_EQ(dp.reads, 2);
}

}  // namespace
}  // namespace weft::overlay
