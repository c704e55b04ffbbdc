#include "doctor/doctor_io.h"

#include <sys/socket.h>

#include <chrono>
#include <set>
#include <thread>

#include "agent/control_plane.h"
#include "agent/etcd.h"
#include "agent/kube.h"
#include "doctor/policy.h"
#include "doctor/weftd.h"
#include "etcd/etcd_client.h"
#include "fw/hostport.h"
#include "fw/source_guard.h"
#include "fw/tool.h"
#include "kube/kube_endpoint.h"
#include "overlay/datapath.h"
#include "overlay/families.h"
#include "overlay/filter.h"
#include "plugin/hostports.h"
#include "plugin/node_firewall.h"
#include "plugin/pod_state.h"
#include "plugin/reclaim.h"
#include "policy/netpol_model.h"
#include "sys/exec.h"
#include "sys/files.h"
#include "sys/netns.h"
#include "sys/nft_json.h"
#include "sys/nft_kernel.h"
#include "sys/nft_query.h"
#include "sys/nft_render.h"
#include "sys/nft_set.h"

namespace weft::doctor {
namespace {

int64_t NowS() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Same test as the plugin's AttachmentVanished (sys::IsNetnsGone): only a
// missing path or a file that is not a netns proves the namespace is gone.
bool NetnsAlive(const std::string& path) {
  if (path.empty()) return true;
  auto ns = sys::Netns::Open(path);
  return ns.ok() || !sys::IsNetnsGone(ns.status());
}

Result<overlay::PeerMap> ListEtcdPeers(const Options& o) {
  etcd::EtcdClient client(o.etcd_endpoints, sys::TlsOptions{});
  const std::string key = o.etcd_prefix + "/subnets/";
  WEFT_ASSIGN_OR_RETURN(auto range, client.Range(key, etcd::PrefixRangeEnd(key)));
  overlay::PeerMap peers;
  for (const auto& kv : range.kvs) {
    auto node = agent::DecodeSubnet(o.etcd_prefix, kv);
    if (!node.ok()) continue;  // weftd skips undecodable records the same way
    auto& slot = peers[node->name];
    if (slot.name.empty()) {
      slot = *node;
    } else {
      for (const auto& c : node->pod_cidrs) slot.pod_cidrs.push_back(c);
    }
  }
  return peers;
}

// One complete list through the Kubernetes control plane's own list+watch
// loop: runs it until the store holds a complete list, then stops it.
Result<overlay::PeerMap> ListKubePeers(const Options& o, kube::KubeEndpoint ep) {
  agent::KubeOptions ko;
  ko.endpoint = std::move(ep);
  ko.watch_timeout_seconds = 1;
  auto cp = agent::NewKubeControlPlane(std::move(ko));
  agent::PeerStore store;
  std::atomic<bool> stop{false};
  std::thread t([&] { (void)cp->Run(store, stop); });
  auto snap = store.WaitChange(0, std::chrono::milliseconds(o.control_plane_timeout_ms), stop);
  stop = true;
  store.Notify();
  t.join();
  if (!snap.synced)
    return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                         "no complete node list from the API server within " +
                                                  std::to_string(o.control_plane_timeout_ms) + " ms");
  return snap.peers;
}

Result<std::optional<PeerView>> ReadPeers(const Options& o, sys::Netlink& nl, std::vector<std::string>* notes) {
  overlay::PeerMap peers;
  if (!o.etcd_endpoints.empty()) {
    WEFT_ASSIGN_OR_RETURN(peers, ListEtcdPeers(o));
  } else if (!o.kubeconfig.empty()) {
    WEFT_ASSIGN_OR_RETURN(auto ep, kube::KubeconfigEndpoint(o.kubeconfig, o.weftd_state_dir + "/kubeconfig-data"));
    WEFT_ASSIGN_OR_RETURN(peers, ListKubePeers(o, std::move(ep)));
  } else if (auto ep = kube::InClusterEndpoint(sys::CurrentEnv(), o.service_account_dir); ep.ok()) {
    // In a pod with its service account: kubectl exec ds/weftd -- weftctl doctor.
    notes->push_back("control plane: the pod's service account (" + o.service_account_dir + ")");
    WEFT_ASSIGN_OR_RETURN(peers, ListKubePeers(o, std::move(*ep)));
  } else {
    notes->push_back("peer checks skipped: no control plane given (--etcd-endpoints or --kubeconfig; no service "
                     "account either: " + ep.status().msg() + ")");
    return std::optional<PeerView>();
  }
  PeerView v;
  WEFT_ASSIGN_OR_RETURN(auto up, overlay::DetectUplink(nl, o.iface, o.node_ip));
  v.local.host_ip = up.ip;
  v.local.host_ip6 = up.ip6;
  v.local.uplink_index = up.index;
  v.local.uplink_subnets = up.subnets;
  const overlay::NodeInfo* self = nullptr;
  for (const auto& [name, p] : peers)
    if (o.node_name.empty() ? (p.host_ip && *p.host_ip == up.ip) : name == o.node_name) self = &p;
  v.local.name = self ? self->name : o.node_name;
  // One per family, as weftd keeps them.
  for (bool v6 : {false, true})
    if (auto c = overlay::OfFamily(self ? self->pod_cidrs : std::vector<IpPrefix>{}, v6))
      v.local.pod_cidrs.push_back(c->Masked());
  if (v.local.pod_cidrs.empty() && !o.pod_cidrs.empty()) {
    v.local.pod_cidrs = o.pod_cidrs;
    notes->push_back("the control plane has no record of this node; its pod CIDRs " +
                     overlay::JoinPrefixes(v.local.pod_cidrs) + " come from the conflist");
  }
  if (v.local.pod_cidrs.empty()) {
    notes->push_back("peer checks skipped: this node's pod CIDR is unknown (not in the control plane, no conflist)");
    return std::optional<PeerView>();
  }
  v.local.backend = overlay::Backend::kVxlan;
  if (self && !self->backend.empty()) (void)overlay::ParseBackend(self->backend, &v.local.backend);
  WEFT_ASSIGN_OR_RETURN(auto vx, nl.GetLink(o.vxlan_device));
  v.local.vxlan_index = vx && vx->kind == "vxlan" ? vx->index : 0;
  if (v.local.backend != overlay::Backend::kHostGw && v.local.vxlan_index == 0)
    notes->push_back("no VXLAN device " + o.vxlan_device + ": VXLAN peers cannot be programmed on this node");
  WEFT_ASSIGN_OR_RETURN(auto dnl, sys::Netlink::Open());
  auto dp = overlay::NewKernelDatapath(std::move(dnl), v.local.vxlan_index);
  WEFT_ASSIGN_OR_RETURN(v.kernel, dp->Read());
  v.peers = std::move(peers);
  notes->push_back("control plane: " + std::to_string(v.peers.size()) + " node record(s); this node is " +
                   (v.local.name.empty() ? std::string("unnamed") : v.local.name) + " with pod CIDRs " +
                   overlay::JoinPrefixes(v.local.pod_cidrs));
  return std::optional<PeerView>(std::move(v));
}

// `want` is the desired table's comments by chain; `chains` names every
// chain the table can have (read from the kernel even when none is wanted).
Result<RulesetView> ReadRuleset(const std::string& what, const std::string& table,
                                std::map<std::string, std::vector<std::string>> want,
                                const std::map<std::string, std::vector<std::string>>& chains) {
  RulesetView v;
  v.checked = true;
  v.what = what;
  v.want = std::move(want);
  for (const auto& [chain, unused] : chains) {
    WEFT_ASSIGN_OR_RETURN(auto comments, sys::NftRuleComments(sys::NftFamily::kInet, table, chain));
    if (!comments.empty()) v.have[chain] = std::move(comments);
  }
  return v;
}

// The kernel's table inet weft-netpol as the nftables layer dumps it
// (sys/nft_kernel.h) and renders it in nft's listing; nullopt when there is
// none. `ns`: the namespace to read in (the caller's when null).
Result<std::optional<NftTable>> ReadKernelNetpol(const sys::Netns* ns = nullptr) {
  Result<sys::nft::TableState> dump = sys::nft::OpError("not read", EINVAL);
  auto read = [&] {
    dump = sys::nft::Kernel().Dump(sys::nft::Family::kInet, policy::netpol::kTable);
    return Status::Ok();
  };
  WEFT_RETURN_IF_ERROR(ns ? sys::RunInNetns(*ns, read) : read());
  if (!dump.ok() && dump.status().IsNotFound()) return std::optional<NftTable>();
  if (!dump.ok()) return Status(dump.status()).Prefix(std::string("read table ") + kNetpolTable);
  WEFT_ASSIGN_OR_RETURN(auto t, ParseNftTable(sys::nft::RenderTable(*dump)));
  return std::optional<NftTable>(std::move(t));
}

std::string Chains(const std::optional<NftTable>& t) {
  return t ? std::string("the kernel holds table ") + kNetpolTable + " (" + std::to_string(t->chains.size()) +
                 " chain(s)), which is not compared"
           : std::string("the kernel has no table ") + kNetpolTable;
}

// How one pass of ReadNetpol's comparison ended: with a result in the
// snapshot (a view, or a note or warning saying why there is none), or
// with the need for another pass.
enum class NetpolPass { kDone, kAgain };

// The end of a pass that read both sides: a difference is compared once
// more after `netpol_settle_ms` (the first time only); else the view is kept.
// The kernel is read before the first GET, so a table weftd changes in
// the meantime shows as a difference; the settle pass absorbs that.
NetpolPass SettleOrKeep(const Options& o, NftTable want, std::optional<NftTable> have, bool* settled, Snapshot* s) {
  NetpolView v;
  v.weftd = o.weftd_addr;
  v.want = std::move(want);
  v.have = std::move(have);
  const bool differs = !v.have || !DiffNftTables(v.want, *v.have).empty();
  if (differs && !*settled && o.netpol_settle_ms > 0) {
    *settled = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(o.netpol_settle_ms));
    return NetpolPass::kAgain;
  }
  s->notes.push_back("network policy: compared table " + std::string(kNetpolTable) + " with weftd's ruleset at " +
                     o.weftd_addr + " (" + std::to_string(v.want.chains.size()) + " chain(s), " +
                     std::to_string(v.want.sets.size()) + " set(s) and map(s))");
  s->netpol = std::move(v);
  return NetpolPass::kDone;
}

