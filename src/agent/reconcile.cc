#include "agent/reconcile.h"

#include <linux/rtnetlink.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

namespace weft::agent {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool SameRoute(const sys::RouteSpec& a, const sys::RouteSpec& b) {
  return a.dst == b.dst && a.gw == b.gw && a.oif == b.oif && a.onlink == b.onlink;
}

bool OnLink(const LocalView& local, const IpAddress& ip) {
  for (const auto& p : local.uplink_subnets)
    if (p.Contains(ip)) return true;
  return false;
}

// IPv4 ranges handed out so far, pairwise disjoint, by first address: finds
// an overlap in O(log n), so 1000 peers cost 1000 lookups instead of the
// half million pairwise checks a list needs.
class Claims {
 public:
  // Who holds a range overlapping `p` (IPv4), or nullptr.
  const std::string* Overlapping(const IpPrefix& p) const {
    auto [first, last] = Bounds(p);
    auto it = by_first_.upper_bound(last);  // ranges starting after `p` cannot overlap
    if (it == by_first_.begin()) return nullptr;
    --it;  // the last range starting at or before p's end; earlier ones end before it starts
    return it->second.last >= first ? &it->second.owner : nullptr;
  }
  // REQUIRES: `p` is IPv4 and Overlapping(p) is nullptr.
  void Add(const IpPrefix& p, std::string owner) {
    auto [first, last] = Bounds(p);
    by_first_.emplace(first, Range{last, std::move(owner)});
  }

 private:
  struct Range {
    uint32_t last;
    std::string owner;
  };
  static std::pair<uint32_t, uint32_t> Bounds(const IpPrefix& p) {
    uint32_t mask = p.len() <= 0 ? 0 : p.len() >= 32 ? ~0u : ~0u << (32 - p.len());
    uint32_t first = p.addr().v4_host_order() & mask;
    return {first, first | ~mask};
  }
  std::map<uint32_t, Range> by_first_;
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

Desired ComputeDesired(const LocalView& local, const PeerMap& peers) {
  Desired d;
  Claims claimed;
  if (local.pod_cidr.is_v4()) claimed.Add(local.pod_cidr, local.name);
  std::set<std::pair<std::string, IpAddress>> fdb_seen;
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
    bool any = false;
    for (const auto& raw : peer.pod_cidrs) {
      if (!raw.is_v4()) continue;  // IPv4 overlay only (docs/weftd.md)
      IpPrefix cidr = raw.Masked();
      if (const std::string* owner = claimed.Overlapping(cidr)) {
        skip("pod CIDR " + cidr.ToString() + " overlaps " + *owner + "'s");
        continue;
      }
      bool direct = local.backend != Backend::kVxlan && peer.host_ip->is_v4() && OnLink(local, *peer.host_ip);
      if (local.backend == Backend::kHostGw && !direct) {
        skip("host " + peer.host_ip->ToString() + " is not on this node's link (host-gw)");
        continue;
      }
      sys::RouteSpec r;
      r.dst = cidr;
      r.table = RT_TABLE_MAIN;
      r.protocol = sys::kRouteProtoWeft;
      r.scope = RT_SCOPE_UNIVERSE;
      if (direct) {
        r.gw = *peer.host_ip;
        r.oif = local.uplink_index;
        d.state.routes.push_back(r);
        claimed.Add(cidr, name);
        any = true;
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
      if (!peer.host_ip->is_v4()) {
        skip("IPv6 underlay is not supported");
        continue;
      }
      r.gw = cidr.addr();
      r.oif = local.vxlan_index;
      r.onlink = true;
      d.state.routes.push_back(r);
      d.state.arp.push_back({local.vxlan_index, cidr.addr(), mac, false});
      if (fdb_seen.insert({mac, *peer.host_ip}).second)
        d.state.fdb.push_back({local.vxlan_index, *peer.host_ip, mac, true});
      claimed.Add(cidr, name);
      any = true;
      ++d.vxlan_peers;
    }
    (void)any;
  }
  return d;
}

Plan Diff(const KernelState& want, const KernelState& have) {
  Plan p;
  // Routes, keyed by destination.
  std::map<IpPrefix, const sys::RouteSpec*> have_routes;
  for (const auto& r : have.routes) have_routes.emplace(r.dst, &r);
  std::set<IpPrefix> wanted_dsts;
  for (const auto& r : want.routes) {
    wanted_dsts.insert(r.dst);
    auto it = have_routes.find(r.dst);
    if (it == have_routes.end() || !SameRoute(*it->second, r)) p.route_upserts.push_back(r);
  }
  for (const auto& r : have.routes)
    if (!wanted_dsts.count(r.dst)) p.route_deletes.push_back(r);

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

}  // namespace weft::agent
