#include "plugin/pod_state.h"

#include <gtest/gtest.h>

#include <string>

#include "plugin/routed.h"

namespace weft::plugin {
namespace {

ipam::PodRecord Row(const std::string& cid, const std::string& port, const char* v4, const char* v6,
                    const char* state = ipam::kStateReady) {
  ipam::PodRecord r;
  r.container_id = cid;
  r.ifname = "eth0";
  r.host_ifname = port;
  if (v4) r.ip_v4 = *IpPrefix::Parse(v4);
  if (v6) r.ip_v6 = *IpPrefix::Parse(v6);
  r.state = state;
  return r;
}

sys::LinkInfo Link(int index, const std::string& name, int master = 0) {
  sys::LinkInfo l;
  l.index = index;
  l.name = name;
  l.master = master;
  return l;
}

// A node where everything ADD made is in place for `rows`.
PodKernelView Healthy(const std::vector<ipam::PodRecord>& rows, const std::vector<sys::LinkInfo>& links) {
  PodKernelView k;
  k.links = links;
  k.guard_installed[0] = k.guard_installed[1] = true;
  for (const auto& r : rows)
    for (const auto& l : links) {
      if (l.name != r.host_ifname) continue;
      k.bound[l.master ? 1 : 0].insert(l.name);
      if (!l.master)
        for (const auto* ip : {&r.ip_v4, &r.ip_v6})
          if (*ip) k.routes.push_back(HostRoute((*ip)->addr(), l.index));
    }
  for (const auto& key : PodSysctlKeys(rows, links)) k.sysctls[key] = "1";
  return k;
}

std::vector<std::string> Objects(const std::vector<PodRepair>& plan) {
  std::vector<std::string> out;
  for (const auto& p : plan) out.push_back(p.object + " " + p.what);
  return out;
}

// The keeper plans from the rows ready before and after its kernel read:
// one a DEL marked deleting in between (its chain may be gone already), one
// an ADD finished in between (its pieces may not have been there yet) and
// one gone are left alone.
TEST(PodState, OnlyRowsReadyInBothReadsArePlanned) {
  std::vector<ipam::PodRecord> first = {Row("a", "wfta", "10.0.0.2/32", nullptr),
                                        Row("b", "wftb", "10.0.0.3/32", nullptr),
                                        Row("c", "wftc", "10.0.0.4/32", nullptr, ipam::kStateAdding),
                                        Row("d", "wftd", "10.0.0.5/32", nullptr)};
  std::vector<ipam::PodRecord> second = {Row("a", "wfta", "10.0.0.2/32", nullptr),
                                         Row("b", "wftb", "10.0.0.3/32", nullptr, ipam::kStateDeleting),
                                         Row("c", "wftc", "10.0.0.4/32", nullptr)};
  auto kept = ReadyInBoth(first, second);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].container_id, "a");
}

TEST(PodState, NothingToRepairWhenEverythingIsInPlace) {
  std::vector<ipam::PodRecord> rows = {Row("a", "wft0000000000a1", "10.244.0.2/24", "fd00::2/64"),
                                       Row("b", "wft0000000000b1", "10.244.0.3/24", nullptr),
                                       Row("c", "wft0000000000c1", "10.244.0.4/24", nullptr)};
  std::vector<sys::LinkInfo> links = {Link(5, "wft0000000000a1"), Link(6, "wft0000000000b1"),
                                      Link(7, "wft0000000000c1", /*master=*/3)};
  EXPECT_TRUE(PlanPodRepairs(rows, Healthy(rows, links)).empty());
  // Which sysctls are compared: proxy ARP for routed IPv4 pods, IPv6 off for
  // routed IPv4-only pods and every bridge port.
  EXPECT_EQ(PodSysctlKeys(rows, links),
            (std::vector<std::string>{"net/ipv4/conf/wft0000000000a1/proxy_arp",
                                      "net/ipv4/conf/wft0000000000b1/proxy_arp",
                                      "net/ipv6/conf/wft0000000000b1/disable_ipv6",
                                      "net/ipv6/conf/wft0000000000c1/disable_ipv6"}));
}