// One pass: the kernel's table, weftd's ruleset (as nft would list it),
// and weftd's ruleset once more to prove it did not change meanwhile.
NetpolPass ReadNetpolOnce(const Options& o, Weftd& weftd, bool* settled, Snapshot* s) {
  const std::string skipped = "network policy check skipped: ";
  auto have = ReadKernelNetpol();
  if (!have.ok()) {
    s->warnings.push_back(skipped + "cannot read the kernel's table: " + have.status().ToString());
    s->incomplete = true;
    return NetpolPass::kDone;
  }
  auto r1 = weftd.Get("/netpol/ruleset?format=json");
  if (!r1.ok()) {
    // Without weftd there is nothing to compare with. A table in the
    // kernel proves network policy is in use here: then the check is
    // missing, not merely not applicable.
    s->warnings.push_back(skipped + r1.status().msg() + ": " + r1.status().details() + "; " + Chains(*have));
    if (*have) s->incomplete = true;
    return NetpolPass::kDone;
  }
  if (r1->status == 404) {
    NetpolView v;
    v.weftd = o.weftd_addr;
    v.enforced = false;
    v.have = std::move(*have);
    if (!v.have) s->notes.push_back("network policy: weftd at " + o.weftd_addr + " does not enforce it (404), and " +
                                    Chains(v.have));
    s->netpol = std::move(v);
    return NetpolPass::kDone;
  }
  if (r1->status != 200) {
    s->warnings.push_back(skipped + "weftd at " + o.weftd_addr + " answered GET /netpol/ruleset with HTTP " +
                          std::to_string(r1->status) + "; " + Chains(*have));
    s->incomplete = true;
    return NetpolPass::kDone;
  }
  if (auto m = weftd.Get("/metrics"); m.ok() && m->status == 200 && NetpolReadyMetric(m->body) == false) {
    s->warnings.push_back(skipped + "weftd at " + o.weftd_addr +
                          " has not yet enforced network policy from complete lists (weft_netpol_ready 0); " +
                          Chains(*have));
    s->incomplete = true;
    return NetpolPass::kDone;
  }
  auto want = NetpolRulesetTable(r1->body);
  if (!want.ok()) {
    const std::string& det = want.status().details();
    // Whether the table is there at all is still judged (a weftd whose
    // ruleset this doctor cannot read: another release's).
    NetpolView v;
    v.weftd = o.weftd_addr;
    v.want_listed = false;
    v.have = std::move(*have);
    const bool present = v.have.has_value();
    s->netpol = std::move(v);
    s->warnings.push_back((present ? "network policy check incomplete: table inet weft-netpol is in the kernel, but "
                                   : "network policy check incomplete: ") +
                          std::string("weftd's ruleset could not be read to compare: ") +
                          want.status().msg() + (det.empty() ? "" : ": " + det.substr(0, det.find('\n'))));
    s->incomplete = true;
    return NetpolPass::kDone;
  }
  auto r2 = weftd.Get("/netpol/ruleset?format=json");
  if (!r2.ok() || r2->status != 200 || r2->body != r1->body) return NetpolPass::kAgain;  // weftd moved on
  return SettleOrKeep(o, std::move(*want), std::move(*have), settled, s);
}

