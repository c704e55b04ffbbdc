#include "doctor/doctor.h"

#include <time.h>

#include <cstdio>
#include <map>
#include <iterator>
#include <set>
#include <string_view>

namespace weft::doctor {
namespace {

std::string LinkName(const Snapshot& s, int index) {
  for (const auto& l : s.links)
    if (l.index == index) return l.name;
  return "#" + std::to_string(index);
}

std::string DescribeRoute(const Snapshot& s, const sys::RouteSpec& r) {
  std::string out = r.dst.ToString();
  if (r.gw) out += " via " + r.gw->ToString();
  if (r.oif > 0) out += " dev " + LinkName(s, r.oif);
  return out;
}

std::string Attachment(const ipam::PodRecord& r) { return r.container_id + "/" + r.ifname; }

std::string Addresses(const ipam::PodRecord& r) {
  std::string out;
  for (const auto* p : {&r.ip_v4, &r.ip_v6})
    if (*p) out += (out.empty() ? "" : ", ") + (*p)->addr().ToString();
  return out.empty() ? "no address" : out;
}

// Which peer a desired entry is for: pod CIDR gateway / host IP -> node.
struct PeerIndex {
  std::map<IpPrefix, std::string> by_cidr;
  std::map<IpAddress, std::string> by_gw;    // first address of a pod CIDR
  std::map<IpAddress, std::string> by_host;  // underlay address
  std::string For(const IpPrefix& p) const {
    auto it = by_cidr.find(p.Masked());
    return it == by_cidr.end() ? "" : it->second;
  }
  std::string ForGw(const IpAddress& a) const {
    auto it = by_gw.find(a);
    return it == by_gw.end() ? "" : it->second;
  }
  std::string ForHost(const IpAddress& a) const {
    auto it = by_host.find(a);
    return it == by_host.end() ? "" : it->second;
  }
};

// A peer's neighbour entry on the VXLAN device: ARP for IPv4, NDP for IPv6.
std::string NeighEntry(const IpAddress& a) { return a.is_v4() ? "ARP entry" : "NDP entry"; }

PeerIndex IndexPeers(const overlay::PeerMap& peers) {
  PeerIndex idx;
  for (const auto& [name, p] : peers) {
    for (const auto& c : p.pod_cidrs) {
      idx.by_cidr[c.Masked()] = name;
      idx.by_gw[c.Masked().addr()] = name;
    }
    if (p.host_ip) idx.by_host[*p.host_ip] = name;
    if (p.host_ip6) idx.by_host[*p.host_ip6] = name;
  }
  return idx;
}

void DiagnosePeers(const Snapshot& s, const PeerView& v, std::vector<Finding>* out) {
  const overlay::Plan plan = PeerPlan(v);
  const PeerIndex idx = IndexPeers(v.peers);
  const std::string fix = "apply weftd's reconciler plan for this entry";
  auto node = [](const std::string& n) { return n.empty() ? std::string("a node") : "node " + n; };

  std::map<IpPrefix, const sys::RouteSpec*> have_routes;
  for (const auto& r : v.kernel.routes) have_routes.emplace(r.dst, &r);
  for (const auto& r : plan.route_upserts) {
    auto it = have_routes.find(r.dst);
    std::string msg = it == have_routes.end()
                          ? "missing route to " + node(idx.For(r.dst)) + "'s pod CIDR: want " + DescribeRoute(s, r)
                          : "wrong route to " + node(idx.For(r.dst)) + "'s pod CIDR: kernel has " +
                                DescribeRoute(s, *it->second) + ", want " + DescribeRoute(s, r);
    out->push_back({Kind::kPeerMissing, r.dst.ToString(), msg, true, fix});
  }
  for (const auto& r : plan.route_deletes)
    out->push_back({Kind::kPeerStale, r.dst.ToString(),
                    "route " + DescribeRoute(s, r) + " (protocol 201) leads to no live peer in the control plane",
                    true, "delete the route"});

  std::map<IpAddress, std::string> have_arp;
  for (const auto& n : v.kernel.arp) have_arp[n.dst] = n.mac;
  for (const auto& n : plan.arp_upserts) {
    auto it = have_arp.find(n.dst);
    std::string who = node(idx.ForGw(n.dst));
    const std::string entry = NeighEntry(n.dst);
    std::string msg = it == have_arp.end()
                          ? "missing " + entry + " on " + LinkName(s, n.index) + " for " + who + ": " +
                                n.dst.ToString() + " lladdr " + n.mac
                          : "wrong " + entry + " on " + LinkName(s, n.index) + " for " + who + ": " +
                                n.dst.ToString() + " lladdr " + it->second + ", want " + n.mac;
    out->push_back({Kind::kPeerMissing, n.dst.ToString(), msg, true, fix});
  }
  for (const auto& n : plan.arp_deletes)
    out->push_back({Kind::kPeerStale, n.dst.ToString(),
                    NeighEntry(n.dst) + " on " + LinkName(s, n.index) + " " + n.dst.ToString() + " lladdr " + n.mac +
                        " belongs to no live peer",
                    true, "delete the entry"});
  for (const auto& n : plan.fdb_adds)
    out->push_back({Kind::kPeerMissing, n.mac,
                    "missing FDB entry on " + LinkName(s, n.index) + " for " + node(idx.ForHost(n.dst)) + ": " +
                        n.mac + " dst " + n.dst.ToString(),
                    true, fix});
  for (const auto& n : plan.fdb_deletes)
    out->push_back({Kind::kPeerStale, n.mac,
                    "FDB entry on " + LinkName(s, n.index) + " " + n.mac + " dst " + n.dst.ToString() +
                        " belongs to no live peer",
                    true, "delete the entry"});
  // The overlay filter's admissions (table inet weft-overlay).
  auto admission = [](const overlay::FilterEntry& e) {
    return e.peer.ToString() + (e.pods ? " . " + e.pods->ToString() : std::string());
  };
  for (const auto& e : plan.filter_adds)
    out->push_back({Kind::kPeerMissing, admission(e),
                    "missing overlay filter admission for " + node(idx.ForHost(e.peer)) + ": " + admission(e) +
                        (e.pods ? " (VXLAN from it carrying that CIDR's sources is dropped)"
                                : " (VXLAN from it is dropped)"),
                    true, fix});
  // host-gw's check: a pod CIDR checked on the uplink, or bound to a MAC.
  auto gw = [](const overlay::HostGwEntry& e) {
    return e.pods.ToString() + (e.mac.empty() ? " checked on " + e.iface : " from " + e.mac);
  };
  for (const auto& e : plan.hostgw_adds)
    out->push_back({Kind::kPeerMissing, e.pods.ToString(),
                    "missing host-gw check element for " + node(idx.For(e.pods)) + ": " + gw(e), true, fix});
  for (const auto& e : plan.hostgw_deletes)
    out->push_back({Kind::kPeerStale, e.pods.ToString(),
                    "host-gw check element " + gw(e) + " belongs to no live peer", true, "delete the element"});
  for (const auto& e : plan.filter_deletes)
    out->push_back({Kind::kPeerStale, admission(e),
                    "overlay filter admission " + admission(e) + " belongs to no live peer (VXLAN from it is accepted)",
                    true, "delete the element"});
}

void DiagnoseNetpol(const NetpolView& v, std::vector<Finding>* out) {
  const std::string table = std::string("table ") + kNetpolTable;
  const std::string fix = "re-apply weftd's ruleset (GET /netpol/ruleset) as one nft transaction";
  if (!v.enforced) {
    if (v.have)
      out->push_back({Kind::kNetpolMismatch, table,
                      table + " is in the kernel (" + std::to_string(v.have->chains.size()) +
                          " chain(s)) but weftd at " + v.weftd +
                          " does not enforce NetworkPolicy: its rules are left over and still filter this node's pods",
                      false,
                      "if network policy was turned off on purpose, delete it: nft delete " + table +
                          " (--fix only re-applies what weftd wants)"});
    return;
  }
  if (!v.have) {
    size_t maps = 0;
    for (const auto& [n, s] : v.want.sets) maps += s.map ? 1 : 0;
    const std::string wants = v.want_listed ? " (it wants " + std::to_string(v.want.chains.size()) + " chain(s), " +
                                                  std::to_string(v.want.sets.size() - maps) + " set(s), " +
                                                  std::to_string(maps) + " map(s))"
                                            : "";
    out->push_back({Kind::kNetpolMismatch, table,
                    table + " is missing from the kernel although weftd enforces NetworkPolicy" + wants +
                        ": this node's pods are not isolated, and pending pods are not held back",
                    true, fix});
    return;
  }
  if (!v.want_listed) return;  // present; its contents are not compared here
  NftTableDiff d = DiffNftTables(v.want, *v.have);
  if (d.empty()) return;
  Finding f{Kind::kNetpolMismatch, table, table + " differs from weftd's ruleset: " + d.Summary(), true, fix};
  std::vector<std::string> lines = d.Lines();
  for (size_t i = 0; i < lines.size() && i < kMaxDetails; ++i) f.details.push_back(lines[i]);
  if (lines.size() > kMaxDetails)
    f.details.push_back("... and " + std::to_string(lines.size() - kMaxDetails) + " more difference(s)");
  out->push_back(std::move(f));
}

void DiagnoseServices(const ServicesView& v, std::vector<Finding>* out) {
  const std::string table = std::string("table ") + kServicesTable;
  const std::string fix = "re-apply weftd's Service ruleset (GET /services/ruleset) as one nft transaction";
  if (!v.serving) {
    if (v.have)
      out->push_back({Kind::kServicesMismatch, table,
                      table + " is in the kernel (" + std::to_string(v.have->chains.size()) + " chain(s)) but weftd at " +
                          v.weftd + " does not run the Service proxy: its rules are left over and still DNAT "
                                    "Service traffic",
                      false,
                      "if the proxy was turned off on purpose (kube-proxy serves Services again), delete it: nft "
                      "delete " + table});
    return;
  }
  if (!v.have) {
    out->push_back({Kind::kServicesMismatch, table,
                    table + " is missing from the kernel although weftd's Service proxy is on (it wants " +
                        std::to_string(v.want.chains.size()) + " chain(s)): no Service is served on this node",
                    true, fix});
    return;
  }
  for (const ServiceDiff& d : DiffServicesTables(v.want, *v.have)) {
    Finding f{Kind::kServicesMismatch, "", "", true, fix};
    if (d.service.empty()) {
      f.subject = table;
      f.message = table + "'s fixed part (maps, base and shared chains) differs from weftd's";
    } else if (d.service == "?") {
      f.subject = table + " no-endpoint entries";
      f.message = table + ": entries of a Service without usable endpoints (their Service is not named in the "
                          "table) differ from weftd's";
    } else {
      f.subject = "Service " + d.service;
      f.message = "Service " + d.service + ": its rules in " + table + " are missing or stale (" +
                  std::to_string(d.lines.size()) + " difference(s) from weftd's)";
    }
    for (size_t i = 0; i < d.lines.size() && i < kMaxDetails; ++i) f.details.push_back(d.lines[i]);
    if (d.lines.size() > kMaxDetails)
      f.details.push_back("... and " + std::to_string(d.lines.size() - kMaxDetails) + " more difference(s)");
    out->push_back(std::move(f));
  }
}

}  // namespace

std::map<std::string, std::vector<std::string>> HostPortView(const std::string& table,
                                                             const std::vector<fw::HostPortRule>& rules) {
  auto v = TransactionChainComments(fw::NftHostPortTransaction(table, rules));
  for (const auto& e : fw::NftHostPortElements(rules)) v["map " + e.set].push_back(fw::NftElementText(e));
  std::vector<sys::NftElement> src;
  for (const auto& p : fw::NftHostPortSources(rules)) {
    auto es = fw::NftSourceElements(p);
    src.insert(src.end(), es.begin(), es.end());
  }
  if (!src.empty()) v["sources"] = fw::NftIntervals(src);
  return v;
}

std::map<std::string, std::vector<std::string>> TransactionChainComments(const sys::nft::Transaction& tx) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& op : tx.ops()) {
    if (op.verb != sys::nft::Verb::kAdd && op.verb != sys::nft::Verb::kCreate) continue;
    if (const auto* c = std::get_if<sys::nft::Chain>(&op.object)) out[c->name];
    if (const auto* r = std::get_if<sys::nft::Rule>(&op.object))
      if (!r->comment.empty()) out[r->chain].push_back(r->comment);
  }
  return out;
}

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kVanishedAttachment: return "vanished-attachment";
    case Kind::kMissingVeth: return "missing-veth";
    case Kind::kMissingNetns: return "missing-netns";
    case Kind::kStuckAttachment: return "stuck-attachment";
    case Kind::kOrphanVeth: return "orphan-veth";
    case Kind::kStaleHostRoute: return "stale-host-route";
    case Kind::kDuplicateAddress: return "duplicate-address";
    case Kind::kRulesetMismatch: return "ruleset-mismatch";
    case Kind::kPeerMissing: return "peer-entry-missing";
    case Kind::kPeerStale: return "peer-entry-stale";
    case Kind::kNetpolMismatch: return "netpol-mismatch";
    case Kind::kServicesMismatch: return "services-table";
    case Kind::kPodStateMissing: return "pod-state-missing";
  }
  return "unknown";
}

