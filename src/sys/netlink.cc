#include "sys/netlink.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/ip.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/inet.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/link/vxlan.h>
#include <netlink/route/neighbour.h>
#include <netlink/route/route.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace weft::sys {
namespace {

// RAII for libnl's reference-counted objects.
template <typename T, void (*Free)(T*)>
struct NlPtr {
  T* p = nullptr;
  NlPtr() = default;
  explicit NlPtr(T* x) : p(x) {}
  ~NlPtr() {
    if (p) Free(p);
  }
  NlPtr(const NlPtr&) = delete;
  NlPtr& operator=(const NlPtr&) = delete;
  T* get() const { return p; }
  T** out() { return &p; }
};
using LinkPtr = NlPtr<rtnl_link, rtnl_link_put>;
using AddrPtr = NlPtr<rtnl_addr, rtnl_addr_put>;
using RoutePtr = NlPtr<rtnl_route, rtnl_route_put>;
using NeighPtr = NlPtr<rtnl_neigh, rtnl_neigh_put>;
using NlAddrPtr = NlPtr<nl_addr, nl_addr_put>;
using CachePtr = NlPtr<nl_cache, nl_cache_free>;

int ErrnoOf(int nlerr) {
  switch (nlerr < 0 ? -nlerr : nlerr) {
    case NLE_EXIST: return EEXIST;
    case NLE_NODEV: return ENODEV;
    case NLE_OBJ_NOTFOUND: return ENOENT;
    case NLE_PERM: return EPERM;
    case NLE_NOACCESS: return EACCES;
    case NLE_BUSY: return EBUSY;
    case NLE_INVAL: return EINVAL;
    case NLE_RANGE: return ERANGE;
    case NLE_NOADDR: return EADDRNOTAVAIL;
    case NLE_NOMEM: return ENOMEM;
    case NLE_AGAIN: return EAGAIN;
    case NLE_INTR: return EINTR;
    case NLE_OPNOTSUPP: return EOPNOTSUPP;
    case NLE_AF_NOSUPPORT: return EAFNOSUPPORT;
    case NLE_DUMP_INTR: return EINTR;
    default: return EIO;
  }
}

nl_addr* BuildAddr(const IpAddress& a, int prefixlen) {
  nl_addr* n = nl_addr_build(a.is_v6() ? AF_INET6 : AF_INET, a.bytes(), a.size());
  if (n) nl_addr_set_prefixlen(n, prefixlen);
  return n;
}

std::optional<IpAddress> FromNlAddr(nl_addr* a) {
  if (!a) return std::nullopt;
  int fam = nl_addr_get_family(a);
  unsigned len = nl_addr_get_len(a);
  if (fam == AF_INET && len == 4) return IpAddress::FromBytes(false, static_cast<uint8_t*>(nl_addr_get_binary_addr(a)));
  if (fam == AF_INET6 && len == 16) return IpAddress::FromBytes(true, static_cast<uint8_t*>(nl_addr_get_binary_addr(a)));
  return std::nullopt;
}

bool ParseMac(const std::string& s, uint8_t out[6]) {
  unsigned v[6];
  char extra;
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &extra) != 6)
    return false;
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 0xff) return false;
    out[i] = static_cast<uint8_t>(v[i]);
  }
  return true;
}

LinkInfo ToLinkInfo(rtnl_link* l) {
  LinkInfo info;
  info.index = rtnl_link_get_ifindex(l);
  if (const char* n = rtnl_link_get_name(l)) info.name = n;
  if (const char* t = rtnl_link_get_type(l)) info.kind = t;
  if (nl_addr* a = rtnl_link_get_addr(l); a && nl_addr_get_len(a) == 6)
    info.mac = FormatMac(static_cast<uint8_t*>(nl_addr_get_binary_addr(a)));
  info.mtu = static_cast<int>(rtnl_link_get_mtu(l));
  info.up = (rtnl_link_get_flags(l) & IFF_UP) != 0;
  info.master = rtnl_link_get_master(l);
  return info;
}

}  // namespace

