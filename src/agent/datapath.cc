#include "agent/datapath.h"

#include <linux/rtnetlink.h>
#include <sys/socket.h>

namespace weft::agent {

Result<Uplink> DetectUplink(sys::Netlink& nl, const std::string& iface, const std::string& node_ip) {
  std::optional<IpAddress> want_ip;
  if (!node_ip.empty()) {
    want_ip = IpAddress::Parse(node_ip);
    if (!want_ip || !want_ip->is_v4())
      return Status::Error(Code::kInvalidConfig, "node IP \"" + node_ip + "\" is not an IPv4 address");
  }
  WEFT_ASSIGN_OR_RETURN(auto addrs, nl.ListAddresses(AF_INET));
  Uplink up;
  if (!iface.empty()) {
    WEFT_ASSIGN_OR_RETURN(auto link, nl.GetLink(iface));
    if (!link) return Status::Error(Code::kInvalidConfig, "interface " + iface + " does not exist");
    up.index = link->index;
  } else if (want_ip) {
    for (const auto& a : addrs)
      if (a.prefix.addr() == *want_ip) up.index = a.index;
    if (up.index == 0)
      return Status::Error(Code::kInvalidConfig, "no interface carries the node IP " + want_ip->ToString());
  } else {
    WEFT_ASSIGN_OR_RETURN(auto routes, nl.ListRoutes(AF_INET));
    for (const auto& r : routes)
      if (r.dst.len() == 0 && r.oif > 0 && (up.index == 0)) up.index = r.oif;
    if (up.index == 0)
      return Status::Error(Code::kInvalidConfig, "no IPv4 default route: set --iface or --node-ip");
  }
  WEFT_ASSIGN_OR_RETURN(auto link, nl.GetLink(up.index));
  if (!link) return Status::Error(Code::kKernel, "uplink #" + std::to_string(up.index) + " vanished");
  up.name = link->name;
  up.mtu = link->mtu;
  bool have_ip = false;
  for (const auto& a : addrs) {
    if (a.index != up.index || a.scope != RT_SCOPE_UNIVERSE) continue;
    up.subnets.push_back(a.prefix.Masked());
    if (want_ip ? a.prefix.addr() == *want_ip : !have_ip) {
      up.ip = a.prefix.addr();
      have_ip = true;
    }
  }
  if (!have_ip) {
    // Appended step by step: GCC 12's -Wrestrict misfires at -O3 on
    // `"..." + (cond ? " " + s : std::string())` (GCC PR105329).
    std::string msg = "interface " + up.name + " has no global IPv4 address";
    if (want_ip) msg.append(" ").append(want_ip->ToString());
    return Status::Error(Code::kInvalidConfig, msg);
  }
  return up;
}

Result<sys::LinkInfo> EnsureVxlan(sys::Netlink& nl, const VxlanSpec& spec) {
  WEFT_ASSIGN_OR_RETURN(auto link, nl.GetLink(spec.name));
  if (link && link->kind != "vxlan")
    return Status::Error(Code::kInvalidConfig, spec.name + " exists and is a " +
                                                   (link->kind.empty() ? "device" : link->kind) + ", not vxlan");
  if (!link) {
    WEFT_RETURN_IF_ERROR(
        nl.CreateVxlan(spec.name, spec.vni, spec.port, spec.local, spec.underlay_index, spec.mtu));
    WEFT_ASSIGN_OR_RETURN(link, nl.GetLink(spec.name));
    if (!link) return Status::Error(Code::kKernel, spec.name + " vanished after creation");
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
    WEFT_ASSIGN_OR_RETURN(auto routes, nl_.ListRoutes(AF_INET, RT_TABLE_MAIN));
    for (auto& r : routes)
      if (IsAgentRoute(r)) s.routes.push_back(std::move(r));
    if (vxlan_index_ > 0) {
      WEFT_ASSIGN_OR_RETURN(s.arp, nl_.ListNeighs(vxlan_index_, /*fdb=*/false));
      WEFT_ASSIGN_OR_RETURN(s.fdb, nl_.ListNeighs(vxlan_index_, /*fdb=*/true));
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

}  // namespace weft::agent