std::optional<int64_t> ParseSqliteTime(const std::string& ts) {
  struct tm tm = {};
  char extra;
  if (std::sscanf(ts.c_str(), "%d-%d-%d %d:%d:%d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec, &extra) != 6)
    return std::nullopt;
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31) return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm));
}

overlay::Plan PeerPlan(const PeerView& v) {
  return overlay::Diff(overlay::ComputeDesired(v.local, v.peers).state, v.kernel);
}

namespace {

// Each row against the kernel: a vanished attachment (and nothing else), or
// any of a missing veth, a missing netns, a stuck ADD or DEL.
void DiagnoseAttachments(const Snapshot& s, std::vector<Finding>* out) {
  for (const auto& p : s.pods) {
    const auto& r = p.row;
    const std::string who = Attachment(r) + " (" + Addresses(r) + ", veth " + r.host_ifname + ")";
    if (!p.veth_present && !p.netns_alive) {
      out->push_back({Kind::kVanishedAttachment, Attachment(r),
                      "attachment " + who + " is in the database but its veth and its netns " + r.netns +
                          " are both gone",
                      true, "release its address and port mappings (the same teardown as GC)"});
      continue;  // a vanished row is also reported as nothing else
    }
    if (!p.veth_present)
      out->push_back({Kind::kMissingVeth, Attachment(r),
                      "attachment " + who + " has no host veth, but its netns " + r.netns + " still exists", false,
                      "the pod may still be running: let the runtime decide (CHECK reports it, DEL removes it)"});
    if (!p.netns_alive)
      out->push_back({Kind::kMissingNetns, Attachment(r),
                      "attachment " + who + ": its netns " + r.netns + " is gone but the veth is still there", false,
                      "a veth with this name still exists, so the attachment is not certainly gone: run the "
                      "runtime's DEL for it"});
    if (r.state != ipam::kStateReady && p.age_s >= 0 && p.age_s >= s.stuck_after_s)
      out->push_back({Kind::kStuckAttachment, Attachment(r),
                      "attachment " + who + " has been in state \"" + r.state + "\" for " +
                          std::to_string(p.age_s) + " s (an ADD or DEL that died half-way)",
                      false,
                      "its netns or veth still exists: the runtime's DEL or GC of this attachment finishes it"});
  }
}

void DiagnoseDuplicateAddresses(const Snapshot& s, std::vector<Finding>* out) {
  std::map<IpAddress, std::vector<std::string>> owners;
  for (const auto& p : s.pods)
    for (const auto* ip : {&p.row.ip_v4, &p.row.ip_v6})
      if (*ip) owners[(*ip)->addr()].push_back(Attachment(p.row));
  for (const auto& [addr, who] : owners)
    if (who.size() > 1) {
      std::string list;
      for (const auto& w : who) list += (list.empty() ? "" : ", ") + w;
      out->push_back({Kind::kDuplicateAddress, addr.ToString(),
                      "address " + addr.ToString() + " is held by " + std::to_string(who.size()) +
                          " attachments: " + list,
                      false, "which pod really has it is a decision for an operator: DEL the wrong one"});
    }
}

// wft* links that no row names as its host veth.
void DiagnoseOrphanVeths(const Snapshot& s, std::vector<Finding>* out) {
  std::set<std::string> row_veths;
  for (const auto& p : s.pods) row_veths.insert(p.row.host_ifname);
  for (const auto& l : s.links) {
    if (l.name.rfind("wft", 0) != 0 || row_veths.count(l.name)) continue;
    out->push_back({Kind::kOrphanVeth, l.name,
                    "link " + l.name + " (" + (l.kind.empty() ? "link" : l.kind) +
                        ") looks like a weft host veth but no attachment in " + s.data_dir + " owns it",
                    true, "delete the link (an ADD records its row before it creates the veth)"});
  }
}

// What ADD made for a ready attachment and the kernel lacks now.
void DiagnosePodState(const Snapshot& s, std::vector<Finding>* out) {
  for (const auto& m : s.pod_state) {
    std::string effect = m.object == "pod-route"       ? " (the pod is unreachable from this node and the others)"
                         : m.object == "pod-proxy-arp" ? " (the pod's ARP for other addresses goes unanswered)"
                                                       : " (the port gets IPv6 addresses and routes it should not have)";
    out->push_back({Kind::kPodStateMissing, m.attachment,
                    "attachment " + m.attachment + ": " + m.what + " is missing" + effect, true,
                    "put it back as ADD makes it (weftd does so on the kernel's notification)"});
  }
}

// Weft's host routes (protocol 201) to addresses no row holds.
void DiagnoseStaleHostRoutes(const Snapshot& s, std::vector<Finding>* out) {
  std::set<IpAddress> db_addrs;
  for (const auto& p : s.pods)
    for (const auto* ip : {&p.row.ip_v4, &p.row.ip_v6})
      if (*ip) db_addrs.insert((*ip)->addr());
  for (const auto& r : s.host_routes) {
    if (db_addrs.count(r.dst.addr())) continue;
    out->push_back({Kind::kStaleHostRoute, r.dst.ToString(),
                    "host route " + DescribeRoute(s, r) + " (protocol 201) leads to an address the database does "
                    "not have",
                    true, "delete the route"});
  }
}

// Markers `rs` wants that the kernel lacks (`missing`) and holds beyond
// what it wants (`extra`), chain by chain, counting repeats.
void CountRulesetDifferences(const RulesetView& rs, size_t* missing, size_t* extra) {
  std::set<std::string> chains;
  for (const auto& [c, v] : rs.want) chains.insert(c);
  for (const auto& [c, v] : rs.have) chains.insert(c);
  for (const auto& c : chains) {
    std::multiset<std::string> w, h;
    if (auto it = rs.want.find(c); it != rs.want.end()) w.insert(it->second.begin(), it->second.end());
    if (auto it = rs.have.find(c); it != rs.have.end()) h.insert(it->second.begin(), it->second.end());
    for (const auto& x : w) *missing += h.count(x) >= w.count(x) ? 0 : 1;
    for (const auto& x : h) *extra += w.count(x) >= h.count(x) ? 0 : 1;
  }
}

void DiagnoseRulesets(const Snapshot& s, std::vector<Finding>* out) {
  for (const auto& rs : s.rulesets) {
    if (!rs.checked) continue;
    size_t have_n = 0, missing = 0, extra = 0;
    for (const auto& [chain, cs] : rs.have) have_n += cs.size();
    CountRulesetDifferences(rs, &missing, &extra);
    std::string problem;
    if (rs.want.empty() && have_n > 0) {
      problem = "holds " + std::to_string(have_n) + " rule(s) or element(s) but the database has nothing for it";
    } else if (!rs.want.empty() && have_n == 0) {
      problem = "is missing from the kernel although the database needs it";
    } else if (missing + extra > 0) {
      problem = "differs from what the database and config render: " + std::to_string(missing) +
                " rule(s) or element(s) missing, " + std::to_string(extra) + " stale";
    }
    // The source guard is wanted by the pod interfaces themselves, not by a
    // database row.
    const bool guard = rs.what.rfind("source guard", 0) == 0;
    if (guard && !problem.empty()) {
      const auto want = rs.want.find("pod"), have = rs.have.find("pod");
      if (have == rs.have.end()) {
        problem = "is missing: nothing checks the source address of what the pods here send";
      } else if (want == rs.want.end() || want->second != have->second) {
        problem = "is not the ruleset this weft installs";
      } else {
        // Ports lack their chain (unguarded), or chains outlived their ports.
        problem = "does not cover every pod port here: " + std::to_string(missing) +
                  " port(s) without their chain (unguarded), " + std::to_string(extra) + " chain(s) of ports gone";
      }
    }
    if (!problem.empty())
      out->push_back({Kind::kRulesetMismatch, rs.what, rs.what + " " + problem, true,
                      guard ? "install it as ADD does (one nft -f), then bind every attachment's port again "
                              "(one transaction)"
                            : "re-render the ruleset from the database in one atomic batch"});
  }
}

}  // namespace

std::vector<Finding> Diagnose(const Snapshot& s) {
  std::vector<Finding> out;
  // Attachments against the kernel.
  DiagnoseAttachments(s, &out);
  DiagnoseDuplicateAddresses(s, &out);
  DiagnoseOrphanVeths(s, &out);
  DiagnoseStaleHostRoutes(s, &out);
  DiagnosePodState(s, &out);
  DiagnoseRulesets(s, &out);
  if (s.vxlan_device && !s.overlay_filter)
    out.push_back({Kind::kRulesetMismatch, "overlay filter (table inet weft-overlay)",
                   "overlay filter (table inet weft-overlay) is missing: any host that reaches the VXLAN port can "
                   "deliver packets with any pod source to this node's pods",
                   false,
                   "weftd installs it before its VXLAN device and again at every resync (--resync-period): "
                   "restart weftd or wait for the resync"});
  if (s.peers) DiagnosePeers(s, *s.peers, &out);
  if (s.netpol) DiagnoseNetpol(*s.netpol, &out);
  if (s.services) DiagnoseServices(*s.services, &out);
  return out;
}

}  // namespace weft::doctor
