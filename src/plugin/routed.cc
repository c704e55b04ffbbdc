#include "plugin/routed.h"

#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "base/strings.h"
#include "sys/files.h"
#include "sys/sysctl.h"

namespace weft::plugin {

namespace {

IpAddress Gw4() { return *IpAddress::Parse(kGatewayV4); }
IpAddress Gw6() { return *IpAddress::Parse(kGatewayV6); }
IpPrefix Default(bool v6) { return *IpPrefix::Parse(v6 ? "::/0" : "0.0.0.0/0"); }
IpPrefix Host(const IpAddress& a) { return IpPrefix(a, a.family_bits()); }

Status CheckFailed(const std::string& what) { return Status::Error(Code::kCheckFailed, what); }

}  // namespace

Status CreateVethPair(sys::Netlink& host, sys::Netlink& pod, const sys::Netns& pod_ns,
                      const std::string& host_ifname, const std::string& ifname, int mtu,
                      uint32_t host_group) {
  Status st = host.CreateVeth(host_ifname, ifname, pod_ns.fd(), mtu, host_group);
  if (st.ok() || !sys::IsExists(st)) return st;
  auto h = host.GetLink(host_ifname);
  if (h.ok() && h->has_value())
    return Status::Error(Code::kNameTaken, "host interface " + host_ifname + " already exists",
                         "a link with this container's deterministic name is present; run DEL for the "
                         "container or `weftctl doctor --fix`");
  auto p = pod.GetLink(ifname);
  if (p.ok() && p->has_value())
    return Status::Error(Code::kNameTaken, "interface " + ifname + " already exists in netns " + pod_ns.path());
  return st;
}

namespace {

// A second weft attachment in the same netns would need the same gateway
// and default routes: say so instead of a bare EEXIST.
Status AddPodRoute(sys::Netlink& pod, const sys::RouteSpec& r, const std::string& ifname) {
  Status st = pod.AddRoute(r);
  if (sys::IsExists(st))
    return Status::Error(Code::kNameTaken,
                         "the pod netns already has a route to " + r.dst.ToString() + " (only one routed-mode "
                         "attachment per pod netns is supported; " + ifname + " would be the second)");
  return st;
}

}  // namespace

Result<sys::LinkInfo> ConfigurePodSide(sys::Netlink& pod, const std::string& ifname, const PodAddrs& a,
                                       const std::string& host_mac) {
  WEFT_ASSIGN_OR_RETURN(auto link, pod.GetLink(ifname));
  if (!link) return Status::Error(Code::kKernel, "interface " + ifname + " vanished from the pod netns");
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
    sys::RouteSpec r{Host(*a.v4), std::nullopt, link->index, RT_SCOPE_LINK, RT_TABLE_MAIN, sys::kRouteProtoWeft};
    WEFT_RETURN_IF_ERROR(host.AddRoute(r, /*replace=*/true));
  }
  if (a.v6) {
    WEFT_RETURN_IF_ERROR(host.AddAddress(link->index, IpPrefix(Gw6(), 64), /*nodad=*/true));
    WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv6/conf/all/forwarding", "1"));
    sys::RouteSpec r{Host(*a.v6), std::nullopt, link->index, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN,
                     sys::kRouteProtoWeft};
    WEFT_RETURN_IF_ERROR(host.AddRoute(r, /*replace=*/true));
  }
  h.up = true;
  return h;
}

Status CheckRouted(sys::Netlink& host, sys::Netlink& pod, const std::string& host_ifname,
                   const std::string& ifname, const PodAddrs& a) {
  WEFT_ASSIGN_OR_RETURN(auto h, host.GetLink(host_ifname));
  if (!h) return CheckFailed("host interface " + host_ifname + " is missing");
  if (!h->up) return CheckFailed("host interface " + host_ifname + " is down");
  if (h->kind != "veth") return CheckFailed("host interface " + host_ifname + " is a " + h->kind + ", not a veth");
  WEFT_ASSIGN_OR_RETURN(auto p, pod.GetLink(ifname));
  if (!p) return CheckFailed("interface " + ifname + " is missing in the pod netns");
  if (!p->up) return CheckFailed("interface " + ifname + " is down in the pod netns");

  for (int fam : {AF_INET, AF_INET6}) {
    const auto& want = fam == AF_INET ? a.v4 : a.v6;
    if (!want) continue;
    WEFT_ASSIGN_OR_RETURN(auto addrs, pod.ListAddresses(fam));
    bool found = false;
    for (const auto& ad : addrs)
      if (ad.index == p->index && ad.prefix.addr() == *want) found = true;
    if (!found) return CheckFailed("pod address " + want->ToString() + " is not on " + ifname);
    WEFT_ASSIGN_OR_RETURN(auto pod_routes, pod.ListRoutes(fam));
    bool def = false;
    IpAddress gw = fam == AF_INET ? Gw4() : Gw6();
    for (const auto& r : pod_routes)
      if (r.dst.len() == 0 && r.gw == gw && r.oif == p->index) def = true;
    if (!def) return CheckFailed("the pod has no default route via " + gw.ToString() + " dev " + ifname);
    WEFT_ASSIGN_OR_RETURN(auto host_routes, host.ListRoutes(fam));
    bool hr = false;
    for (const auto& r : host_routes)
      if (r.dst == Host(*want) && r.oif == h->index) hr = true;
    if (!hr) return CheckFailed("the host has no route to " + want->ToString() + " via " + host_ifname);
  }
  if (a.v4) {
    auto pa = sys::ReadSysctl("net/ipv4/conf/" + host_ifname + "/proxy_arp");
    if (!pa.ok() || *pa != "1") return CheckFailed("proxy ARP is off on " + host_ifname);
  }
  return Status::Ok();
}

cni::CniResult RoutedResult(const sys::LinkInfo& host, const sys::LinkInfo& pod, const std::string& netns,
                            const PodAddrs& a) {
  cni::CniResult r;
  r.interfaces.push_back({host.name, host.mac, host.mtu, "", "", ""});
  r.interfaces.push_back({pod.name, pod.mac, pod.mtu, netns, "", ""});
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

int DeriveMtu(sys::Netlink& host) {
  // /proc/net/route walks the FIB trie in order, so a default route is on
  // the first lines: this stays cheap however many pod routes the node has.
  auto f = sys::ReadFile("/proc/net/route", 8192);
  if (f.ok()) {
    auto lines = Split(*f, '\n');
    for (size_t i = 1; i < lines.size() && i < 64; ++i) {
      auto cols = Split(lines[i], '\t');
      if (cols.size() < 8) continue;
      if (Trim(cols[1]) == "00000000" && Trim(cols[7]) == "00000000") {
        auto l = host.GetLink(std::string(Trim(cols[0])));
        if (l.ok() && l->has_value() && (*l)->mtu > 0) return (*l)->mtu;
      }
    }
  }
  return 1500;
}

}  // namespace weft::plugin