TEST(PodState, EachMissingPieceIsNamed) {
  std::vector<ipam::PodRecord> rows = {Row("a", "wft0000000000a1", "10.244.0.2/24", "fd00::2/64"),
                                       Row("b", "wft0000000000b1", "10.244.0.3/24", nullptr)};
  std::vector<sys::LinkInfo> links = {Link(5, "wft0000000000a1"), Link(6, "wft0000000000b1")};
  PodKernelView k = Healthy(rows, links);
  // a's IPv6 host route and b's IPv4 one gone, a's chain gone, b's proxy
  // ARP off and IPv6 on.
  k.routes.erase(k.routes.begin() + 1, k.routes.end());
  k.bound[0].erase("wft0000000000a1");
  k.sysctls["net/ipv4/conf/wft0000000000b1/proxy_arp"] = "0";
  k.sysctls["net/ipv6/conf/wft0000000000b1/disable_ipv6"] = "0";
  auto plan = PlanPodRepairs(rows, k);
  EXPECT_EQ(Objects(plan), (std::vector<std::string>{
                               "guard-chain source guard chain wft0000000000a1 in table netdev weft-guard",
                               "pod-route host route fd00::2/128 dev wft0000000000a1",
                               "pod-route host route 10.244.0.3/32 dev wft0000000000b1",
                               "pod-proxy-arp proxy ARP on wft0000000000b1",
                               "pod-ipv6-off IPv6 off on wft0000000000b1",
                           }));
  ASSERT_EQ(plan.size(), 5u);
  EXPECT_EQ(plan[0].subject, "a/eth0");
  EXPECT_EQ(plan[0].binding.port, "wft0000000000a1");
  ASSERT_TRUE(plan[2].route);
  EXPECT_EQ(*plan[2].route, HostRoute(*IpAddress::Parse("10.244.0.3"), 6));
  EXPECT_EQ(plan[2].route->protocol, sys::kRouteProtoWeft);
  // A route to the address through another link is not the pod's.
  k = Healthy(rows, links);
  k.routes[0].oif = 6;
  EXPECT_EQ(Objects(PlanPodRepairs(rows, k)).at(0), "pod-route host route 10.244.0.2/32 dev wft0000000000a1");
}

TEST(PodState, AGuardTableGoneIsOneRepairThatCoversEveryPortOfItsMode) {
  std::vector<ipam::PodRecord> rows = {Row("a", "wft0000000000a1", "10.244.0.2/24", nullptr),
                                       Row("b", "wft0000000000b1", "10.244.0.3/24", nullptr),
                                       Row("c", "wft0000000000c1", "10.244.0.4/24", nullptr)};
  std::vector<sys::LinkInfo> links = {Link(5, "wft0000000000a1"), Link(6, "wft0000000000b1"),
                                      Link(7, "wft0000000000c1", 3)};
  PodKernelView k = Healthy(rows, links);
  k.guard_installed[0] = false;
  k.bound[0].clear();
  EXPECT_EQ(Objects(PlanPodRepairs(rows, k)),
            (std::vector<std::string>{"guard-table source guard table netdev weft-guard (its shared chains)"}));
  // No bridge port: the bridge table is not wanted.
  rows.pop_back();
  links.pop_back();
  k = Healthy(rows, links);
  k.guard_installed[1] = false;
  EXPECT_TRUE(PlanPodRepairs(rows, k).empty());
}

TEST(PodState, RowsNotReadyOrWithoutTheirVethAreLeftAlone) {
  std::vector<ipam::PodRecord> rows = {Row("a", "wft0000000000a1", "10.244.0.2/24", nullptr, ipam::kStateAdding),
                                       Row("b", "wft0000000000b1", "10.244.0.3/24", nullptr, ipam::kStateDeleting),
                                       Row("c", "wft0000000000c1", "10.244.0.4/24", nullptr)};
  std::vector<sys::LinkInfo> links = {Link(5, "wft0000000000a1"), Link(6, "wft0000000000b1")};
  PodKernelView k;
  k.links = links;
  k.guard_installed[0] = true;
  EXPECT_TRUE(PlanPodRepairs(rows, k).empty());
  EXPECT_TRUE(PodSysctlKeys(rows, links).empty());
}

TEST(PodState, AnUnreadableSysctlIsNotARepair) {
  std::vector<ipam::PodRecord> rows = {Row("b", "wft0000000000b1", "10.244.0.3/24", nullptr)};
  std::vector<sys::LinkInfo> links = {Link(6, "wft0000000000b1")};
  PodKernelView k = Healthy(rows, links);
  k.sysctls.clear();  // e.g. a kernel without IPv6
  EXPECT_TRUE(PlanPodRepairs(rows, k).empty());
}

}  // namespace
}  // namespace weft::plugin