// The network policy check: weftd's desired ruleset against the kernel's
// table. A difference is compared once more after `netpol_settle_ms`, and
// only a comparison during which weftd's ruleset stayed the same counts.
void ReadNetpol(const Options& o, Snapshot* s) {
  if (o.weftd_addr.empty()) {
    s->notes.push_back("network policy check skipped: --weftd-addr is empty");
    return;
  }
  Weftd weftd(o.weftd_addr);
  bool settled = false;
  for (int attempt = 0; attempt < 4; ++attempt)
    if (ReadNetpolOnce(o, weftd, &settled, s) == NetpolPass::kDone) return;
  s->warnings.push_back("network policy check skipped: weftd's ruleset kept changing while it was compared");
  s->incomplete = true;
}

// The kernel's table inet weft-services as the nftables layer dumps it,
// digested; nullopt when there is none.
Result<std::optional<services::TableDigest>> ReadKernelServices() {
  auto dump = sys::nft::Kernel().Dump(sys::nft::Family::kInet, services::kTable);
  if (!dump.ok() && dump.status().IsNotFound()) return std::optional<services::TableDigest>();
  if (!dump.ok()) return Status(dump.status()).Prefix(std::string("read table ") + kServicesTable);
  return std::optional<services::TableDigest>(services::DigestOf(*dump));
}

