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

Desired ComputeDesired(const LocalView& local, const PeerMap& peers) {
  Desired d;
  Claims claimed;
  bool local_v4 = false, local_v6 = false;
  for (const auto& c : local.pod_cidrs) {
    if (claimed.Overlapping(c)) continue;  // one per family; never two
    claimed.Add(c, local.name);
    (c.is_v4() ? local_v4 : local_v6) = true;
  }
  const bool underlay_v6 = local.host_ip.is_v6();
  std::set<std::pair<std::string, IpAddress>> fdb_seen;
  std::set<FilterEntry> admitted;  // the overlay filter's, deduplicated (two peers may share an address)
  std::set<HostGwEntry> hostgw;
  const bool check_hostgw = local.backend != Backend::kVxlan && !local.uplink_name.empty();
  if (check_hostgw)
    for (const auto& c : local.pod_cidrs) hostgw.insert({c.Masked(), local.uplink_name, ""});
  for (const auto& [name, peer] : peers) {
    if (name == local.name) continue;
    // A named copy: clang 14 cannot capture structured bindings.
    const std::string& peer_name = name;
    auto skip = [&](const std::string& why) { d.skipped.push_back(peer_name + ": " + why); };
    if (!peer.host_ip) {
      skip("no host IP published");
      continue;
    }
    if (*peer.host_ip == local.host_ip) {
      skip("claims this node's host IP " + local.host_ip.ToString());
      continue;
    }
    // The peer's underlay addresses: what its VXLAN packets come from.
    std::vector<IpAddress> underlay = {*peer.host_ip};
    if (peer.host_ip6 && *peer.host_ip6 != *peer.host_ip) underlay.push_back(*peer.host_ip6);
    auto admit = [&](const std::optional<IpPrefix>& pods) {
      if (local.vxlan_index == 0) return;
      for (const auto& a : underlay) admitted.insert({a, pods});
    };
    admit(std::nullopt);
    // The peer's own addresses as inner sources too: a hostNetwork server
    // on the peer answers a pod of this node from the address the pod
    // connected to, over VXLAN (the peer routes this node's pod CIDRs
    // there) whenever that connection was not masqueraded (IPv6 on a
    // cluster whose masquerade knows only IPv4 CIDRs). Found by the real
    // cluster's dual-stack Granular Checks (docs/security.md).
    for (const auto& a : underlay) admit(IpPrefix(a, a.is_v6() ? 128 : 32));
    bool routed_v4 = false, routed_v6 = false;
    for (const auto& raw : peer.pod_cidrs) {
      IpPrefix cidr = raw.Masked();
      const bool v6 = !cidr.is_v4();
      if (!(v6 ? local_v6 : local_v4)) {
        skip("pod CIDR " + cidr.ToString() + ": this node has no " + FamilyName(v6) + " pod CIDR");
        continue;
      }
      if (const std::string* owner = claimed.Overlapping(cidr)) {
        skip("pod CIDR " + cidr.ToString() + " overlaps " + *owner + "'s");
        continue;
      }
      std::optional<IpAddress> next_hop = UnderlayAddress(peer, v6);
      bool direct = local.backend != Backend::kVxlan && next_hop && OnLink(local, *next_hop);
      if (local.backend == Backend::kHostGw && !direct) {
        skip(next_hop ? "host " + next_hop->ToString() + " is not on this node's link (host-gw)"
                      : std::string("no ") + FamilyName(v6) + " host address published for pod CIDR " +
                            cidr.ToString() + " (host-gw)");
        continue;
      }
      sys::RouteSpec r;
      r.dst = cidr;
      r.table = RT_TABLE_MAIN;
      r.protocol = sys::kRouteProtoWeft;
      r.scope = RT_SCOPE_UNIVERSE;
      r.priority = PeerRoutePriority(cidr);
      if (direct) {
        r.gw = *next_hop;
        r.oif = local.uplink_index;
        d.state.routes.push_back(r);
        claimed.Add(cidr, name);
        admit(cidr);
        if (std::string mac = NormalizeMac(peer.host_mac); check_hostgw && !mac.empty()) {
          hostgw.insert({cidr, local.uplink_name, ""});
          hostgw.insert({cidr, "", mac});
        }
        (v6 ? routed_v6 : routed_v4) = true;
        ++d.direct_peers;
        continue;
      }
      std::string mac = NormalizeMac(peer.vtep_mac);
      if (mac.empty()) {
        skip("no VTEP MAC published yet");
        continue;
      }
      if (local.vxlan_index == 0) {
        skip("no local VXLAN device");
        continue;
      }
      // The FDB entry's remote is of the underlay's family, whatever the
      // pod CIDR's: IPv6 pod traffic rides an IPv4 underlay and back.
      std::optional<IpAddress> remote = UnderlayAddress(peer, underlay_v6);
      if (!remote) {
        skip(std::string("no ") + FamilyName(underlay_v6) + " host address published (this node's VXLAN runs over " +
             FamilyName(underlay_v6) + ")");
        continue;
      }
      r.gw = cidr.addr();
      r.oif = local.vxlan_index;
      r.onlink = true;
      d.state.routes.push_back(r);
      d.state.arp.push_back({local.vxlan_index, cidr.addr(), mac, false});
      if (fdb_seen.insert({mac, *remote}).second) d.state.fdb.push_back({local.vxlan_index, *remote, mac, true});
      claimed.Add(cidr, name);
      admit(cidr);
      (v6 ? routed_v6 : routed_v4) = true;
      ++d.vxlan_peers;
    }
    d.peers += routed_v4 || routed_v6;
    d.peers_v4 += routed_v4;
    d.peers_v6 += routed_v6;
  }
  d.state.filter.assign(admitted.begin(), admitted.end());
  d.state.hostgw.assign(hostgw.begin(), hostgw.end());
  return d;
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
