#include "overlay/datapath.h"

#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "overlay/families.h"
#include "overlay/filter.h"
#include "sys/nft_set.h"

namespace weft::overlay {

Result<Uplink> DetectUplink(sys::Netlink& nl, const std::string& iface, const std::string& node_ip) {
  std::vector<IpAddress> want;
  if (!node_ip.empty()) {
    WEFT_ASSIGN_OR_RETURN(want, ParseIpPerFamily("--node-ip", node_ip));
  }
  WEFT_ASSIGN_OR_RETURN(auto addrs, nl.ListAddresses(0));
  Uplink up;
  if (!iface.empty()) {
    WEFT_ASSIGN_OR_RETURN(auto link, nl.GetLink(iface));
    if (!link) return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                    "interface " + iface + " does not exist");
    up.index = link->index;
  } else if (!want.empty()) {
    for (const auto& w : want) {
      int index = 0;
      for (const auto& a : addrs)
        if (a.prefix.addr() == w) index = a.index;
      if (index == 0) return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                           "no interface carries the node IP " + w.ToString());
      if (up.index != 0 && up.index != index)
        return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                             "the node IPs " + want[0].ToString() + " and " + w.ToString() +
                                                       " are on different interfaces; set --iface");
      up.index = index;
    }
  } else {
    for (int family : {AF_INET, AF_INET6}) {
      WEFT_ASSIGN_OR_RETURN(auto routes, nl.ListRoutes(family));
      for (const auto& r : routes)
        if (r.dst.len() == 0 && r.oif > 0 && up.index == 0) up.index = r.oif;
      if (up.index != 0) break;
    }
    if (up.index == 0)
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                           "no IPv4 or IPv6 default route: set --iface or --node-ip");
  }
  WEFT_ASSIGN_OR_RETURN(auto link, nl.GetLink(up.index));
  if (!link) return Status::Error(Reason::kFailed, Domain::kKernel,
                                  "uplink #" + std::to_string(up.index) + " vanished");
  up.name = link->name;
  up.mtu = link->mtu;
  up.mac = link->mac;
  std::optional<IpAddress> first4, first6;
  for (const auto& a : addrs) {
    if (a.index != up.index || a.scope != RT_SCOPE_UNIVERSE) continue;
    up.subnets.push_back(a.prefix.Masked());
    auto& first = a.prefix.is_v4() ? first4 : first6;
    if (!first) first = a.prefix.addr();
  }
  for (const auto& w : want) {
    bool here = false;
    for (const auto& a : addrs)
      if (a.index == up.index && a.prefix.addr() == w) here = true;
    if (!here)
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                           "interface " + up.name + " does not carry the node IP " + w.ToString());
  }
  std::optional<IpAddress> ip = !want.empty() ? want[0] : first4 ? first4 : first6;
  if (!ip) return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                "interface " + up.name + " has no global IPv4 or IPv6 address");
  up.ip = *ip;
  up.ip6 = first6;
  for (const auto& w : want)
    if (w.is_v6()) up.ip6 = w;
  return up;
}

Result<sys::LinkInfo> EnsureVxlan(sys::Netlink& nl, const VxlanSpec& spec) {
  WEFT_ASSIGN_OR_RETURN(auto link, nl.GetLink(spec.name));
  if (link && link->kind != "vxlan")
    return Status::Error(Reason::kInvalidArgument, Domain::kConfig, spec.name + " exists and is a " +
                                                   (link->kind.empty() ? "device" : link->kind) + ", not vxlan");
  if (!link) {
    WEFT_RETURN_IF_ERROR(
        nl.CreateVxlan(spec.name, spec.vni, spec.port, spec.local, spec.underlay_index, spec.mtu));
    WEFT_ASSIGN_OR_RETURN(link, nl.GetLink(spec.name));
    if (!link) return Status::Error(Reason::kFailed, Domain::kKernel, spec.name + " vanished after creation");
  }
  if (spec.mtu > 0 && link->mtu != spec.mtu) WEFT_RETURN_IF_ERROR(nl.SetMtu(link->index, spec.mtu));
  if (!link->up) WEFT_RETURN_IF_ERROR(nl.SetUp(link->index));
  link->mtu = spec.mtu > 0 ? spec.mtu : link->mtu;
  link->up = true;
  return *link;
}