Status NlError(int nlerr, const std::string& what) {
  int err = ErrnoOf(nlerr);
  return Status::Error(Reason::kFailed, Domain::kKernel, what, nl_geterror(nlerr < 0 ? -nlerr : nlerr), err);
}

bool IsExists(const Status& s) { return s.sys_errno() == EEXIST; }
bool IsNotFound(const Status& s) {
  return s.sys_errno() == ENODEV || s.sys_errno() == ENOENT || s.sys_errno() == ESRCH;
}

Result<Netlink> Netlink::Open() {
  nl_sock* sk = nl_socket_alloc();
  if (!sk) return Status::Error(Reason::kFailed, Domain::kKernel, "allocate netlink socket");
  int err = nl_connect(sk, NETLINK_ROUTE);
  if (err < 0) {
    nl_socket_free(sk);
    return NlError(err, "connect rtnetlink");
  }
  return Netlink(sk);
}

Result<Netlink> Netlink::OpenIn(const Netns& ns) {
  std::optional<Netlink> out;
  Status st = RunInNetns(ns, [&]() -> Status {
    auto nl = Open();
    if (!nl.ok()) return nl.status();
    out.emplace(std::move(nl).value());
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return std::move(*out);
}

Result<Netlink> Netlink::OpenInOnThisThread(const Netns& ns) {
  std::optional<Netlink> out;
  Status st = RunInNetnsOnThisThread(ns, [&]() -> Status {
    auto nl = Open();
    if (!nl.ok()) return nl.status();
    out.emplace(std::move(nl).value());
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return std::move(*out);
}

Netlink::Netlink(Netlink&& o) noexcept : sk_(std::exchange(o.sk_, nullptr)) {}
Netlink& Netlink::operator=(Netlink&& o) noexcept {
  if (this != &o) {
    if (sk_) nl_socket_free(sk_);
    sk_ = std::exchange(o.sk_, nullptr);
  }
  return *this;
}
Netlink::~Netlink() {
  if (sk_) nl_socket_free(sk_);
}

Result<std::optional<LinkInfo>> Netlink::GetLink(const std::string& name) {
  LinkPtr l;
  int err = rtnl_link_get_kernel(sk_, 0, name.c_str(), l.out());
  if (err == -NLE_NODEV || err == -NLE_OBJ_NOTFOUND) return std::optional<LinkInfo>();
  if (err < 0) return NlError(err, "get link " + name);
  return std::optional<LinkInfo>(ToLinkInfo(l.get()));
}

Result<std::optional<LinkInfo>> Netlink::GetLink(int index) {
  LinkPtr l;
  int err = rtnl_link_get_kernel(sk_, index, nullptr, l.out());
  if (err == -NLE_NODEV || err == -NLE_OBJ_NOTFOUND) return std::optional<LinkInfo>();
  if (err < 0) return NlError(err, "get link #" + std::to_string(index));
  return std::optional<LinkInfo>(ToLinkInfo(l.get()));
}

Result<std::vector<LinkInfo>> Netlink::ListLinks() {
  CachePtr cache;
  int err = rtnl_link_alloc_cache(sk_, AF_UNSPEC, cache.out());
  if (err < 0) return NlError(err, "dump links");
  std::vector<LinkInfo> out;
  for (nl_object* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o))
    out.push_back(ToLinkInfo(reinterpret_cast<rtnl_link*>(o)));
  return out;
}

Status Netlink::CreateVeth(const std::string& host, const std::string& peer_name, int peer_ns_fd,
                           int mtu, uint32_t host_group, const std::string& peer_mac) {
  rtnl_link* link = rtnl_link_veth_alloc();
  if (!link) return Status::Error(Reason::kFailed, Domain::kKernel, "allocate veth");
  rtnl_link* peer = rtnl_link_veth_get_peer(link);
  rtnl_link_set_name(link, host.c_str());
  rtnl_link_set_name(peer, peer_name.c_str());
  if (mtu > 0) {
    rtnl_link_set_mtu(link, mtu);
    rtnl_link_set_mtu(peer, mtu);
  }
  if (host_group != 0) rtnl_link_set_group(link, host_group);
  NlAddrPtr mac(peer_mac.size() == 6 ? nl_addr_build(AF_LLC, peer_mac.data(), peer_mac.size()) : nullptr);
  if (mac.get()) rtnl_link_set_addr(peer, mac.get());
  rtnl_link_set_ns_fd(peer, peer_ns_fd);
  int err = rtnl_link_add(sk_, link, NLM_F_CREATE | NLM_F_EXCL);
  rtnl_link_put(peer);
  rtnl_link_veth_release(link);
  if (err < 0) return NlError(err, "create veth " + host + " <-> " + peer_name);
  return Status::Ok();
}

Status Netlink::CreateBridge(const std::string& name, int mtu) {
  LinkPtr l(rtnl_link_alloc());
  rtnl_link_set_name(l.get(), name.c_str());
  rtnl_link_set_type(l.get(), "bridge");
  if (mtu > 0) rtnl_link_set_mtu(l.get(), mtu);
  int err = rtnl_link_add(sk_, l.get(), NLM_F_CREATE | NLM_F_EXCL);
  if (err < 0) return NlError(err, "create bridge " + name);
  return Status::Ok();
}

Status Netlink::CreateVxlan(const std::string& name, uint32_t vni, int port, const IpAddress& local,
                            int underlay_index, int mtu) {
  LinkPtr l(rtnl_link_vxlan_alloc());
  if (!l.get()) return Status::Error(Reason::kFailed, Domain::kKernel, "allocate vxlan");
  rtnl_link_set_name(l.get(), name.c_str());
  rtnl_link_vxlan_set_id(l.get(), vni);
  rtnl_link_vxlan_set_port(l.get(), static_cast<uint32_t>(port));
  NlAddrPtr la(BuildAddr(local, local.family_bits()));
  rtnl_link_vxlan_set_local(l.get(), la.get());
  if (underlay_index > 0) rtnl_link_vxlan_set_link(l.get(), static_cast<uint32_t>(underlay_index));
  rtnl_link_vxlan_disable_learning(l.get());
  if (mtu > 0) rtnl_link_set_mtu(l.get(), mtu);
  int err = rtnl_link_add(sk_, l.get(), NLM_F_CREATE | NLM_F_EXCL);
  if (err < 0) return NlError(err, "create vxlan " + name);
  return Status::Ok();
}

Status Netlink::SetUp(int index, bool proxy_arp) {
  LinkPtr orig(rtnl_link_alloc());
  LinkPtr change(rtnl_link_alloc());
  rtnl_link_set_ifindex(orig.get(), index);
  rtnl_link_set_flags(change.get(), IFF_UP);
  if (proxy_arp) rtnl_link_inet_set_conf(change.get(), IPV4_DEVCONF_PROXY_ARP, 1);
  int err = rtnl_link_change(sk_, orig.get(), change.get(), 0);
  if (err < 0) return NlError(err, "set link #" + std::to_string(index) + " up");
  return Status::Ok();
}

Status Netlink::SetMtu(int index, int mtu) {
  LinkPtr orig(rtnl_link_alloc());
  LinkPtr change(rtnl_link_alloc());
  rtnl_link_set_ifindex(orig.get(), index);
  rtnl_link_set_mtu(change.get(), mtu);
  int err = rtnl_link_change(sk_, orig.get(), change.get(), 0);
  if (err < 0) return NlError(err, "set mtu of link #" + std::to_string(index));
  return Status::Ok();
}

Status Netlink::SetMaster(int index, int master_index) {
  LinkPtr orig(rtnl_link_alloc());
  LinkPtr change(rtnl_link_alloc());
  rtnl_link_set_ifindex(orig.get(), index);
  rtnl_link_set_master(change.get(), master_index);
  int err = rtnl_link_change(sk_, orig.get(), change.get(), 0);
  if (err < 0) return NlError(err, "attach link #" + std::to_string(index) + " to master");
  return Status::Ok();
}

Status Netlink::SetBridgePortFlags(int index, bool hairpin, bool locked) {
  // libnl's bridge af-ops only ride along RTM_NEWLINK; the kernel takes bridge
  // port flags through RTM_SETLINK with family AF_BRIDGE and a nested
  // IFLA_PROTINFO, so build that message directly.
  nl_msg* msg = nlmsg_alloc_simple(RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK);
  if (!msg) return Status::Error(Reason::kFailed, Domain::kKernel, "allocate netlink message");
  ifinfomsg ifi{};
  ifi.ifi_family = AF_BRIDGE;
  ifi.ifi_index = index;
  int err = nlmsg_append(msg, &ifi, sizeof ifi, NLMSG_ALIGNTO);
  nlattr* pi = err < 0 ? nullptr : nla_nest_start(msg, IFLA_PROTINFO | NLA_F_NESTED);
  bool ok = pi && nla_put_u8(msg, IFLA_BRPORT_MODE, hairpin ? 1 : 0) >= 0;
  if (ok && locked)
    ok = nla_put_u8(msg, IFLA_BRPORT_LEARNING, 0) >= 0 && nla_put_u8(msg, IFLA_BRPORT_LOCKED, 1) >= 0;
  if (!ok) {
    nlmsg_free(msg);
    return Status::Error(Reason::kFailed, Domain::kKernel, "build bridge port flags request");
  }
  nla_nest_end(msg, pi);
  err = nl_send_auto(sk_, msg);
  nlmsg_free(msg);
  if (err >= 0) err = nl_wait_for_ack(sk_);
  if (err < 0) return NlError(err, "set bridge port flags on link #" + std::to_string(index));
  return Status::Ok();
}

Status Netlink::AddBridgeFdbStatic(int index, const std::string& mac) {
  if (mac.size() != 6) return Status::Error(Reason::kInvalidArgument, Domain::kKernel, "a MAC address is 6 bytes");
  uint8_t raw[6];
  std::memcpy(raw, mac.data(), sizeof raw);
  nl_msg* msg = nlmsg_alloc_simple(RTM_NEWNEIGH, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE);
  if (!msg) return Status::Error(Reason::kFailed, Domain::kKernel, "allocate netlink message");
  ndmsg nd{};
  nd.ndm_family = AF_BRIDGE;
  nd.ndm_ifindex = index;
  nd.ndm_state = NUD_NOARP;  // static: never ages, not local
  nd.ndm_flags = NTF_MASTER;
  int err = nlmsg_append(msg, &nd, sizeof nd, NLMSG_ALIGNTO);
  if (err < 0 || nla_put(msg, NDA_LLADDR, sizeof raw, raw) < 0) {
    nlmsg_free(msg);
    return Status::Error(Reason::kFailed, Domain::kKernel, "build fdb request");
  }
  err = nl_send_auto(sk_, msg);
  nlmsg_free(msg);
  if (err >= 0) err = nl_wait_for_ack(sk_);
  if (err < 0) return NlError(err, "add the pod's static fdb entry on link #" + std::to_string(index));
  return Status::Ok();
}

Status Netlink::DeleteLink(const std::string& name, bool* existed) {
  if (existed) *existed = false;
  LinkPtr l(rtnl_link_alloc());
  rtnl_link_set_name(l.get(), name.c_str());
  int err = rtnl_link_delete(sk_, l.get());
  if (err == -NLE_NODEV || err == -NLE_OBJ_NOTFOUND) return Status::Ok();
  if (err < 0) return NlError(err, "delete link " + name);
  if (existed) *existed = true;
  return Status::Ok();
}

Status Netlink::AddAddress(int index, const IpPrefix& addr, bool nodad, bool replace) {
  AddrPtr a(rtnl_addr_alloc());
  rtnl_addr_set_ifindex(a.get(), index);
  rtnl_addr_set_family(a.get(), addr.is_v4() ? AF_INET : AF_INET6);
  NlAddrPtr local(BuildAddr(addr.addr(), addr.len()));
  rtnl_addr_set_local(a.get(), local.get());
  rtnl_addr_set_prefixlen(a.get(), addr.len());
  if (nodad) rtnl_addr_set_flags(a.get(), IFA_F_NODAD);
  int err = rtnl_addr_add(sk_, a.get(), replace ? NLM_F_REPLACE : 0);
  if (err < 0) return NlError(err, "add address " + addr.ToString());
  return Status::Ok();
}

Result<std::vector<AddrInfo>> Netlink::ListAddresses(int family) {
  CachePtr cache;
  int err = rtnl_addr_alloc_cache(sk_, cache.out());
  if (err < 0) return NlError(err, "dump addresses");
  std::vector<AddrInfo> out;
  for (nl_object* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* a = reinterpret_cast<rtnl_addr*>(o);
    if (family && rtnl_addr_get_family(a) != family) continue;
    auto ip = FromNlAddr(rtnl_addr_get_local(a));
    if (!ip) continue;
    out.push_back({rtnl_addr_get_ifindex(a), IpPrefix(*ip, rtnl_addr_get_prefixlen(a)),
                   rtnl_addr_get_scope(a)});
  }
  return out;
}

namespace {

rtnl_route* BuildRoute(const RouteSpec& r) {
  rtnl_route* route = rtnl_route_alloc();
  int family = r.dst.is_v4() ? AF_INET : AF_INET6;
  rtnl_route_set_family(route, family);
  NlAddrPtr dst(BuildAddr(r.dst.addr(), r.dst.len()));
  rtnl_route_set_dst(route, dst.get());
  rtnl_route_set_table(route, r.table);
  rtnl_route_set_scope(route, r.scope);
  rtnl_route_set_protocol(route, r.protocol);
  rtnl_route_set_type(route, RTN_UNICAST);
  if (r.priority) rtnl_route_set_priority(route, r.priority);
  if (r.mtu) rtnl_route_set_metric(route, RTAX_MTU, r.mtu);
  rtnl_nexthop* nh = rtnl_route_nh_alloc();
  if (r.oif) rtnl_route_nh_set_ifindex(nh, r.oif);
  if (r.gw) {
    NlAddrPtr gw(BuildAddr(*r.gw, r.gw->family_bits()));
    rtnl_route_nh_set_gateway(nh, gw.get());
  }
  if (r.onlink) rtnl_route_nh_set_flags(nh, RTNH_F_ONLINK);
  rtnl_route_add_nexthop(route, nh);
  return route;
}

}  // namespace

Status Netlink::AddRoute(const RouteSpec& r, bool replace) {
  RoutePtr route(BuildRoute(r));
  int err = rtnl_route_add(sk_, route.get(), NLM_F_CREATE | (replace ? NLM_F_REPLACE : NLM_F_EXCL));
  if (err < 0) return NlError(err, "add route " + r.dst.ToString());
  return Status::Ok();
}

Status Netlink::DeleteRoute(const RouteSpec& r, bool* existed) {
  if (existed) *existed = false;
  RoutePtr route(BuildRoute(r));
  int err = rtnl_route_delete(sk_, route.get(), 0);
  if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV) return Status::Ok();
  if (err < 0) return NlError(err, "delete route " + r.dst.ToString());
  if (existed) *existed = true;
  return Status::Ok();
}

Result<std::vector<RouteSpec>> Netlink::ListRoutes(int family, int table) {
  CachePtr cache;
  int err = rtnl_route_alloc_cache(sk_, family, 0, cache.out());
  if (err < 0) return NlError(err, "dump routes");
  std::vector<RouteSpec> out;
  for (nl_object* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_route*>(o);
    if (table && static_cast<int>(rtnl_route_get_table(r)) != table) continue;
    if (rtnl_route_get_type(r) != RTN_UNICAST) continue;
    RouteSpec s;
    int fam = rtnl_route_get_family(r);
    nl_addr* d = rtnl_route_get_dst(r);
    auto ip = FromNlAddr(d);
    if (ip) {
      s.dst = IpPrefix(*ip, nl_addr_get_prefixlen(d));
    } else {
      // A default route: libnl gives an empty address.
      s.dst = *IpPrefix::Parse(fam == AF_INET6 ? "::/0" : "0.0.0.0/0");
    }
    s.table = static_cast<int>(rtnl_route_get_table(r));
    s.scope = rtnl_route_get_scope(r);
    s.protocol = rtnl_route_get_protocol(r);
    s.priority = static_cast<int>(rtnl_route_get_priority(r));
    if (rtnl_route_get_nnexthops(r) > 0) {
      rtnl_nexthop* nh = rtnl_route_nexthop_n(r, 0);
      s.oif = rtnl_route_nh_get_ifindex(nh);
      s.gw = FromNlAddr(rtnl_route_nh_get_gateway(nh));
      s.onlink = (rtnl_route_nh_get_flags(nh) & RTNH_F_ONLINK) != 0;
    }
    out.push_back(s);
  }
  return out;
}

namespace {

Result<rtnl_neigh*> BuildNeigh(const NeighSpec& n) {
  uint8_t mac[6];
  if (!n.mac.empty() && !ParseMac(n.mac, mac))
    return Status::Error(Reason::kInvalidArgument, Domain::kKernel, "bad MAC address " + n.mac);
  rtnl_neigh* neigh = rtnl_neigh_alloc();
  rtnl_neigh_set_ifindex(neigh, n.index);
  // The destination must be set before the family: libnl derives the family
  // from it and AF_BRIDGE has to win for FDB entries.
  NlAddrPtr dst(BuildAddr(n.dst, n.dst.family_bits()));
  rtnl_neigh_set_dst(neigh, dst.get());
  if (!n.mac.empty()) {
    NlAddrPtr ll(nl_addr_build(AF_LLC, mac, 6));
    rtnl_neigh_set_lladdr(neigh, ll.get());
  }
  rtnl_neigh_set_state(neigh, NUD_PERMANENT);
  if (n.fdb) {
    rtnl_neigh_set_family(neigh, AF_BRIDGE);
    rtnl_neigh_set_flags(neigh, NTF_SELF);
  }
  return neigh;
}

}  // namespace

Status Netlink::AddNeigh(const NeighSpec& n) {
  auto built = BuildNeigh(n);
  if (!built.ok()) return built.status();
  NeighPtr neigh(*built);
  int flags = NLM_F_CREATE | NLM_F_REPLACE;
  if (n.fdb) flags = NLM_F_CREATE | NLM_F_APPEND;  // FDB: append a remote
  int err = rtnl_neigh_add(sk_, neigh.get(), flags);
  if (err == -NLE_EXIST && n.fdb) return Status::Ok();
  if (err < 0) return NlError(err, std::string(n.fdb ? "add fdb " : "add neighbour ") + n.dst.ToString());
  return Status::Ok();
}

Status Netlink::DeleteNeigh(const NeighSpec& n, bool* existed) {
  if (existed) *existed = false;
  auto built = BuildNeigh(n);
  if (!built.ok()) return built.status();
  NeighPtr neigh(*built);
  int err = rtnl_neigh_delete(sk_, neigh.get(), 0);
  if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV) return Status::Ok();
  if (err < 0) return NlError(err, "delete neighbour " + n.dst.ToString());
  if (existed) *existed = true;
  return Status::Ok();
}

Result<std::vector<NeighSpec>> Netlink::ListNeighs(int index, bool fdb) {
  CachePtr cache;
  int err = rtnl_neigh_alloc_cache_flags(sk_, cache.out(), NL_CACHE_AF_ITER);
  if (err < 0) return NlError(err, "dump neighbours");
  std::vector<NeighSpec> out;
  for (nl_object* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* n = reinterpret_cast<rtnl_neigh*>(o);
    if (rtnl_neigh_get_ifindex(n) != index) continue;
    bool is_fdb = rtnl_neigh_get_family(n) == AF_BRIDGE;
    if (is_fdb != fdb) continue;
    if (!(rtnl_neigh_get_state(n) & NUD_PERMANENT) && !fdb) continue;
    auto ip = FromNlAddr(rtnl_neigh_get_dst(n));
    if (!ip) continue;
    NeighSpec s;
    s.index = index;
    s.dst = *ip;
    s.fdb = is_fdb;
    if (nl_addr* ll = rtnl_neigh_get_lladdr(n); ll && nl_addr_get_len(ll) == 6)
      s.mac = FormatMac(static_cast<uint8_t*>(nl_addr_get_binary_addr(ll)));
    out.push_back(s);
  }
  return out;
}

}  // namespace weft::sys