// One comparison of weftd's Service ruleset with the kernel's table: the
// kernel read between two GETs that must agree (else weftd moved on: kAgain).
NetpolPass ReadServicesOnce(const Options& o, Weftd& weftd, Snapshot* s, std::optional<ServicesView>* out) {
  const std::string skipped = "Service proxy check skipped: ";
  auto r1 = weftd.Get("/services/ruleset?format=json");
  auto have = ReadKernelServices();
  if (!r1.ok()) {
    // Without weftd nothing to compare with; a table in the kernel proves
    // the proxy is in use here, so then the check is missing.
    if (have.ok() && *have) {
      s->warnings.push_back(skipped + r1.status().msg() + "; the kernel holds table " + kServicesTable);
      s->incomplete = true;
    } else {
      s->notes.push_back(skipped + r1.status().msg());
    }
    return NetpolPass::kDone;
  }
  if (!have.ok()) {
    s->warnings.push_back(skipped + "cannot read the kernel's table: " + have.status().ToString());
    s->incomplete = true;
    return NetpolPass::kDone;
  }
  if (r1->status == 404) {
    ServicesView v;
    v.weftd = o.weftd_addr;
    v.serving = false;
    v.have = std::move(*have);
    if (!v.have)
      s->notes.push_back("Service proxy check skipped: weftd at " + o.weftd_addr +
                         " runs without the Service proxy (GET /services/ruleset: 404), and the kernel has no table " +
                         kServicesTable);
    *out = std::move(v);
    return NetpolPass::kDone;
  }
  if (r1->status != 200) {
    s->warnings.push_back(skipped + "weftd at " + o.weftd_addr + " answered GET /services/ruleset with HTTP " +
                          std::to_string(r1->status) + ": " + r1->body.substr(0, 200));
    s->incomplete = true;
    return NetpolPass::kDone;
  }
  auto want = ServicesRulesetDigest(r1->body);
  if (!want.ok()) {
    s->warnings.push_back(skipped + "weftd's Service ruleset could not be read: " + want.status().ToString());
    s->incomplete = true;
    return NetpolPass::kDone;
  }
  auto r2 = weftd.Get("/services/ruleset?format=json");
  if (!r2.ok() || r2->status != 200 || r2->body != r1->body) return NetpolPass::kAgain;
  ServicesView v;
  v.weftd = o.weftd_addr;
  v.want = std::move(*want);
  v.have = std::move(*have);
  *out = std::move(v);
  return NetpolPass::kDone;
}

// The Service proxy check (services_check.h). A difference is compared once
// more after `netpol_settle_ms`: weftd's own transaction may have been in flight.
void ReadServices(const Options& o, Snapshot* s) {
  if (o.weftd_addr.empty()) {
    s->notes.push_back("Service proxy check skipped: --weftd-addr is empty");
    return;
  }
  Weftd weftd(o.weftd_addr);
  bool settled = false;
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::optional<ServicesView> v;
    if (ReadServicesOnce(o, weftd, s, &v) == NetpolPass::kAgain) continue;
    const bool differs = v && v->serving && (!v->have || !DiffServicesTables(v->want, *v->have).empty());
    if (differs && !settled && o.netpol_settle_ms > 0) {
      settled = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(o.netpol_settle_ms));
      continue;
    }
    if (v && v->serving)
      s->notes.push_back("Service proxy: compared table " + std::string(kServicesTable) + " with weftd's ruleset at " +
                         o.weftd_addr + " (" + std::to_string(v->want.chains.size()) + " chain(s), " +
                         std::to_string(v->want.sets.size()) + " set(s) and map(s))");
    s->services = std::move(v);
    return;
  }
  s->warnings.push_back("Service proxy check skipped: weftd's Service ruleset kept changing while it was compared");
  s->incomplete = true;
}

Result<std::vector<ipam::PodRecord>> ReadRows(const std::string& data_dir, bool* have_db) {
  *have_db = sys::PathExists(data_dir + "/ipam.db");
  if (!*have_db) return std::vector<ipam::PodRecord>{};
  WEFT_ASSIGN_OR_RETURN(auto store, ipam::Store::Open(data_dir));
  WEFT_ASSIGN_OR_RETURN(auto rows, store.ListPods(""));
  for (auto& r : rows)
    if (r.host_ifname.empty()) r.host_ifname = plugin::HostVethName(r.container_id, r.ifname);
  return rows;
}

}  // namespace

