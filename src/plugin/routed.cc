#include "plugin/routed.h"

#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "sys/crash_point.h"
#include "sys/sysctl.h"

namespace weft::plugin {

namespace {

IpAddress Gw4() { return *IpAddress::Parse(kGatewayV4); }
IpAddress Gw6() { return *IpAddress::Parse(kGatewayV6); }
IpPrefix Default(bool v6) { return *IpPrefix::Parse(v6 ? "::/0" : "0.0.0.0/0"); }
IpPrefix Host(const IpAddress& a) { return IpPrefix(a, a.family_bits()); }

Status CheckFailed(const std::string& what) { return Status::Error(Reason::kMismatch, Domain::kNone, what); }

// A second weft attachment in the same netns would need the same gateway
// and default routes: say so instead of a bare EEXIST.
Status AddPodRoute(sys::Netlink& pod, const sys::RouteSpec& r, const std::string& ifname) {
  Status st = pod.AddRoute(r);
  if (sys::IsExists(st))
    return Status::Error(Reason::kAlreadyExists, Domain::kKernel,
                         "the pod netns already has a route to " + r.dst.ToString() + " (only one routed-mode "
                         "attachment per pod netns is supported; " + ifname + " would be the second)");
  return st;
}

}  // namespace

sys::RouteSpec HostRoute(const IpAddress& addr, int index) {
  return {Host(addr), std::nullopt, index, addr.is_v4() ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE, RT_TABLE_MAIN,
          sys::kRouteProtoWeft};
}

Result<sys::LinkInfo> ConfigurePodSide(sys::Netlink& pod, const std::string& ifname, const PodAddrs& a,
                                       const std::string& host_mac) {
  WEFT_ASSIGN_OR_RETURN(auto link, pod.GetLink(ifname));
  if (!link) return Status::Error(Reason::kFailed, Domain::kKernel,
                                  "interface " + ifname + " vanished from the pod netns");
  // Up before routes: the kernel refuses routes via a down link (ENETDOWN).
  WEFT_RETURN_IF_ERROR(pod.SetUp(link->index));
  if (a.v4) {
    WEFT_RETURN_IF_ERROR(pod.AddAddress(link->index, Host(*a.v4)));
    sys::RouteSpec gw{Host(Gw4()), std::nullopt, link->index, RT_SCOPE_LINK};
    WEFT_RETURN_IF_ERROR(AddPodRoute(pod, gw, ifname));
    sys::RouteSpec def{Default(false), Gw4(), link->index, RT_SCOPE_UNIVERSE};
    WEFT_RETURN_IF_ERROR(AddPodRoute(pod, def, ifname));
    WEFT_RETURN_IF_ERROR(pod.AddNeigh({link->index, Gw4(), host_mac, false}));
  }
  if (a.v6) {
    // No DAD: the address is ours by allocation, and DAD would delay it ~1s.
    WEFT_RETURN_IF_ERROR(pod.AddAddress(link->index, Host(*a.v6), /*nodad=*/true));
    sys::RouteSpec def{Default(true), Gw6(), link->index, RT_SCOPE_UNIVERSE};
    WEFT_RETURN_IF_ERROR(AddPodRoute(pod, def, ifname));
    WEFT_RETURN_IF_ERROR(pod.AddNeigh({link->index, Gw6(), host_mac, false}));
  }
  for (const auto& dst : a.extra_routes) {
    if (dst.is_v4() ? !a.v4 : !a.v6) continue;
    sys::RouteSpec r{dst, dst.is_v4() ? Gw4() : Gw6(), link->index, RT_SCOPE_UNIVERSE};
    WEFT_RETURN_IF_ERROR(pod.AddRoute(r, /*replace=*/true));
  }
  link->up = true;
  return *link;
}

Result<sys::LinkInfo> ConfigureHostSide(sys::Netlink& host, sys::LinkInfo h, const PodAddrs& a) {
  sys::LinkInfo* link = &h;
  const std::string& host_ifname = h.name;
  // An IPv4-only pod needs no IPv6 on the host end. With it, every host veth
  // brings a link-local address and its routes, and each link-up walks the
  // node's whole IPv6 routing table (rt6_sync_up): ADD grows with the pods.
  if (!a.v6) WEFT_RETURN_IF_ERROR(sys::DisableIpv6(host_ifname));
  WEFT_RETURN_IF_ERROR(host.SetUp(link->index, /*proxy_arp=*/a.v4.has_value()));
  if (a.v4) {
    // Proxy ARP answers after a random delay up to proxy_delay (0.8 s by
    // default) unless it is zero.
    WEFT_RETURN_IF_ERROR(sys::WriteSysctl("net/ipv4/neigh/" + host_ifname + "/proxy_delay", "0"));
    WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv4/ip_forward", "1"));
    WEFT_RETURN_IF_ERROR(host.AddRoute(HostRoute(*a.v4, link->index), /*replace=*/true));
  }
  if (a.v6) {
    WEFT_RETURN_IF_ERROR(host.AddAddress(link->index, IpPrefix(Gw6(), 64), /*nodad=*/true));
    WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv6/conf/all/forwarding", "1"));
    WEFT_RETURN_IF_ERROR(host.AddRoute(HostRoute(*a.v6, link->index), /*replace=*/true));
  }
  h.up = true;
  return h;
}

cni::CniResult RoutedResult(const sys::LinkInfo& host, const sys::LinkInfo& pod, const std::string& netns,
                            const PodAddrs& a) {
  cni::CniResult r;
  r.interfaces.push_back(ResultInterface(host));
  r.interfaces.push_back(ResultInterface(pod, netns));
  if (a.v4) {
    r.ips.push_back({Host(*a.v4), Gw4(), 1});
    r.routes.push_back({Default(false), Gw4()});
  }
  if (a.v6) {
    r.ips.push_back({Host(*a.v6), Gw6(), 1});
    r.routes.push_back({Default(true), Gw6()});
  }
  for (const auto& dst : a.extra_routes)
    if (dst.is_v4() ? a.v4.has_value() : a.v6.has_value()) r.routes.push_back({dst, dst.is_v4() ? Gw4() : Gw6()});
  return r;
}

PodAddrs RoutedPlan(const Config& cfg, const ipam::PodRecord& rec, const std::vector<cni::Route>& ipam_routes) {
  PodAddrs a;
  if (rec.ip_v4) a.v4 = rec.ip_v4->addr();
  if (rec.ip_v6) a.v6 = rec.ip_v6->addr();
  for (const auto& r : ipam_routes)
    if (r.dst.len() > 0) a.extra_routes.push_back(r.dst.Masked());
  for (const auto& p : cfg.route_via_host) a.extra_routes.push_back(p);
  return a;
}

Status RoutedDatapath::Attach(const ipam::PodRecord& rec, const std::optional<std::vector<cni::Route>>& ipam_routes) {
  WEFT_ASSIGN_OR_RETURN(sys::LinkInfo host_link, ReadHostLink());
  plan_ = RoutedPlan(cfg_, rec, ipam_routes.value_or(std::vector<cni::Route>{}));
  auto pod_link = ConfigurePodSide(ctx_.pod, ctx_.ifname, plan_, host_link.mac);
  if (!pod_link.ok()) return pod_link.status().WithPrefix("configure " + ctx_.ifname + " in the pod");
  WEFT_CRASH_POINT("add-after-pod-side");
  auto configured = ConfigureHostSide(ctx_.host, std::move(host_link), plan_);
  if (!configured.ok()) return configured.status().WithPrefix("configure host side " + ctx_.host_ifname);
  WEFT_CRASH_POINT("add-after-host-side");
  host_link_ = std::move(*configured);
  pod_link_ = std::move(*pod_link);
  return Status::Ok();
}

cni::CniResult RoutedDatapath::Result() const { return RoutedResult(host_link_, pod_link_, ctx_.netns, plan_); }

Status RoutedDatapath::Check(const ipam::PodRecord& rec) {
  const PodAddrs a = RoutedPlan(cfg_, rec, {});
  const std::string& host_ifname = ctx_.host_ifname;
  const std::string& ifname = ctx_.ifname;
  WEFT_ASSIGN_OR_RETURN(auto h, RequireLinkUp(ctx_.host, host_ifname, "host interface " + host_ifname));
  if (h.kind != "veth") return CheckFailed("host interface " + host_ifname + " is a " + h.kind + ", not a veth");
  WEFT_ASSIGN_OR_RETURN(auto p, RequireLinkUp(ctx_.pod, ifname, "interface " + ifname, " in the pod netns"));

  for (int fam : {AF_INET, AF_INET6}) {
    const auto& want = fam == AF_INET ? a.v4 : a.v6;
    if (!want) continue;
    WEFT_RETURN_IF_ERROR(RequirePodAddress(p, Host(*want), /*exact_prefix=*/false));
    WEFT_ASSIGN_OR_RETURN(auto pod_routes, ctx_.pod.ListRoutes(fam));
    bool def = false;
    IpAddress gw = fam == AF_INET ? Gw4() : Gw6();
    for (const auto& r : pod_routes)
      if (r.dst.len() == 0 && r.gw == gw && r.oif == p.index) def = true;
    if (!def) return CheckFailed("the pod has no default route via " + gw.ToString() + " dev " + ifname);
    WEFT_ASSIGN_OR_RETURN(auto host_routes, ctx_.host.ListRoutes(fam));
    bool hr = false;
    for (const auto& r : host_routes)
      if (r.dst == Host(*want) && r.oif == h.index) hr = true;
    if (!hr) return CheckFailed("the host has no route to " + want->ToString() + " via " + host_ifname);
  }
  if (a.v4) {
    auto pa = sys::ReadSysctl("net/ipv4/conf/" + host_ifname + "/proxy_arp");
    if (!pa.ok() || *pa != "1") return CheckFailed("proxy ARP is off on " + host_ifname);
  }
  return Status::Ok();
}

}  // namespace weft::plugin