namespace {

class KernelDatapath : public Datapath {
 public:
  KernelDatapath(sys::Netlink nl, int vxlan_index) : nl_(std::move(nl)), vxlan_index_(vxlan_index) {}

  Result<KernelState> Read() override {
    KernelState s;
    for (int family : {AF_INET, AF_INET6}) {
      WEFT_ASSIGN_OR_RETURN(auto routes, nl_.ListRoutes(family, RT_TABLE_MAIN));
      for (auto& r : routes)
        if (IsAgentRoute(r)) s.routes.push_back(std::move(r));
    }
    if (vxlan_index_ > 0) {
      WEFT_ASSIGN_OR_RETURN(s.arp, nl_.ListNeighs(vxlan_index_, /*fdb=*/false));
      WEFT_ASSIGN_OR_RETURN(s.fdb, nl_.ListNeighs(vxlan_index_, /*fdb=*/true));
      for (const auto& set : FilterSets()) {
        WEFT_ASSIGN_OR_RETURN(auto elems, sys::NftElements(sys::NftFamily::kInet, kOverlayTable, set));
        for (const auto& el : elems)
          if (auto e = ParseFilterElement(el)) s.filter.push_back(*e);
      }
    }
    for (const auto& set : HostGwSets()) {
      WEFT_ASSIGN_OR_RETURN(auto elems, sys::NftElements(sys::NftFamily::kInet, kOverlayTable, set));
      for (const auto& el : elems)
        if (auto e = ParseHostGwElement(el)) s.hostgw.push_back(*e);
    }
    return s;
  }

  Status Apply(const Plan& plan, int* errors) override {
    Status first;
    *errors = 0;
    auto note = [&](Status st) {
      if (st.ok()) return;
      ++*errors;
      if (first.ok()) first = std::move(st);
    };
    if (!plan.filter_deletes.empty() || !plan.filter_adds.empty() || !plan.hostgw_deletes.empty() ||
        !plan.hostgw_adds.empty()) {
      // One transaction: the admissions change all at once.
      std::vector<sys::NftChange> changes;
      for (const auto& e : plan.filter_deletes)
        changes.push_back({sys::NftChange::kDestroyElement, FilterElement(e)});
      for (const auto& e : plan.hostgw_deletes)
        changes.push_back({sys::NftChange::kDestroyElement, HostGwElement(e)});
      for (const auto& e : plan.filter_adds) changes.push_back({sys::NftChange::kAddElement, FilterElement(e)});
      for (const auto& e : plan.hostgw_adds) changes.push_back({sys::NftChange::kAddElement, HostGwElement(e)});
      Status st = sys::NftApply(sys::NftFamily::kInet, kOverlayTable, changes)
                      .Prefix("overlay filter (table inet " + std::string(kOverlayTable) + ")");
      if (!st.ok()) *errors += static_cast<int>(changes.size()) - 1;
      note(std::move(st));
    }
    for (const auto& n : plan.fdb_adds) note(nl_.AddNeigh(n));
    for (const auto& n : plan.arp_upserts) note(nl_.AddNeigh(n));
    for (const auto& r : plan.route_upserts) note(nl_.AddRoute(r, /*replace=*/true));
    for (const auto& r : plan.route_deletes) note(nl_.DeleteRoute(r));
    for (const auto& n : plan.arp_deletes) note(nl_.DeleteNeigh(n));
    for (const auto& n : plan.fdb_deletes) note(nl_.DeleteNeigh(n));
    return first;
  }

 private:
  sys::Netlink nl_;
  int vxlan_index_;
};

}  // namespace

std::unique_ptr<Datapath> NewKernelDatapath(sys::Netlink nl, int vxlan_index) {
  return std::make_unique<KernelDatapath>(std::move(nl), vxlan_index);
}

}  // namespace weft::overlay