namespace {

// Each row with what the kernel says about its veth and netns.
Status ReadPods(const Options& o, sys::Netlink& nl, Snapshot* s, bool* have_db) {
  WEFT_ASSIGN_OR_RETURN(auto rows, ReadRows(o.data_dir, have_db));
  if (!*have_db) s->notes.push_back("no database at " + o.data_dir + "/ipam.db: no attachments recorded");
  const int64_t now = NowS();
  for (auto& r : rows) {
    PodView p;
    WEFT_ASSIGN_OR_RETURN(auto link, nl.GetLink(r.host_ifname));
    p.veth_present = link.has_value();
    p.netns_alive = NetnsAlive(r.netns);
    if (auto t = ParseSqliteTime(r.created)) p.age_s = now - *t;
    p.row = std::move(r);
    s->pods.push_back(std::move(p));
  }
  return Status::Ok();
}

// Weft's host routes: protocol 201, no gateway.
Status ReadHostRoutes(sys::Netlink& nl, Snapshot* s) {
  for (int family : {AF_INET, AF_INET6}) {
    WEFT_ASSIGN_OR_RETURN(auto routes, nl.ListRoutes(family));
    for (auto& r : routes)
      if (r.protocol == sys::kRouteProtoWeft && !r.gw) s->host_routes.push_back(std::move(r));
  }
  return Status::Ok();
}

// The mappings themselves are the elements of the table's maps; the
// hairpin sources the ranges of its -src sets: the kernel's side.
Status ReadHostPortElements(const std::string& table, RulesetView* view) {
  for (const auto& map : fw::NftHostPortMaps()) {
    WEFT_ASSIGN_OR_RETURN(auto have, sys::NftElements(sys::NftFamily::kInet, table, map));
    for (const auto& e : have) view->have["map " + map].push_back(fw::NftElementText(e));
  }
  std::vector<sys::NftElement> have_src;
  for (const char* set : {"hp4-src", "hp6-src"}) {
    WEFT_ASSIGN_OR_RETURN(auto es, sys::NftElements(sys::NftFamily::kInet, table, set));
    have_src.insert(have_src.end(), es.begin(), es.end());
  }
  if (!have_src.empty()) view->have["sources"] = fw::NftIntervals(have_src);
  return Status::Ok();
}

// hostPorts: the database's mappings against the kernel's table.
Status ReadHostPortRuleset(const Options& o, bool have_db, Snapshot* s) {
  if (o.hostport_backend != plugin::FwBackend::kNftables) {
    s->notes.push_back("hostPort ruleset not checked: only the nftables backend is (this network uses iptables)");
    return Status::Ok();
  }
  std::vector<fw::HostPortRule> rules;
  if (have_db) {
    WEFT_ASSIGN_OR_RETURN(auto store, ipam::Store::Open(o.data_dir));
    WEFT_ASSIGN_OR_RETURN(rules, plugin::DesiredHostPorts(store));
  }
  const std::string table = fw::HostPortTable(o.data_dir);
  // The chains the table can have: those of a one-mapping rendering.
  fw::HostPortRule sample{"", 1, "tcp", *IpPrefix::Parse("192.0.2.1/24"), 1};
  WEFT_ASSIGN_OR_RETURN(auto view, ReadRuleset("hostPort ruleset (table inet " + table + ")", table,
                                               TransactionChainComments(fw::NftHostPortTransaction(table, rules)),
                                               TransactionChainComments(fw::NftHostPortTransaction(table, {sample}))));
  view.want = HostPortView(table, rules);
  WEFT_RETURN_IF_ERROR(ReadHostPortElements(table, &view));
  s->rulesets.push_back(std::move(view));
  return Status::Ok();
}

Status ReadMasqueradeRuleset(const Options& o, Snapshot* s) {
  if (!o.masquerade) {
    s->notes.push_back("masquerade ruleset not checked: no network config (conflist) with ranges and cluster CIDRs");
    return Status::Ok();
  }
  if (o.masquerade_backend != plugin::FwBackend::kNftables) {
    s->notes.push_back("masquerade ruleset not checked: only the nftables backend is");
    return Status::Ok();
  }
  const std::string table = fw::NftTableName(o.masquerade->network);
  const auto want = TransactionChainComments(fw::NftMasqueradeTransaction(*o.masquerade));
  WEFT_ASSIGN_OR_RETURN(auto view, ReadRuleset("masquerade ruleset (table inet " + table + ")", table, want, want));
  size_t have_n = 0;
  for (const auto& [c, v] : view.have) have_n += v.size();
  if (!o.masquerade_required && have_n == 0) {
    s->notes.push_back("no masquerade ruleset for network " + o.masquerade->network +
                       " (weftd may run with --masquerade=false): not checked");
  } else {
    s->rulesets.push_back(std::move(view));
  }
  return Status::Ok();
}

std::string GuardWhat(fw::GuardMode mode) {
  return std::string("source guard (table netdev ") + fw::GuardTable(mode) + ")";
}

// The plugin's source guard of each mode some pod interface uses (a bridge
// port: weft-guard-bridge; a routed host veth: weft-guard): the marker of
// its shared chain (a hash of the whole ruleset), a chain for the port of
// each attachment whose link is here, and no chain of a port that is gone
// and no attachment's.
Status ReadGuardRulesets(Snapshot* s) {
  std::set<std::string> links, rows;
  for (const auto& p : s->pods) rows.insert(p.row.host_ifname);
  std::vector<std::string> ports[2];  // routed, bridge
  for (const auto& l : s->links) {
    links.insert(l.name);
    if (l.name.rfind(fw::kPodPortPrefix, 0) != 0) continue;
    ports[l.master ? 1 : 0].push_back(l.name);
  }
  for (fw::GuardMode mode : {fw::GuardMode::kRouted, fw::GuardMode::kBridge}) {
    const auto& mode_ports = ports[mode == fw::GuardMode::kRouted ? 0 : 1];
    if (mode_ports.empty()) continue;
    RulesetView v;
    v.checked = true;
    v.what = GuardWhat(mode);
    v.want["pod"] = {fw::GuardMarker(mode)};
    WEFT_ASSIGN_OR_RETURN(auto comments, sys::NftRuleComments(fw::GuardFamily(mode), fw::GuardTable(mode), "pod"));
    if (!comments.empty() && !comments[0].empty()) v.have["pod"] = {comments[0]};
    // A port's chain counts as one entry: "chain <port>".
    for (const auto& p : mode_ports)
      if (rows.count(p)) v.want["ports"].push_back("chain " + p);
    WEFT_ASSIGN_OR_RETURN(auto bound, fw::BoundPorts(mode));
    // The chain of an orphan veth (a link without a row) or of a vanished
    // attachment (a row without a link) is left to that finding's fix.
    for (const auto& p : bound)
      if (links.count(p) == rows.count(p)) v.have["ports"].push_back("chain " + p);
    s->rulesets.push_back(std::move(v));
  }
  return Status::Ok();
}

// The per-pod state of the ready attachments, planned as weftd plans it
// (the source guard's pieces are left to ReadGuardRulesets).
Status ReadPodState(sys::Netlink& nl, Snapshot* s) {
  std::vector<ipam::PodRecord> rows;
  for (const auto& p : s->pods) rows.push_back(p.row);
  WEFT_ASSIGN_OR_RETURN(auto kernel, plugin::ReadPodKernel(nl, rows));
  for (const auto& r : plugin::PlanPodRepairs(rows, kernel))
    if (r.object.rfind("guard-", 0) != 0) s->pod_state.push_back({r.object, r.subject, r.what});
  return Status::Ok();
}

}  // namespace

