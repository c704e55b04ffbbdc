#include "overlay/reconcile.h"

#include <linux/rtnetlink.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "overlay/families.h"

namespace weft::overlay {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool SameRoute(const sys::RouteSpec& a, const sys::RouteSpec& b) {
  return a.dst == b.dst && a.gw == b.gw && a.oif == b.oif && a.onlink == b.onlink && a.priority == b.priority;
}

bool OnLink(const LocalView& local, const IpAddress& ip) {
  for (const auto& p : local.uplink_subnets)
    if (p.Contains(ip)) return true;
  return false;
}

// Ranges handed out so far (both families), pairwise disjoint, by first
// address: finds an overlap in O(log n), so 1000 peers cost 1000 lookups
// instead of the half million pairwise checks a list needs. IpAddress orders
// every IPv4 address before every IPv6 one, so the families never meet.
class Claims {
 public:
  // Who holds a range overlapping `p`, or nullptr.
  const std::string* Overlapping(const IpPrefix& p) const {
    IpAddress first = p.Masked().addr(), last = p.Last();
    auto it = by_first_.upper_bound(last);  // ranges starting after `p` cannot overlap
    if (it == by_first_.begin()) return nullptr;
    --it;  // the last range starting at or before p's end; earlier ones end before it starts
    return it->second.last >= first ? &it->second.owner : nullptr;
  }
  // REQUIRES: Overlapping(p) is nullptr.
  void Add(const IpPrefix& p, std::string owner) {
    by_first_.emplace(p.Masked().addr(), Range{p.Last(), std::move(owner)});
  }

 private:
  struct Range {
    IpAddress last;
    std::string owner;
  };
  std::map<IpAddress, Range> by_first_;
};

}  // namespace

std::string NormalizeMac(const std::string& mac) {
  unsigned v[6];
  char extra;
  if (std::sscanf(mac.c_str(), "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &extra) != 6)
    return "";
  uint8_t b[6];
  bool zero = true;
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 0xff) return "";
    b[i] = static_cast<uint8_t>(v[i]);
    zero = zero && b[i] == 0;
  }
  if (zero || (b[0] & 1)) return "";  // all-zero or multicast
  return Lower(FormatMac(b));
}

bool IsAgentRoute(const sys::RouteSpec& r) {
  return r.protocol == sys::kRouteProtoWeft && r.table == RT_TABLE_MAIN && r.gw.has_value();
}

int PeerRoutePriority(const IpPrefix& cidr) {
  // IPv6: the metric the kernel gives a route added without one (1024,
  // IP6_RT_PRIO_USER), so a dump matches what was asked for.
  if (!cidr.is_v4()) return kIpv6DefaultRouteMetric;
  if (cidr.len() == 0) return 0;
  const IpAddress net = cidr.Masked().addr();
  const uint8_t* b = net.bytes();
  const uint32_t a = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  // Below 2^31 (the kernel's u32 is reported as an int here): a /32 drops its top bit.
  return static_cast<int>((a >> (32 - cidr.len())) & 0x7fffffffu);
}

namespace {

// The desired state as ComputeDesired builds it, peer by peer: what each
// peer adds (routes, ARP, FDB, overlay filter admissions, host-gw
// entries), the ranges claimed so far, and why a peer or CIDR was left out.
class DesiredBuilder {
 public:
  explicit DesiredBuilder(const LocalView& local) : local_(local) {
    for (const auto& c : local.pod_cidrs) {
      if (claimed_.Overlapping(c)) continue;  // one per family; never two
      claimed_.Add(c, local.name);
      (c.is_v4() ? local_v4_ : local_v6_) = true;
    }
    check_hostgw_ = local.backend != Backend::kVxlan && !local.uplink_name.empty();
    if (check_hostgw_)
      for (const auto& c : local.pod_cidrs) hostgw_.insert({c.Masked(), local.uplink_name, ""});
  }

