#include "plugin/pod_state.h"

#include <sys/socket.h>

#include <algorithm>
#include <set>

#include "base/strings.h"
#include "plugin/config.h"
#include "plugin/node_firewall.h"
#include "plugin/routed.h"
#include "sys/files.h"
#include "sys/nft_query.h"
#include "sys/sysctl.h"

namespace weft::plugin {
namespace {

int ModeIndex(fw::GuardMode m) { return m == fw::GuardMode::kRouted ? 0 : 1; }

std::string ProxyArpKey(const std::string& port) { return "net/ipv4/conf/" + port + "/proxy_arp"; }
std::string Ipv6OffKey(const std::string& port) { return "net/ipv6/conf/" + port + "/disable_ipv6"; }

const sys::LinkInfo* FindLink(const std::vector<sys::LinkInfo>& links, const std::string& name) {
  auto it = std::find_if(links.begin(), links.end(), [&](const sys::LinkInfo& l) { return l.name == name; });
  return it == links.end() ? nullptr : &*it;
}

// The rows PlanPodRepairs keeps, each with its host veth.
template <typename F>
void ForEachKept(const std::vector<ipam::PodRecord>& rows, const std::vector<sys::LinkInfo>& links, F f) {
  for (const auto& r : rows) {
    if (r.state != ipam::kStateReady || (!r.ip_v4 && !r.ip_v6)) continue;
    const sys::LinkInfo* l = FindLink(links, r.host_ifname);
    if (l) f(r, *l, l->master != 0 ? fw::GuardMode::kBridge : fw::GuardMode::kRouted);
  }
}

std::string Attachment(const ipam::PodRecord& r) { return r.container_id + "/" + r.ifname; }

std::string GuardTableName(fw::GuardMode m) { return std::string("table netdev ") + fw::GuardTable(m); }

}  // namespace

std::vector<std::string> PodSysctlKeys(const std::vector<ipam::PodRecord>& rows,
                                       const std::vector<sys::LinkInfo>& links) {
  std::vector<std::string> keys;
  ForEachKept(rows, links, [&](const ipam::PodRecord& r, const sys::LinkInfo& l, fw::GuardMode mode) {
    if (mode == fw::GuardMode::kRouted && r.ip_v4) keys.push_back(ProxyArpKey(l.name));
    if (mode == fw::GuardMode::kBridge || !r.ip_v6) keys.push_back(Ipv6OffKey(l.name));
  });
  return keys;
}

std::vector<PodRepair> PlanPodRepairs(const std::vector<ipam::PodRecord>& rows, const PodKernelView& k) {
  std::vector<PodRepair> tables, out;
  bool table_planned[2] = {false, false};
  ForEachKept(rows, k.links, [&](const ipam::PodRecord& r, const sys::LinkInfo& l, fw::GuardMode mode) {
    const int m = ModeIndex(mode);
    PodRepair base;
    base.subject = Attachment(r);
    base.mode = mode;
    base.link_index = l.index;
    base.port = l.name;
    if (!k.guard_installed[m]) {
      if (!table_planned[m]) {
        PodRepair t = base;
        t.object = "guard-table";
        t.subject = GuardTableName(mode);
        t.what = "source guard " + GuardTableName(mode) + " (its shared chains)";
        tables.push_back(std::move(t));
        table_planned[m] = true;
      }
    } else if (!k.bound[m].count(l.name)) {
      PodRepair c = base;
      c.object = "guard-chain";
      c.what = "source guard chain " + l.name + " in " + GuardTableName(mode);
      c.binding = GuardBinding(mode, r);
      out.push_back(std::move(c));
    }
    if (mode == fw::GuardMode::kRouted) {
      for (const auto* ip : {&r.ip_v4, &r.ip_v6}) {
        if (!*ip) continue;
        sys::RouteSpec want = HostRoute((*ip)->addr(), l.index);
        bool have = std::any_of(k.routes.begin(), k.routes.end(), [&](const sys::RouteSpec& x) {
          return x.dst == want.dst && x.oif == l.index && !x.gw;
        });
        if (have) continue;
        PodRepair p = base;
        p.object = "pod-route";
        p.what = "host route " + want.dst.ToString() + " dev " + l.name;
        p.route = want;
        out.push_back(std::move(p));
      }
    }
    auto differs = [&](const std::string& key, const char* want) {
      auto it = k.sysctls.find(key);
      return it != k.sysctls.end() && it->second != want;
    };
    if (mode == fw::GuardMode::kRouted && r.ip_v4 && differs(ProxyArpKey(l.name), "1")) {
      PodRepair p = base;
      p.object = "pod-proxy-arp";
      p.what = "proxy ARP on " + l.name;
      out.push_back(std::move(p));
    }
    if ((mode == fw::GuardMode::kBridge || !r.ip_v6) && differs(Ipv6OffKey(l.name), "1")) {
      PodRepair p = base;
      p.object = "pod-ipv6-off";
      p.what = "IPv6 off on " + l.name;
      out.push_back(std::move(p));
    }
  });
  tables.insert(tables.end(), std::make_move_iterator(out.begin()), std::make_move_iterator(out.end()));
  return tables;
}

Result<PodKernelView> ReadPodKernel(sys::Netlink& nl, const std::vector<ipam::PodRecord>& rows) {
  PodKernelView k;
  WEFT_ASSIGN_OR_RETURN(k.links, nl.ListLinks());
  for (int fam : {AF_INET, AF_INET6}) {
    WEFT_ASSIGN_OR_RETURN(auto rs, nl.ListRoutes(fam));
    for (auto& r : rs)
      if (r.protocol == sys::kRouteProtoWeft) k.routes.push_back(std::move(r));
  }
  for (const auto& key : PodSysctlKeys(rows, k.links))
    if (auto v = sys::ReadSysctl(key); v.ok()) k.sysctls[key] = std::string(Trim(*v));
  for (fw::GuardMode mode : {fw::GuardMode::kRouted, fw::GuardMode::kBridge}) {
    const int m = ModeIndex(mode);
    WEFT_ASSIGN_OR_RETURN(auto comments, sys::NftRuleComments(fw::GuardFamily(mode), fw::GuardTable(mode), "pod"));
    k.guard_installed[m] = !comments.empty() && comments[0] == fw::GuardMarker(mode);
    if (!k.guard_installed[m]) continue;
    WEFT_ASSIGN_OR_RETURN(auto bound, fw::BoundPorts(mode));
    k.bound[m].insert(bound.begin(), bound.end());
  }
  return k;
}

std::vector<PodRepairResult> ApplyPodRepairs(sys::Netlink& nl, ipam::Store& store, const std::string& lock_dir,
                                             const std::vector<PodRepair>& plan) {
  std::vector<PodRepairResult> out;
  std::vector<fw::PortBinding> chains[2];
  std::vector<size_t> chain_results[2];
  bool prune = false;
  for (const auto& p : plan) {
    Status st;
    if (p.object == "guard-table") {
      st = EnsureGuardOfNode(p.mode, lock_dir, store);
      prune = true;
    } else if (p.object == "guard-chain") {
      // All of a mode's chains in one transaction, below.
      chains[ModeIndex(p.mode)].push_back(p.binding);
      chain_results[ModeIndex(p.mode)].push_back(out.size());
    } else if (p.object == "pod-route") {
      st = nl.AddRoute(*p.route, /*replace=*/true);
    } else if (p.object == "pod-proxy-arp") {
      // As ADD sets it: in the link-up message (no /proc/sys write, so it
      // works where /proc/sys is read-only).
      st = nl.SetUp(p.link_index, /*proxy_arp=*/true);
    } else if (p.object == "pod-ipv6-off") {
      st = sys::DisableIpv6(p.port);
    }
    out.push_back({p, st});
  }
  for (int m = 0; m < 2; ++m) {
    if (chains[m].empty()) continue;
    const fw::GuardMode mode = m == 0 ? fw::GuardMode::kRouted : fw::GuardMode::kBridge;
    Status st = fw::BindPorts(mode, chains[m]);
    // Before Linux 6.16 one port a DEL removed meanwhile fails the whole
    // transaction (ENOENT): bind what is still there, one by one.
    if (!st.ok())
      for (size_t i = 0; i < chains[m].size(); ++i) out[chain_results[m][i]].status = fw::BindPort(mode, chains[m][i]);
    prune = true;
  }
  if (prune) {
    // A chain bound for a port a DEL removed meanwhile (Linux 6.16+).
    PodRepair p;
    p.object = "guard-prune";
    p.what = "source guard chains of ports gone";
    auto n = PruneGuardOfNode(nl);
    out.push_back({std::move(p), n.status()});
  }
  return out;
}

std::vector<ipam::PodRecord> ReadyInBoth(std::vector<ipam::PodRecord> first,
                                        const std::vector<ipam::PodRecord>& second) {
  std::set<std::pair<std::string, std::string>> ready;
  for (const auto& r : second)
    if (r.state == ipam::kStateReady) ready.insert({r.container_id, r.ifname});
  std::erase_if(first, [&](const ipam::PodRecord& r) {
    return r.state != ipam::kStateReady || !ready.count({r.container_id, r.ifname});
  });
  return first;
}

Result<std::vector<PodRepairResult>> KeepPodState(const KeepOptions& opts) {
  if (!sys::PathExists(opts.data_dir + "/ipam.db")) return std::vector<PodRepairResult>{};
  WEFT_ASSIGN_OR_RETURN(ipam::Store store, ipam::Store::Open(opts.data_dir));
  WEFT_ASSIGN_OR_RETURN(auto rows, store.ListPods(opts.network));
  WEFT_ASSIGN_OR_RETURN(sys::Netlink nl, sys::Netlink::Open());
  WEFT_ASSIGN_OR_RETURN(auto kernel, ReadPodKernel(nl, rows));
  // The rows again, after the kernel: a DEL marks its row deleting before
  // it destroys anything (teardown.h), so a row ready in both reads was
  // ready all through the kernel's, and what was missing then is not a
  // DEL's doing. Planned from the first read alone, a port whose chain a
  // DEL had just destroyed got it back, and kept it once the DEL deleted
  // the port (found on the real cluster: stale chains after pod waves).
  WEFT_ASSIGN_OR_RETURN(auto again, store.ListPods(opts.network));
  rows = ReadyInBoth(std::move(rows), again);
  auto plan = PlanPodRepairs(rows, kernel);
  if (plan.empty()) return std::vector<PodRepairResult>{};
  return ApplyPodRepairs(nl, store, opts.data_dir, plan);
}

}  // namespace weft::plugin