Result<Snapshot> ReadSnapshot(const Options& o) {
  Snapshot s;
  s.data_dir = o.data_dir;
  s.stuck_after_s = o.stuck_after_s;
  WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::Open());
  WEFT_ASSIGN_OR_RETURN(s.links, nl.ListLinks());
  bool have_db = false;
  WEFT_RETURN_IF_ERROR(ReadPods(o, nl, &s, &have_db));
  WEFT_RETURN_IF_ERROR(ReadHostRoutes(nl, &s));
  WEFT_RETURN_IF_ERROR(ReadHostPortRuleset(o, have_db, &s));
  WEFT_RETURN_IF_ERROR(ReadMasqueradeRuleset(o, &s));
  WEFT_RETURN_IF_ERROR(ReadPodState(nl, &s));
  WEFT_RETURN_IF_ERROR(ReadGuardRulesets(&s));
  for (const auto& l : s.links)
    if (l.kind == "vxlan" && l.name.rfind("weft.", 0) == 0) s.vxlan_device = true;
  if (s.vxlan_device) {
    WEFT_ASSIGN_OR_RETURN(auto comments, sys::NftRuleComments(sys::NftFamily::kInet, overlay::kOverlayTable, "input"));
    for (const auto& c : comments)
      if (c.rfind("weft-overlay:", 0) == 0) s.overlay_filter = true;
  }
  ReadNetpol(o, &s);
  ReadServices(o, &s);

  // A control plane that cannot be listed skips the peer checks (a
  // half-read list is never compared) but leaves the local checks standing.
  auto peers = ReadPeers(o, nl, &s.notes);
  if (peers.ok()) {
    s.peers = std::move(*peers);
  } else {
    s.incomplete = true;
    s.notes.push_back("peer checks failed: " + peers.status().ToString());
  }
  return s;
}