  void AddPeer(const std::string& name, const NodeInfo& peer) {
    if (!peer.host_ip) return Skip(name, "no host IP published");
    if (*peer.host_ip == local_.host_ip) return Skip(name, "claims this node's host IP " + local_.host_ip.ToString());
    // The peer's underlay addresses: what its VXLAN packets come from.
    underlay_ = {*peer.host_ip};
    if (peer.host_ip6 && *peer.host_ip6 != *peer.host_ip) underlay_.push_back(*peer.host_ip6);
    Admit(std::nullopt);
    // The peer's own addresses as inner sources too: a hostNetwork server
    // on the peer answers a pod of this node from the address the pod
    // connected to, over VXLAN (the peer routes this node's pod CIDRs
    // there) whenever that connection was not masqueraded (IPv6 on a
    // cluster whose masquerade knows only IPv4 CIDRs). Found by the real
    // cluster's dual-stack Granular Checks (docs/security.md).
    for (const auto& a : underlay_) Admit(IpPrefix(a, a.is_v6() ? 128 : 32));
    bool routed_v4 = false, routed_v6 = false;
    for (const auto& raw : peer.pod_cidrs) {
      const IpPrefix cidr = raw.Masked();
      if (RoutePodCidr(name, peer, cidr)) (cidr.is_v4() ? routed_v4 : routed_v6) = true;
    }
    d_.peers += routed_v4 || routed_v6;
    d_.peers_v4 += routed_v4;
    d_.peers_v6 += routed_v6;
  }

  Desired Finish() && {
    d_.state.filter.assign(admitted_.begin(), admitted_.end());
    d_.state.hostgw.assign(hostgw_.begin(), hostgw_.end());
    return std::move(d_);
  }

 private:
  void Skip(const std::string& name, const std::string& why) { d_.skipped.push_back(name + ": " + why); }

  // The overlay filter admits `pods` (nullopt: the address alone) from each
  // of the current peer's underlay addresses.
  void Admit(const std::optional<IpPrefix>& pods) {
    if (local_.vxlan_index == 0) return;
    for (const auto& a : underlay_) admitted_.insert({a, pods});
  }

  // One pod CIDR of a peer: a direct route when the backend allows it and
  // the peer is on the link, else a VXLAN route with its ARP and FDB
  // entries. False, with the reason in `skipped`, when it is not routed.
  bool RoutePodCidr(const std::string& name, const NodeInfo& peer, const IpPrefix& cidr) {
    const bool v6 = !cidr.is_v4();
    if (!(v6 ? local_v6_ : local_v4_)) {
      Skip(name, "pod CIDR " + cidr.ToString() + ": this node has no " + FamilyName(v6) + " pod CIDR");
      return false;
    }
    if (const std::string* owner = claimed_.Overlapping(cidr)) {
      Skip(name, "pod CIDR " + cidr.ToString() + " overlaps " + *owner + "'s");
      return false;
    }
    std::optional<IpAddress> next_hop = UnderlayAddress(peer, v6);
    const bool direct = local_.backend != Backend::kVxlan && next_hop && OnLink(local_, *next_hop);
    if (local_.backend == Backend::kHostGw && !direct) {
      Skip(name, next_hop ? "host " + next_hop->ToString() + " is not on this node's link (host-gw)"
                          : std::string("no ") + FamilyName(v6) + " host address published for pod CIDR " +
                                cidr.ToString() + " (host-gw)");
      return false;
    }
    sys::RouteSpec r;
    r.dst = cidr;
    r.table = RT_TABLE_MAIN;
    r.protocol = sys::kRouteProtoWeft;
    r.scope = RT_SCOPE_UNIVERSE;
    r.priority = PeerRoutePriority(cidr);
    if (!(direct ? RouteDirect(peer, cidr, *next_hop, r) : RouteOverVxlan(name, peer, cidr, r))) return false;
    claimed_.Add(cidr, name);
    Admit(cidr);
    return true;
  }

  bool RouteDirect(const NodeInfo& peer, const IpPrefix& cidr, const IpAddress& next_hop, sys::RouteSpec r) {
    r.gw = next_hop;
    r.oif = local_.uplink_index;
    d_.state.routes.push_back(r);
    if (std::string mac = NormalizeMac(peer.host_mac); check_hostgw_ && !mac.empty()) {
      hostgw_.insert({cidr, local_.uplink_name, ""});
      hostgw_.insert({cidr, "", mac});
    }
    ++d_.direct_peers;
    return true;
  }

