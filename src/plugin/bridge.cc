#include "plugin/bridge.h"

#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "sys/crash_point.h"
#include "sys/sysctl.h"

namespace weft::plugin {

namespace {

Status CheckFailed(const std::string& what) { return Status::Error(Reason::kMismatch, Domain::kNone, what); }

std::optional<IpAddress> GatewayFor(const BridgeAddrs& a, const cni::Route& r) {
  if (r.gw) return r.gw;
  return r.dst.is_v4() ? a.gw4 : a.gw6;
}

}  // namespace

IpAddress FirstUsable(const IpPrefix& subnet) {
  IpPrefix net = subnet.Masked();
  if (net.is_v4() && net.host_bits() <= 1) return net.addr();
  return net.addr().Plus(1);
}

Result<sys::LinkInfo> EnsureBridge(sys::Netlink& host, const std::string& name, int mtu) {
  WEFT_ASSIGN_OR_RETURN(auto link, host.GetLink(name));
  if (!link) {
    Status st = host.CreateBridge(name, mtu);
    if (!st.ok() && !sys::IsExists(st)) return st;  // EEXIST: a concurrent ADD won; verify below
    WEFT_ASSIGN_OR_RETURN(link, host.GetLink(name));
    if (!link) return Status::Error(Reason::kFailed, Domain::kKernel,
                                    "bridge " + name + " vanished right after creation");
  }
  if (link->kind != "bridge")
    return Status::Error(Reason::kConflict, Domain::kKernel, "interface " + name + " exists and is " +
                                               (link->kind.empty() ? "not a bridge" : "a " + link->kind + ", not a bridge"),
                         "choose another \"bridge\" name");
  if (mtu > 0 && link->mtu != mtu) {
    WEFT_RETURN_IF_ERROR(host.SetMtu(link->index, mtu));
    link->mtu = mtu;
  }
  if (!link->up) {
    WEFT_RETURN_IF_ERROR(host.SetUp(link->index));
    link->up = true;
  }
  return *link;
}

Status EnsureBridgeAddress(sys::Netlink& host, const sys::LinkInfo& bridge, const IpPrefix& gw) {
  const int family = gw.is_v4() ? AF_INET : AF_INET6;
  WEFT_ASSIGN_OR_RETURN(auto addrs, host.ListAddresses(family));
  for (const auto& a : addrs) {
    if (a.prefix.addr() != gw.addr()) continue;
    if (a.index == bridge.index) return Status::Ok();
    return Status::Error(Reason::kConflict, Domain::kKernel,
                         "gateway " + gw.addr().ToString() + " is already on interface #" + std::to_string(a.index) +
                             ", not on bridge " + bridge.name);
  }
  Status st = host.AddAddress(bridge.index, gw, /*nodad=*/!gw.is_v4());
  if (st.ok() || !sys::IsExists(st)) return st.Prefix("add gateway to " + bridge.name);
  // EEXIST: a concurrent ADD put it there between our read and our write.
  WEFT_ASSIGN_OR_RETURN(addrs, host.ListAddresses(family));
  for (const auto& a : addrs)
    if (a.prefix.addr() == gw.addr() && a.index == bridge.index) return Status::Ok();
  return st.Prefix("add gateway to " + bridge.name);
}

Result<sys::LinkInfo> ConfigureBridgePort(sys::Netlink& host, sys::LinkInfo h, const sys::LinkInfo& bridge) {
  WEFT_RETURN_IF_ERROR(host.SetMaster(h.index, bridge.index));
  // The port is locked to its pod's MAC before it is up: learning off, and
  // the bridge drops every frame whose source MAC is not in its FDB behind
  // this port, which holds only the pod's MAC (the source guard then checks
  // addresses only: docs/plugin.md#source-guard).
  WEFT_RETURN_IF_ERROR(host.SetBridgePortFlags(h.index, /*hairpin=*/true, /*locked=*/true));
  WEFT_RETURN_IF_ERROR(host.AddBridgeFdbStatic(h.index, PodMac(h.name)));
  // A bridge port forwards frames; the bridge holds the addresses. IPv6 on
  // the port would only add a link-local address and routes per pod (and a
  // walk of the node's IPv6 routes on every link-up).
  WEFT_RETURN_IF_ERROR(sys::DisableIpv6(h.name));
  WEFT_RETURN_IF_ERROR(host.SetUp(h.index));
  h.master = bridge.index;
  h.up = true;
  return h;
}

Result<sys::LinkInfo> ConfigureBridgePodSide(sys::Netlink& pod, const std::string& ifname, const BridgeAddrs& a) {
  WEFT_ASSIGN_OR_RETURN(auto link, pod.GetLink(ifname));
  if (!link) return Status::Error(Reason::kFailed, Domain::kKernel,
                                  "interface " + ifname + " vanished from the pod netns");
  WEFT_RETURN_IF_ERROR(pod.SetUp(link->index));
  if (a.v4) WEFT_RETURN_IF_ERROR(pod.AddAddress(link->index, *a.v4));
  // No DAD: the address is ours by allocation, and DAD would delay it ~1s.
  if (a.v6) WEFT_RETURN_IF_ERROR(pod.AddAddress(link->index, *a.v6, /*nodad=*/true));
  for (const auto& r : a.routes) {
    auto gw = GatewayFor(a, r);
    if ((r.dst.is_v4() ? !a.v4 : !a.v6) || !gw) continue;  // no address or no gateway of that family
    sys::RouteSpec spec{r.dst.Masked(), gw, link->index, RT_SCOPE_UNIVERSE};
    Status st = pod.AddRoute(spec);
    if (sys::IsExists(st))
      return Status::Error(Reason::kAlreadyExists, Domain::kKernel,
                           "the pod netns already has a route to " + r.dst.ToString() +
                                                 " (" + ifname + " would be a second default route)");
    WEFT_RETURN_IF_ERROR(st);
  }
  link->up = true;
  return *link;
}

cni::CniResult BridgeResult(const sys::LinkInfo& bridge, const sys::LinkInfo& host, const sys::LinkInfo& pod,
                            const std::string& netns, const BridgeAddrs& a) {
  cni::CniResult r;
  r.interfaces.push_back(ResultInterface(bridge));
  r.interfaces.push_back(ResultInterface(host));
  r.interfaces.push_back(ResultInterface(pod, netns));
  if (a.v4) r.ips.push_back({*a.v4, a.gw4, 2});
  if (a.v6) r.ips.push_back({*a.v6, a.gw6, 2});
  for (const auto& rt : a.routes) {
    if (rt.dst.is_v4() ? !a.v4 : !a.v6) continue;
    cni::Route out = rt;
    out.dst = rt.dst.Masked();
    if (!out.gw) out.gw = rt.dst.is_v4() ? a.gw4 : a.gw6;
    r.routes.push_back(out);
  }
  return r;
}

std::optional<IpAddress> BridgeGateway(const Config& cfg, const IpPrefix& addr) {
  for (const auto& g : cfg.gateways)
    if (g.is_v4() == addr.is_v4()) return g;
  for (const auto& r : cfg.ranges)
    if (r.Contains(addr.addr())) return FirstUsable(r);
  return std::nullopt;
}

BridgeAddrs BridgePlan(const Config& cfg, const ipam::PodRecord& rec,
                       const std::optional<std::vector<cni::Route>>& ipam_routes) {
  BridgeAddrs a;
  a.v4 = rec.ip_v4;
  a.v6 = rec.ip_v6;
  a.gw4 = rec.gateway_v4;
  a.gw6 = rec.gateway_v6;
  if (a.v4 && !a.gw4) a.gw4 = BridgeGateway(cfg, *a.v4);
  if (a.v6 && !a.gw6) a.gw6 = BridgeGateway(cfg, *a.v6);
  if (ipam_routes) {
    a.routes = *ipam_routes;
  } else {
    if (a.v4) a.routes.push_back({*IpPrefix::Parse("0.0.0.0/0"), std::nullopt});
    if (a.v6) a.routes.push_back({*IpPrefix::Parse("::/0"), std::nullopt});
  }
  for (const auto& p : cfg.route_via_host) a.routes.push_back({p, std::nullopt});
  return a;
}

Status BridgeDatapath::Attach(const ipam::PodRecord& rec, const std::optional<std::vector<cni::Route>>& ipam_routes) {
  sys::Netlink& host = ctx_.host;
  WEFT_ASSIGN_OR_RETURN(sys::LinkInfo host_link, ReadHostLink());
  plan_ = BridgePlan(cfg_, rec, ipam_routes);
  auto br = EnsureBridge(host, cfg_.bridge, ctx_.mtu);
  if (!br.ok()) return br.status().WithPrefix("bridge " + cfg_.bridge);
  for (const auto& [addr, gw] : {std::pair{plan_.v4, plan_.gw4}, std::pair{plan_.v6, plan_.gw6}})
    if (addr && gw) WEFT_RETURN_IF_ERROR(EnsureBridgeAddress(host, *br, IpPrefix(*gw, addr->len())));
  WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv4/ip_forward", "1"));
  if (plan_.v6) WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv6/conf/all/forwarding", "1"));
  auto port = ConfigureBridgePort(host, std::move(host_link), *br);
  if (!port.ok()) return port.status().WithPrefix("attach " + ctx_.host_ifname + " to " + cfg_.bridge);
  WEFT_CRASH_POINT("add-after-host-side");
  auto pod_link = ConfigureBridgePodSide(ctx_.pod, ctx_.ifname, plan_);
  if (!pod_link.ok()) return pod_link.status().WithPrefix("configure " + ctx_.ifname + " in the pod");
  WEFT_CRASH_POINT("add-after-pod-side");
  auto br_now = host.GetLink(br->index);  // its MAC follows its ports
  bridge_link_ = br_now.ok() && br_now->has_value() ? **br_now : *br;
  host_link_ = std::move(*port);
  pod_link_ = std::move(*pod_link);
  return Status::Ok();
}

cni::CniResult BridgeDatapath::Result() const {
  return BridgeResult(bridge_link_, host_link_, pod_link_, ctx_.netns, plan_);
}

Status BridgeDatapath::Check(const ipam::PodRecord& rec) {
  // Delegated routes are not recorded: check the default routes only when
  // weft chose them.
  std::optional<std::vector<cni::Route>> routes;
  if (!cfg_.delegated_ipam.empty()) routes.emplace();
  const BridgeAddrs a = BridgePlan(cfg_, rec, routes);
  const std::string& bridge = cfg_.bridge;
  const std::string& host_ifname = ctx_.host_ifname;
  const std::string& ifname = ctx_.ifname;
  sys::Netlink& host = ctx_.host;
  WEFT_ASSIGN_OR_RETURN(auto br, RequireLinkUp(host, bridge, "bridge " + bridge));
  WEFT_ASSIGN_OR_RETURN(auto h, RequireLinkUp(host, host_ifname, "host interface " + host_ifname));
  if (h.master != br.index) return CheckFailed("host interface " + host_ifname + " is not a port of " + bridge);
  WEFT_ASSIGN_OR_RETURN(auto p, RequireLinkUp(ctx_.pod, ifname, "interface " + ifname, " in the pod netns"));
  for (int fam : {AF_INET, AF_INET6}) {
    const auto& want = fam == AF_INET ? a.v4 : a.v6;
    if (!want) continue;
    WEFT_RETURN_IF_ERROR(RequirePodAddress(p, *want, /*exact_prefix=*/true));
    const auto& gw = fam == AF_INET ? a.gw4 : a.gw6;
    if (gw) {
      WEFT_ASSIGN_OR_RETURN(auto host_addrs, host.ListAddresses(fam));
      bool on_bridge = false;
      for (const auto& ad : host_addrs)
        if (ad.index == br.index && ad.prefix.addr() == *gw) on_bridge = true;
      if (!on_bridge) return CheckFailed("gateway " + gw->ToString() + " is not on bridge " + bridge);
    }
    WEFT_ASSIGN_OR_RETURN(auto routes, ctx_.pod.ListRoutes(fam));
    for (const auto& r : a.routes) {
      if (r.dst.is_v4() != (fam == AF_INET)) continue;
      auto via = GatewayFor(a, r);
      bool have = false;
      for (const auto& pr : routes)
        if (pr.dst == r.dst.Masked() && pr.gw == via && pr.oif == p.index) have = true;
      if (!have)
        return CheckFailed(std::string(r.dst.len() == 0 ? "the pod has no default route" : "the pod has no route to " +
                                                                                             r.dst.ToString()) +
                           (via ? " via " + via->ToString() : "") + " dev " + ifname);
    }
  }
  return Status::Ok();
}

}  // namespace weft::plugin