namespace {

// Which repairs the fixable findings call for.
struct FixPlan {
  bool reclaim = false, orphans = false, routes = false, hostports = false, masq = false, peers = false,
       netpol = false, services = false, guard_routed = false, guard_bridge = false, pod_state = false;
};

FixPlan PlanFixes(const std::vector<Finding>& findings) {
  FixPlan p;
  for (const auto& f : findings) {
    if (!f.fixable) continue;
    switch (f.kind) {
      case Kind::kVanishedAttachment: p.reclaim = true; break;
      case Kind::kOrphanVeth: p.orphans = true; break;
      case Kind::kStaleHostRoute: p.routes = true; break;
      case Kind::kRulesetMismatch:
        if (f.subject == GuardWhat(fw::GuardMode::kRouted)) p.guard_routed = true;
        else if (f.subject == GuardWhat(fw::GuardMode::kBridge)) p.guard_bridge = true;
        else (f.subject.find("hostPort") == 0 ? p.hostports : p.masq) = true;
        break;
      case Kind::kPeerMissing:
      case Kind::kPeerStale: p.peers = true; break;
      case Kind::kNetpolMismatch: p.netpol = true; break;
      case Kind::kServicesMismatch: p.services = true; break;
      case Kind::kPodStateMissing: p.pod_state = true; break;
      default: break;
    }
  }
  return p;
}

void Failed(FixReport* rep, const std::string& what, const Status& st) {
  rep->failed.push_back(what + ": " + st.ToString());
}

void ReleaseVanished(const Options& o, FixReport* rep) {
  // The plugin's reclaim re-tests every row itself (netns and veth both
  // gone) inside its own transactions.
  plugin::ReclaimOptions ro;
  ro.data_dir = o.data_dir;
  ro.hostport_backend = o.hostport_backend;
  auto r = plugin::ReclaimVanished(ro);
  if (!r.ok()) Failed(rep, "release vanished attachments", r.status());
  if (r.ok())
    for (const auto& a : r->reclaimed) rep->done.push_back("released attachment " + a + " (veth and netns gone)");
}

// Orphan links and stale host routes: re-read the rows just before acting,
// so an attachment recorded since the snapshot is never touched.
void DeleteOrphansAndStaleRoutes(const Options& o, const Snapshot& snap, const std::vector<Finding>& findings,
                                 const FixPlan& plan, sys::Netlink& nl, FixReport* rep) {
  bool have_db = false;
  auto rows = (plan.orphans || plan.routes) ? ReadRows(o.data_dir, &have_db)
                                            : Result<std::vector<ipam::PodRecord>>(std::vector<ipam::PodRecord>{});
  if (!rows.ok()) {
    Failed(rep, "re-read the database", rows.status());
    return;
  }
  std::set<std::string> veths;
  std::set<IpAddress> addrs;
  for (const auto& r : *rows) {
    veths.insert(r.host_ifname);
    for (const auto* ip : {&r.ip_v4, &r.ip_v6})
      if (*ip) addrs.insert((*ip)->addr());
  }
  for (const auto& f : findings) {
    if (f.kind == Kind::kOrphanVeth && !veths.count(f.subject)) {
      bool existed = false;
      Status st = nl.DeleteLink(f.subject, &existed);
      // Then its source-guard chain (from Linux 6.16 it outlives the link).
      for (fw::GuardMode mode : {fw::GuardMode::kRouted, fw::GuardMode::kBridge}) {
        if (!st.ok()) break;
        fw::PortBinding b;
        b.port = f.subject;
        if (mode == fw::GuardMode::kBridge) b.mac = plugin::PodMac(f.subject);
        st = fw::UnbindPort(mode, b);
      }
      if (!st.ok()) Failed(rep, "delete link " + f.subject, st);
      else rep->done.push_back("deleted orphan link " + f.subject);
    }
  }
  if (plan.routes)
    for (const auto& r : snap.host_routes) {
      if (addrs.count(r.dst.addr())) continue;
      bool existed = false;
      Status st = nl.DeleteRoute(r, &existed);
      if (!st.ok()) Failed(rep, "delete route " + r.dst.ToString(), st);
      else rep->done.push_back(existed ? "deleted stale host route " + r.dst.ToString()
                                       : "stale host route " + r.dst.ToString() + " went with its link");
    }
}

void ResyncHostPorts(const Options& o, FixReport* rep) {
  auto store = ipam::Store::Open(o.data_dir);
  Status st = store.ok() ? plugin::SyncHostPorts(o.hostport_backend, o.data_dir, *store) : store.status();
  if (!st.ok()) Failed(rep, "re-sync the hostPort ruleset", st);
  else rep->done.push_back("re-rendered the hostPort ruleset from the database");
}

// REQUIRES: o.masquerade.
void ResyncMasquerade(const Options& o, FixReport* rep) {
  Status st = sys::MkdirAll(o.weftd_state_dir, 0755);
  if (st.ok()) {
    auto fwl = o.masquerade_backend == plugin::FwBackend::kIptables ? fw::NewIptablesFirewall(o.weftd_state_dir)
                                                                     : fw::NewNftFirewall(o.weftd_state_dir);
    st = fwl->EnsureMasquerade(*o.masquerade);
  }
  if (!st.ok()) Failed(rep, "re-sync the masquerade ruleset", st);
  else rep->done.push_back("re-rendered the masquerade ruleset for network " + o.masquerade->network);
}

void ApplyPeerPlan(const PeerView& peers, FixReport* rep) {
  overlay::Plan plan = PeerPlan(peers);
  auto dnl = sys::Netlink::Open();
  if (!dnl.ok()) {
    Failed(rep, "open netlink", dnl.status());
    return;
  }
  auto dp = overlay::NewKernelDatapath(std::move(*dnl), peers.local.vxlan_index);
  int errors = 0;
  Status st = dp->Apply(plan, &errors);
  if (!st.ok()) Failed(rep, "apply the reconciler plan (" + std::to_string(errors) + " step(s) failed)", st);
  rep->done.push_back("applied weftd's reconciler plan: " + std::to_string(plan.size() - static_cast<size_t>(errors)) +
                      " of " + std::to_string(plan.size()) + " route/ARP/FDB change(s)");
}

// weftd's full transaction (add, delete and build the table again), sent
// through the nftables layer as one batch. Fetched again just before, and
// once more after: if weftd moved on meanwhile, its newer ruleset is
// applied instead.
// `applied` is the script applied last ("" when none was).
Status ApplyWeftdRuleset(const std::string& weftd_addr, std::string* applied) {
  Weftd weftd(weftd_addr);
  Status st = Status::Ok();
  for (int i = 0; i < 3 && st.ok(); ++i) {
    auto r = weftd.Get("/netpol/ruleset?format=json");
    if (!r.ok()) st = r.status();
    else if (r->status != 200)
      st = Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                         "weftd answered GET /netpol/ruleset with HTTP " + std::to_string(r->status));
    if (!st.ok() || r->body == *applied) break;
    auto tx = NetpolRulesetTransaction(r->body);
    st = tx.ok() ? sys::nft::Kernel().Apply(*tx) : tx.status();
    if (st.ok()) *applied = r->body;
  }
  return st;
}