  bool RouteOverVxlan(const std::string& name, const NodeInfo& peer, const IpPrefix& cidr, sys::RouteSpec r) {
    std::string mac = NormalizeMac(peer.vtep_mac);
    if (mac.empty()) {
      Skip(name, "no VTEP MAC published yet");
      return false;
    }
    if (local_.vxlan_index == 0) {
      Skip(name, "no local VXLAN device");
      return false;
    }
    // The FDB entry's remote is of the underlay's family, whatever the
    // pod CIDR's: IPv6 pod traffic rides an IPv4 underlay and back.
    const bool underlay_v6 = local_.host_ip.is_v6();
    std::optional<IpAddress> remote = UnderlayAddress(peer, underlay_v6);
    if (!remote) {
      Skip(name, std::string("no ") + FamilyName(underlay_v6) +
                     " host address published (this node's VXLAN runs over " + FamilyName(underlay_v6) + ")");
      return false;
    }
    r.gw = cidr.addr();
    r.oif = local_.vxlan_index;
    r.onlink = true;
    d_.state.routes.push_back(r);
    d_.state.arp.push_back({local_.vxlan_index, cidr.addr(), mac, false});
    if (fdb_seen_.insert({mac, *remote}).second) d_.state.fdb.push_back({local_.vxlan_index, *remote, mac, true});
    ++d_.vxlan_peers;
    return true;
  }

  const LocalView& local_;
  Desired d_;
  Claims claimed_;
  bool local_v4_ = false, local_v6_ = false;
  bool check_hostgw_ = false;
  std::vector<IpAddress> underlay_;  // the current peer's (AddPeer)
  std::set<std::pair<std::string, IpAddress>> fdb_seen_;
  std::set<FilterEntry> admitted_;  // the overlay filter's, deduplicated (two peers may share an address)
  std::set<HostGwEntry> hostgw_;
};

}  // namespace

Desired ComputeDesired(const LocalView& local, const PeerMap& peers) {
  DesiredBuilder b(local);
  for (const auto& [name, peer] : peers)
    if (name != local.name) b.AddPeer(name, peer);
  return std::move(b).Finish();
}

Plan Diff(const KernelState& want, const KernelState& have) {
  Plan p;
  // Routes, keyed by destination and metric (the kernel's key; a replace
  // keeps routes to the same destination with another metric).
  std::map<std::pair<IpPrefix, int>, const sys::RouteSpec*> have_routes;
  for (const auto& r : have.routes) have_routes.emplace(std::make_pair(r.dst, r.priority), &r);
  std::map<IpPrefix, int> wanted;  // destination -> metric
  for (const auto& r : want.routes) {
    wanted.emplace(r.dst, r.priority);
    auto it = have_routes.find({r.dst, r.priority});
    if (it == have_routes.end() || !SameRoute(*it->second, r)) p.route_upserts.push_back(r);
  }
  for (const auto& r : have.routes) {
    auto it = wanted.find(r.dst);
    if (it == wanted.end() || it->second != r.priority) p.route_deletes.push_back(r);
  }

  // ARP, keyed by IP.
  std::map<IpAddress, std::string> have_arp;
  for (const auto& n : have.arp) have_arp[n.dst] = Lower(n.mac);
  std::set<IpAddress> wanted_arp;
  for (const auto& n : want.arp) {
    wanted_arp.insert(n.dst);
    auto it = have_arp.find(n.dst);
    if (it == have_arp.end() || it->second != Lower(n.mac)) p.arp_upserts.push_back(n);
  }
  for (const auto& n : have.arp)
    if (!wanted_arp.count(n.dst)) p.arp_deletes.push_back(n);

  // The overlay filter's admissions, as sets.
  std::set<FilterEntry> have_filter(have.filter.begin(), have.filter.end());
  std::set<FilterEntry> want_filter(want.filter.begin(), want.filter.end());
  for (const auto& e : want_filter)
    if (!have_filter.count(e)) p.filter_adds.push_back(e);
  for (const auto& e : have_filter)
    if (!want_filter.count(e)) p.filter_deletes.push_back(e);

  std::set<HostGwEntry> have_gw(have.hostgw.begin(), have.hostgw.end());
  std::set<HostGwEntry> want_gw(want.hostgw.begin(), want.hostgw.end());
  for (const auto& e : want_gw)
    if (!have_gw.count(e)) p.hostgw_adds.push_back(e);
  for (const auto& e : have_gw)
    if (!want_gw.count(e)) p.hostgw_deletes.push_back(e);

  // FDB, keyed by (MAC, remote).
  std::set<std::pair<std::string, IpAddress>> have_fdb, wanted_fdb;
  for (const auto& n : have.fdb) have_fdb.insert({Lower(n.mac), n.dst});
  for (const auto& n : want.fdb) {
    wanted_fdb.insert({Lower(n.mac), n.dst});
    if (!have_fdb.count({Lower(n.mac), n.dst})) p.fdb_adds.push_back(n);
  }
  for (const auto& n : have.fdb)
    if (!wanted_fdb.count({Lower(n.mac), n.dst})) p.fdb_deletes.push_back(n);
  return p;
}

}  // namespace weft::overlay