// As ADD does: the guard's shared ruleset in one `nft -f` (sets,
// elements and the ports' chains kept), then every attachment's port bound
// again (its chain rewritten: one transaction), then the guard of an
// earlier release retired.
void ReinstallGuard(const Options& o, fw::GuardMode mode, FixReport* rep) {
  const std::string what = GuardWhat(mode);
  Status st = sys::MkdirAll(o.data_dir, 0700);
  if (st.ok()) st = fw::EnsureGuard(mode, o.data_dir);
  size_t bound = 0;
  if (st.ok()) {
    auto store = ipam::Store::Open(o.data_dir);
    auto n = store.ok() ? plugin::RebindPorts(*store, mode) : Result<size_t>(store.status());
    if (n.ok()) bound = *n;
    st = n.status();
  }
  if (st.ok()) st = fw::RetireLegacyGuard(mode);
  // Chains (and elements) of ports that are gone, as GC prunes them.
  size_t pruned = 0;
  if (st.ok()) {
    auto nl = sys::Netlink::Open();
    auto n = nl.ok() ? plugin::PruneGuardOfNode(*nl) : Result<size_t>(nl.status());
    if (n.ok()) pruned = *n;
    st = n.status();
  }
  if (!st.ok()) Failed(rep, "install the " + what, st);
  else
    rep->done.push_back("installed the " + what + " and bound " + std::to_string(bound) + " attachment port(s)" +
                        (pruned ? ", pruned " + std::to_string(pruned) + " chain(s) or element(s) of ports gone" : ""));
}

// weftd's own pass (plugin::KeepPodState): reads the rows and the kernel
// again, so only what is still missing is put back.
void RestorePodState(const Options& o, FixReport* rep) {
  plugin::KeepOptions ko;
  ko.data_dir = o.data_dir;
  auto res = plugin::KeepPodState(ko);
  if (!res.ok()) {
    Failed(rep, "put back the pods' kernel state", res.status());
    return;
  }
  for (const auto& r : *res) {
    if (r.repair.object == "guard-prune" && r.status.ok()) continue;
    if (r.status.ok()) rep->done.push_back("put back " + r.repair.what + " (" + r.repair.subject + ")");
    else Failed(rep, "put back " + r.repair.what + " (" + r.repair.subject + ")", r.status);
  }
}

void ReapplyNetpol(const Options& o, FixReport* rep) {
  std::string applied;
  Status st = ApplyWeftdRuleset(o.weftd_addr, &applied);
  if (!st.ok() || applied.empty())
    Failed(rep, std::string("re-apply weftd's ruleset (table ") + kNetpolTable + ")",
           st.ok() ? Status::Error(Reason::kUnavailable, Domain::kControlPlane, "nothing applied") : st);
  else
    rep->done.push_back(std::string("re-applied weftd's NetworkPolicy ruleset (table ") + kNetpolTable +
                        ") in one nft transaction");
}

// weftd's Service ruleset (Model::Full(): delete and build the table again
// in one batch), fetched just before it is applied.
void ReapplyServices(const Options& o, FixReport* rep) {
  const std::string what = std::string("re-apply weftd's Service ruleset (table ") + kServicesTable + ")";
  Weftd weftd(o.weftd_addr);
  auto r = weftd.Get("/services/ruleset?format=json");
  Status st = r.status();
  if (r.ok() && r->status != 200)
    st = Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                       "weftd answered GET /services/ruleset with HTTP " + std::to_string(r->status));
  if (st.ok()) {
    auto tx = ServicesRulesetTransaction(r->body);
    st = tx.ok() ? sys::nft::Kernel().Apply(*tx) : tx.status();
  }
  if (!st.ok()) Failed(rep, what, st);
  else rep->done.push_back(std::string("re-applied weftd's Service ruleset (table ") + kServicesTable +
                           ") in one nft transaction");
}

}  // namespace

FixReport Fix(const Options& o, const Snapshot& snap, const std::vector<Finding>& findings) {
  FixReport rep;
  const FixPlan plan = PlanFixes(findings);
  auto nl = sys::Netlink::Open();
  if (!nl.ok()) {
    Failed(&rep, "open netlink", nl.status());
    return rep;
  }
  if (plan.reclaim) ReleaseVanished(o, &rep);
  DeleteOrphansAndStaleRoutes(o, snap, findings, plan, *nl, &rep);
  if (plan.hostports) ResyncHostPorts(o, &rep);
  if (plan.masq && o.masquerade) ResyncMasquerade(o, &rep);
  if (plan.peers && snap.peers) ApplyPeerPlan(*snap.peers, &rep);
  if (plan.netpol) ReapplyNetpol(o, &rep);
  if (plan.services) ReapplyServices(o, &rep);
  if (plan.pod_state) RestorePodState(o, &rep);
  if (plan.guard_routed) ReinstallGuard(o, fw::GuardMode::kRouted, &rep);
  if (plan.guard_bridge) ReinstallGuard(o, fw::GuardMode::kBridge, &rep);
  return rep;
}

}  // namespace weft::doctor
