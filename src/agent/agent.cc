#include "agent/agent.h"

#include <malloc.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "agent/conflist.h"
#include "agent/node_sysctl.h"
#include "base/log.h"
#include "base/scope_guard.h"
#include "base/strings.h"
#include "fw/masquerade.h"
#include "fw/guard_counters.h"
#include "fw/source_guard.h"
#include "overlay/filter.h"
#include "overlay/datapath.h"
#include "overlay/families.h"
#include "overlay/reconcile.h"
#include "overlay/sync.h"
#include "plugin/reclaim.h"
#include "plugin/pod_state.h"
#include "services/proxy_explain.h"
#include "sys/files.h"
#include "sys/kernel_events.h"
#include "sys/netlink.h"
#include "sys/nft_json.h"
#include "sys/nft_kernel.h"
#include "sys/nft_query.h"
#include "sys/nft_set.h"
#include "sys/sysctl.h"

namespace weft::agent {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The overlay filter's counters (not installed: zeros).
overlay::OverlayFilterCounters ReadOverlayCounters() {
  overlay::OverlayFilterCounters c;
  auto counters = sys::nft::Kernel().Counters(sys::nft::Family::kInet, overlay::kOverlayTable);
  if (!counters.ok()) return c;  // not installed (NotFound) or unreadable: zeros
  return overlay::OverlayFilterCountersFrom(*counters);
}

}  // namespace

struct Agent::State {
  std::optional<sys::Netlink> nl;  // setup + reads of links/addresses
  overlay::Uplink uplink;
  overlay::LocalNode self;
  overlay::LocalView view;
  std::vector<IpPrefix> pod_cidrs;
  std::unique_ptr<overlay::Datapath> datapath;
  std::unique_ptr<overlay::KernelSync> sync;  // over `datapath`; a new device starts from a kernel read
  std::unique_ptr<fw::Firewall> firewall;
};

Agent::Agent(AgentOptions opts, std::unique_ptr<ControlPlane> cp) : opts_(std::move(opts)), cp_(std::move(cp)) {
  if (opts_.vxlan_device.empty()) opts_.vxlan_device = "weft." + std::to_string(opts_.vxlan_vni);
}

Agent::~Agent() = default;

void Agent::RequestStop() {
  stop_ = true;
  store_.Notify();
}

HttpAnswer Agent::Serve(const StatusServer::Request& req) {
  if (gate_)
    if (auto refusal = gate_->Check(req)) return *refusal;
  return ServePath(req.path, req.query);
}

HttpAnswer Agent::ServePath(const std::string& path, const StatusServer::Query& query) {
  if (path == "/metrics") {
    std::string body = RenderBuildInfo(opts_.version, opts_.commit);
    body += RenderMetrics(metrics_, cp_->stats(), opts_.control_plane_name, cp_->auth_health(),
                                     opts_.auth_failure_timeout);
    if (netpol_) {
      netpol_->RefreshCounters();
      body += policy::RenderNetpolMetrics(netpol_->metrics());
    }
    // The plugin's source guard (fw/source_guard.h): read from the kernel.
    if (auto guard = fw::ReadGuardCounters(); guard.ok()) body += fw::RenderGuardMetrics(*guard);
    body += overlay::RenderOverlayFilterMetrics(ReadOverlayCounters());
    if (drops_) body += drops_->Metrics();
    if (proxy_) body += services::RenderProxyMetrics(proxy_->metrics());
    std::map<std::string, uint64_t> netpol_repairs;
    if (netpol_) netpol_repairs["netpol-table"] = netpol_->metrics().kernel_repairs.load();
    if (proxy_) netpol_repairs["services-table"] = proxy_->metrics().repairs.load();
    body += repairs_.Render(netpol_repairs);
    return {200, "text/plain; version=0.0.4; charset=utf-8", body};
  }
  if (path == "/netpol" && netpol_) return {200, "application/json", netpol_->DescribeJson()};
  if (path == "/drops" && drops_) {
    // ?since=SEQ: the records after it (weftctl policy drops --follow).
    uint64_t since = 0;
    if (auto it = query.find("since"); it != query.end()) {
      char* end = nullptr;
      since = std::strtoull(it->second.c_str(), &end, 10);
      if (it->second.empty() || *end != '\0') return {400, "text/plain", "since must be a record's seq\n"};
    }
    return {200, "text/plain; charset=utf-8", drops_->Records(since)};
  }
  if (path == "/netpol/explain" && netpol_) {
    if (!netpol_->metrics().ready.load())
      return {503, "text/plain", "not ready: network policy not yet enforced from complete lists\n"};
    // ?src=&dst=[&port=80/tcp][&family=4|6]: 200 with the explanation, 400
    // for bad input, 404 for a pod weftd does not know (docs/weftd.md).
    auto arg = [&](const char* k) {
      auto it = query.find(k);
      return it == query.end() ? std::string() : it->second;
    };
    auto q = policy::netpol::ParseExplainQuery(arg("src"), arg("dst"), arg("port"), arg("family"));
    auto body = q.ok() ? netpol_->ExplainJson(*q) : Result<std::string>(q.status());
    if (body.ok()) return {200, "application/json", *body};
    int code = body.status().reason() == Reason::kNotFound ? 404 : 400;
    return {code, "application/json", nlohmann::json({{"error", body.status().msg()}}).dump() + "\n"};
  }
  if (path == "/netpol/ruleset" && netpol_) {
    // Before the first complete lists the model is partial: not a ruleset
    // anyone should compare with or apply.
    if (!netpol_->metrics().ready.load())
      return {503, "text/plain", "not ready: network policy not yet enforced from complete lists\n"};
    // ?format=json: the transaction itself (what doctor compares and --fix
    // applies); else the table as `nft list table` would print it.
    auto format = query.find("format");
    const std::string f = format == query.end() ? "nft" : format->second;
    if (f != "nft" && f != "json") return {400, "text/plain", "format must be nft or json\n"};
    auto body = netpol_->DesiredRuleset(f == "json");
    if (!body.ok()) return {500, "text/plain", body.status().ToString() + "\n"};
    return {200, f == "json" ? "application/json" : "text/plain", *body};
  }
  if (path == "/services/ruleset" || path == "/services/explain") {
    if (!proxy_) return {404, "text/plain", "not found: weftd runs without the Service proxy (--service-proxy false)\n"};
    // Before the first complete lists the model is partial (as /netpol/ruleset).
    if (!proxy_->metrics().ready.load())
      return {503, "text/plain", "not ready: services not yet programmed from complete lists\n"};
    if (path == "/services/ruleset") {
      // ?format=json (the only one): Model::Full() as the nftables layer's
      // JSON (sys/nft_json.h), what doctor compares and --fix applies.
      auto format = query.find("format");
      if (format != query.end() && format->second != "json")
        return {400, "text/plain", "format must be json\n"};
      // Built under the model's lock (the sync pass waits meanwhile), rendered after it.
      std::optional<sys::nft::Transaction> tx;
      if (!proxy_->ReadModel([&](const services::Model& m) { tx = m.Full(); }))
        return {503, "text/plain", "not ready: the Service proxy has not started\n"};
      std::string body = sys::nft::TransactionJson(*tx);
      tx.reset();
      malloc_trim(0);  // the whole table's objects, as /netpol/ruleset gives them back
      return {200, "application/json", std::move(body)};
    }
    // ?service=NS/NAME: 200 with the explanation, 400 for bad input, 404 for a
    // Service the proxy does not know (docs/weftd.md).
    auto it = query.find("service");
    auto key = services::ParseServiceKey(it == query.end() ? std::string() : it->second);
    Result<std::string> body = key.status();
    if (key.ok() && !proxy_->ReadModel([&](const services::Model& m) {
          auto e = services::Explain(m, *key);
          body = e.ok() ? Result<std::string>(services::ExplanationJson(*e)) : Result<std::string>(e.status());
        }))
      return {503, "text/plain", "not ready: the Service proxy has not started\n"};
    if (body.ok()) return {200, "application/json", *body};
    int code = body.status().reason() == Reason::kNotFound ? 404 : 400;
    return {code, "application/json", nlohmann::json({{"error", body.status().msg()}}).dump() + "\n"};
  }
  if (path == "/healthz") {
    // Alive while the reconcile loop wakes up at least every resync period.
    int64_t age = NowMs() - metrics_.heartbeat_unix_ms.load();
    int64_t limit = 3 * opts_.resync.count() + 10000;
    if (age > limit) return {503, "text/plain", "reconcile loop stalled for " + std::to_string(age) + " ms\n"};
    // Refused credentials do not heal by themselves: a restart re-reads
    // everything, and the reason is what the operator needs to see.
    if (const AuthHealth* auth = cp_->auth_health())
      if (auto why = auth->Failing(opts_.auth_failure_timeout)) return {503, "text/plain", *why + "\n"};
    return {200, "text/plain", "ok\n"};
  }
  if (path == "/readyz") {
    if (netpol_ && !netpol_->metrics().ready.load())
      return {503, "text/plain", "not ready: network policy not yet enforced from complete lists\n"};
    if (proxy_ && !proxy_->metrics().ready.load())
      return {503, "text/plain", "not ready: services not yet programmed from complete lists\n"};
    if (metrics_.ready.load()) return {200, "text/plain", "ok\n"};
    return {503, "text/plain", "not ready: waiting for the first complete peer list and reconcile\n"};
  }
  return {404, "text/plain", "not found\n"};
}

namespace {

// The VTEP addresses: the first IP of each pod CIDR as a /32 or /128 (a
// peer's route to that CIDR goes via it, onlink).
Status EnsureVtepAddresses(sys::Netlink& nl, int vxlan_index, const std::vector<IpPrefix>& pod_cidrs) {
  WEFT_ASSIGN_OR_RETURN(auto addrs, nl.ListAddresses(0));
  for (const auto& c : pod_cidrs) {
    IpPrefix vtep(c.Masked().addr(), c.addr().family_bits());
    bool have = false;
    for (const auto& a : addrs)
      if (a.index == vxlan_index && a.prefix == vtep) have = true;
    // No DAD for IPv6: the address is this node's by allocation, and a
    // tentative one could not be used for a second.
    if (!have) WEFT_RETURN_IF_ERROR(nl.AddAddress(vxlan_index, vtep, /*nodad=*/!c.is_v4(), /*replace=*/true));
  }
  return Status::Ok();
}

}  // namespace

Status Agent::EnsureForwarding(const State& st) {
  // Forwarding only for the families the node has pods of: an IPv6-only
  // node leaves net.ipv4.ip_forward as the operator set it.
  if (overlay::OfFamily(st.pod_cidrs, /*v6=*/false)) WEFT_RETURN_IF_ERROR(EnsureNodeSysctl("net/ipv4/ip_forward", "1"));
  if (overlay::OfFamily(st.pod_cidrs, /*v6=*/true)) {
    WEFT_RETURN_IF_ERROR(EnsureNodeSysctl("net/ipv6/conf/all/forwarding", "1"));
    // With forwarding on, an interface with accept_ra=1 ignores router
    // advertisements, so an uplink configured by SLAAC would lose its
    // default route when it expires; 2 keeps accepting them.
    std::string ra_key = "net/ipv6/conf/" + st.uplink.name + "/accept_ra";
    if (auto ra = sys::ReadSysctl(ra_key); ra.ok() && Trim(*ra) == "1") {
      Status ra_st = sys::WriteSysctl(ra_key, "2");
      if (!ra_st.ok())
        WEFT_LOG(kWarn, "cannot keep accepting router advertisements on the uplink", {"sysctl", ra_key},
                 {"err", ra_st});
    }
  }
  return Status::Ok();
}

Status Agent::EnsureOverlayFilter() {
  const std::string marker = overlay::OverlayFilterMarker(opts_.vxlan_port);
  WEFT_ASSIGN_OR_RETURN(auto comments, sys::NftRuleComments(sys::NftFamily::kInet, overlay::kOverlayTable, "input"));
  if (comments.size() == 1 && comments[0] == marker) {
    overlay_filter_seen_ = true;
    return Status::Ok();
  }
  // Gone after weftd had it in place (rather than a first start or an
  // upgrade's new marker): a repair.
  const bool repair = overlay_filter_seen_ && comments.empty();
  // Creates what is missing and replaces the two chains' rules in one
  // transaction; the sets and their elements stay (nothing opens meanwhile).
  // One kernel transaction through the nftables layer; a refusal names the
  // failing object and what the kernel said.
  WEFT_RETURN_IF_ERROR(sys::nft::Kernel().Apply(overlay::OverlayFilterTransaction(opts_.vxlan_port)));
  if (repair) {
    repairs_.Add("overlay-filter");
    WEFT_LOG(kWarn, "put back missing kernel state", {"object", "overlay-filter"},
             {"missing", std::string("table inet ") + overlay::kOverlayTable});
  } else {
    WEFT_LOG(kInfo, "installed the overlay filter", {"table", std::string("inet ") + overlay::kOverlayTable},
             {"port", opts_.vxlan_port});
  }
  overlay_filter_seen_ = true;
  return Status::Ok();
}

Status Agent::EnsureVxlanDevice(State& st, int* vxlan_index, int* pod_mtu) {
  overlay::VxlanSpec spec;
  spec.name = opts_.vxlan_device;
  spec.vni = opts_.vxlan_vni;
  spec.port = opts_.vxlan_port;
  spec.local = st.uplink.ip;
  spec.underlay_index = st.uplink.index;
  spec.mtu = st.uplink.mtu - overlay::VxlanOverhead(st.uplink.ip.is_v6());
  WEFT_ASSIGN_OR_RETURN(auto link, overlay::EnsureVxlan(*st.nl, spec));
  *vxlan_index = link.index;
  st.self.vtep_mac = link.mac;
  *pod_mtu = spec.mtu;
  if (st.view.pod_cidrs.empty()) return Status::Ok();
  return EnsureVtepAddresses(*st.nl, *vxlan_index, st.view.pod_cidrs);
}

// Per family: --cluster-cidr's, else the control plane's (etcd's config).
std::vector<IpPrefix> Agent::EffectiveClusterCidrs() {
  std::vector<IpPrefix> cluster;
  for (bool v6 : {false, true}) {
    auto c = overlay::OfFamily(opts_.cluster_cidrs, v6);
    if (!c) c = overlay::OfFamily(cp_->ClusterCidrs(), v6);
    if (c) cluster.push_back(c->Masked());
  }
  return cluster;
}

Status Agent::EnsureNodeMasquerade(State& st, const std::vector<IpPrefix>& cluster) {
  // Only pod CIDRs whose family has a cluster CIDR: without one, traffic
  // to other nodes' pods would be masqueraded too.
  std::vector<IpPrefix> sources;
  for (const auto& c : st.pod_cidrs) {
    if (overlay::OfFamily(cluster, !c.is_v4())) {
      sources.push_back(c);
    } else {
      WEFT_LOG(kWarn, "no cluster CIDR known for this family: node-wide masquerade is off for it (set --cluster-cidr)",
               {"family", overlay::FamilyName(!c.is_v4())}, {"pod_cidr", c.ToString()});
    }
  }
  if (sources.empty()) return Status::Ok();
  if (!st.firewall) {
    WEFT_RETURN_IF_ERROR(sys::MkdirAll(opts_.state_dir, 0755));
    st.firewall = opts_.masquerade_backend == fw::Backend::kIptables ? fw::NewIptablesFirewall(opts_.state_dir)
                                                                     : fw::NewNftFirewall(opts_.state_dir);
  }
  fw::MasqueradeSpec m{opts_.network_name, sources, cluster};
  return st.firewall->EnsureMasquerade(m).WithPrefix("node-wide masquerade");
}

Status Agent::WriteNodeConflist(const State& st, int pod_mtu, const std::vector<IpPrefix>& cluster) {
  ConflistSpec c;
  c.network_name = opts_.network_name;
  c.ranges = st.pod_cidrs;
  c.mtu = pod_mtu;
  c.cluster_cidrs = cluster;
  c.data_dir = opts_.plugin_data_dir;
  c.log_file = opts_.plugin_log_file;
  c.log_level = opts_.plugin_log_level;
  if (opts_.network_policy) {
    c.network_policy = true;
    c.netpol_namespaces_file = NetpolNamespacesFile(opts_);
    // The plugin refuses a relative path, which would fail every ADD.
    if (c.netpol_namespaces_file.empty() || c.netpol_namespaces_file[0] != '/')
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "the NetworkPolicy namespaces file \"" +
                                                     c.netpol_namespaces_file + "\" is not an absolute path");
    if (opts_.netpol_pending_group == 0)
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                           "the NetworkPolicy pending group must not be 0 (the default group)");
    c.netpol_pending_group = opts_.netpol_pending_group;
  }
  bool changed = false;
  WEFT_RETURN_IF_ERROR(WriteConflist(opts_.cni_conf_dir, opts_.cni_conf_name, RenderConflist(c), &changed));
  if (changed)
    WEFT_LOG(kInfo, "wrote CNI conflist", {"path", opts_.cni_conf_dir + "/" + opts_.cni_conf_name});
  return Status::Ok();
}

// Idempotent node setup: runs at start and on every periodic resync, so a
// deleted device, address or sysctl comes back (level-triggered).
Status Agent::SetUpNode(State& st) {
  WEFT_RETURN_IF_ERROR(EnsureForwarding(st));
  int vxlan_index = 0;
  int pod_mtu = st.uplink.mtu;
  // The overlay filter before the VXLAN device, so it never runs unfiltered
  // (host-gw too: its check of pod sources on the uplink is in the table).
  WEFT_RETURN_IF_ERROR(EnsureOverlayFilter());
  if (opts_.backend != overlay::Backend::kHostGw) WEFT_RETURN_IF_ERROR(EnsureVxlanDevice(st, &vxlan_index, &pod_mtu));
  if (vxlan_index != st.view.vxlan_index || !st.datapath) {
    WEFT_ASSIGN_OR_RETURN(auto dnl, sys::Netlink::Open());
    st.sync.reset();
    st.datapath = overlay::NewKernelDatapath(std::move(dnl), vxlan_index);
    st.sync = std::make_unique<overlay::KernelSync>(st.datapath.get());
    st.view.vxlan_index = vxlan_index;
    vxlan_index_ = vxlan_index;
  }
  if (st.pod_cidrs.empty()) return Status::Ok();
  const std::vector<IpPrefix> cluster = EffectiveClusterCidrs();
  if (opts_.masquerade) WEFT_RETURN_IF_ERROR(EnsureNodeMasquerade(st, cluster));
  if (opts_.write_conflist) WEFT_RETURN_IF_ERROR(WriteNodeConflist(st, pod_mtu, cluster));
  return Status::Ok();
}

Status Agent::Reconcile(State& st, const overlay::PeerMap& peers, bool full) {
  auto t0 = std::chrono::steady_clock::now();
  overlay::Desired want = overlay::ComputeDesired(st.view, peers);
  overlay::SyncResult res = st.sync->Sync(want.state, full);
  const overlay::Plan& plan = res.plan;
  int errors = res.errors;
  const Status& applied = res.status;
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  metrics_.reconciles++;
  if (res.read_kernel) metrics_.kernel_reads++;
  metrics_.duration_us_sum += static_cast<uint64_t>(us);
  metrics_.last_duration_us = static_cast<uint64_t>(us);
  metrics_.last_reconcile_unix_ms = NowMs();
  metrics_.changes += res.changes;
  metrics_.peers = want.peers;
  metrics_.peers_v4 = want.peers_v4;
  metrics_.peers_v6 = want.peers_v6;
  metrics_.vxlan_peers = want.vxlan_peers;
  metrics_.direct_peers = want.direct_peers;
  metrics_.skipped_peers = want.skipped.size();
  if (res.changes > 0 || errors > 0 || !applied.ok())
    WEFT_LOG(kInfo, "reconciled", {"peers", want.peers}, {"vxlan", want.vxlan_peers},
             {"direct", want.direct_peers}, {"skipped", want.skipped.size()},
             {"route_upserts", plan.route_upserts.size()}, {"route_deletes", plan.route_deletes.size()},
             {"neigh_changes", plan.arp_upserts.size() + plan.arp_deletes.size()},
             {"fdb_changes", plan.fdb_adds.size() + plan.fdb_deletes.size()}, {"errors", errors},
             {"pass", res.fell_back ? "incremental+full" : res.read_kernel ? "full" : "incremental"},
             {"duration_us", us});
  for (const auto& s : want.skipped) WEFT_LOG(kDebug, "peer skipped", {"why", s});
  if (!applied.ok()) {
    metrics_.reconcile_errors++;
    return applied;
  }
  return Status::Ok();
}

Status Agent::DetectNode(State& st) {
  WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::Open());
  st.nl.emplace(std::move(nl));
  WEFT_ASSIGN_OR_RETURN(st.uplink, overlay::DetectUplink(*st.nl, opts_.iface, opts_.node_ip));
  WEFT_LOG(kInfo, "uplink", {"iface", st.uplink.name}, {"ip", st.uplink.ip.ToString()},
           {"ip6", st.uplink.ip6 ? st.uplink.ip6->ToString() : std::string("-")}, {"mtu", st.uplink.mtu},
           {"backend", overlay::BackendName(opts_.backend)});
  st.self.name = opts_.node_name;
  st.self.host_ip = st.uplink.ip;
  st.self.host_ip6 = st.uplink.ip6;
  st.self.host_mac = st.uplink.mac;
  st.self.backend = opts_.backend;
  st.view.name = opts_.node_name;
  st.view.host_ip = st.uplink.ip;
  st.view.host_ip6 = st.uplink.ip6;
  st.view.backend = opts_.backend;
  st.view.uplink_index = st.uplink.index;
  st.view.uplink_name = st.uplink.name;
  st.view.uplink_subnets = st.uplink.subnets;
  return Status::Ok();
}

// After a reboot the pods' namespaces and host veths are gone but the
// plugin's database is not: give their addresses (and hostPorts) back
// before this node is reported ready.
void Agent::ReclaimVanishedAttachments() {
  plugin::ReclaimOptions ro;
  if (!opts_.plugin_data_dir.empty()) ro.data_dir = opts_.plugin_data_dir;
  ro.network = opts_.network_name;
  ro.hostport_backend = opts_.masquerade_backend;
  auto rec = plugin::ReclaimVanished(ro);
  if (!rec.ok()) {
    WEFT_LOG(kWarn, "reclaim of vanished attachments failed", {"err", rec.status()});
  } else if (!rec->reclaimed.empty()) {
    std::string which;
    for (const auto& r : rec->reclaimed) which += (which.empty() ? "" : ",") + r;
    WEFT_LOG(kInfo, "reclaimed attachments whose netns and veth are gone", {"count", rec->reclaimed.size()},
             {"attachments", which});
  }
}

Status Agent::RegisterNode(State& st) {
  WEFT_ASSIGN_OR_RETURN(auto registered, cp_->Register(st.self, stop_));
  // One per family (IPv4 first): what the VTEP, the routes, the masquerade
  // and the conflist are made of.
  for (bool v6 : {false, true})
    if (auto c = overlay::OfFamily(registered, v6)) st.view.pod_cidrs.push_back(c->Masked());
  if (st.view.pod_cidrs.empty()) return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                                      "the node has no pod CIDR");
  st.pod_cidrs = st.view.pod_cidrs;
  WEFT_LOG(kInfo, "registered", {"node", opts_.node_name}, {"pod_cidrs", overlay::JoinPrefixes(st.pod_cidrs)},
           {"vtep_mac", st.self.vtep_mac.empty() ? "-" : st.self.vtep_mac});
  return Status::Ok();
}

// Until stop: wakes on a peer-list change, the periodic resync (node setup
// again and a reconcile that reads the kernel) or the retry after a failed
// reconcile.
void Agent::ReconcileLoop(State& st) {
  uint64_t seen = 0;
  bool reconciled_once = false;
  auto next_resync = std::chrono::steady_clock::now() + opts_.resync;
  auto retry_at = std::chrono::steady_clock::time_point::max();
  while (!stop_.load()) {
    auto now = std::chrono::steady_clock::now();
    auto wake = std::min(next_resync, retry_at);
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake > now ? wake - now : wake - wake);
    auto snap = store_.WaitChange(seen, std::min<std::chrono::milliseconds>(wait, std::chrono::seconds(5)), stop_);
    metrics_.heartbeat_unix_ms = NowMs();
    if (stop_.load()) break;
    // Never act before the first complete list: an empty desired state
    // would withdraw every route.
    if (!snap.synced) continue;
    now = std::chrono::steady_clock::now();
    // The keeper saw something of the node pass deleted: a resync now.
    const bool kicked = node_due_.exchange(false);
    bool resync = now >= next_resync || kicked;
    if (snap.version == seen && !resync && now < retry_at) continue;
    if (resync) {
      Status s = SetUpNode(st);
      if (!s.ok()) WEFT_LOG(kWarn, "node setup failed", {"err", s});
      next_resync = now + opts_.resync;
    }
    const bool peers_changed = snap.version != seen;
    seen = snap.version;
    // Control-plane changes are applied incrementally (against what the last
    // pass left in the kernel); the resync reads the kernel (sync.h).
    const uint64_t changes_before = metrics_.changes.load();
    Status r = Reconcile(st, snap.peers, /*full=*/resync);
    // Woken by a deletion with the peers unchanged: what it put back was missing.
    if (kicked && !peers_changed && metrics_.changes.load() > changes_before) {
      const uint64_t n = metrics_.changes.load() - changes_before;
      repairs_.Add("overlay-entry", n);
      WEFT_LOG(kWarn, "put back missing kernel state", {"object", "overlay-entry"},
               {"missing", std::to_string(n) + " route/neighbour/FDB/filter entries"});
    }
    if (!reconciled_once || resync) {
      // The list's JSON, the kernel dumps and this copy of the peers are
      // garbage now: free the copy first, or its pages stay resident (free
      // returns nothing from the middle of the heap; malloc_trim does).
      overlay::PeerMap().swap(snap.peers);
      malloc_trim(0);
    }
    if (r.ok()) {
      retry_at = std::chrono::steady_clock::time_point::max();
      if (!reconciled_once) WEFT_LOG(kInfo, "ready");
      reconciled_once = true;
      metrics_.ready = true;
    } else {
      WEFT_LOG(kWarn, "reconcile failed; retrying", {"err", r});
      retry_at = now + std::chrono::seconds(1);
    }
  }
}

void Agent::KeepPods() {
  plugin::KeepOptions ko;
  if (!opts_.plugin_data_dir.empty()) ko.data_dir = opts_.plugin_data_dir;
  ko.network = opts_.network_name;
  auto res = plugin::KeepPodState(ko);
  if (!res.ok()) {
    WEFT_LOG(kWarn, "cannot check the pods' kernel state", {"err", res.status()});
    return;
  }
  for (const auto& r : *res) {
    const std::string key = r.repair.object + " " + r.repair.what;
    if (r.status.ok()) {
      keep_failing_.erase(key);
      if (r.repair.object == "guard-prune") continue;  // not a piece put back
      repairs_.Add(r.repair.object);
      WEFT_LOG(kWarn, "put back missing kernel state", {"object", r.repair.object},
               {"subject", r.repair.subject}, {"missing", r.repair.what});
    } else {
      // Once at warn (a read-only /proc/sys fails every time), then debug.
      const log::Level level = keep_failing_.insert(key).second ? log::Level::kWarn : log::Level::kDebug;
      if (level >= log::GetLevel())
        log::Write(level, "cannot put back missing kernel state",
                   {{"object", r.repair.object}, {"subject", r.repair.subject}, {"missing", r.repair.what},
                    {"err", r.status}});
    }
  }
}

// Until stop: a pods pass at start, on the resync and whenever a kernel
// notification calls for one; the node and NetworkPolicy passes are handed
// their wakes. A burst (`nft flush ruleset`, a DEL) is coalesced for
// kCoalesce into one pass.
void Agent::SetNetworkPolicy(std::unique_ptr<policy::NetpolController> netpol) {
  netpol_ = std::move(netpol);
  if (netpol_)
    netpol_->SetFullSyncHook([this](bool begin) { DeafDuringFullSync(begin, WakeFor{false, false, true, false}); });
}

void Agent::SetServiceProxy(std::unique_ptr<services::ProxyController> proxy) {
  proxy_ = std::move(proxy);
  if (proxy_)
    proxy_->SetFullSyncHook([this](bool begin) { DeafDuringFullSync(begin, WakeFor{false, false, false, true}); });
}

void Agent::DeafDuringFullSync(bool begin, const WakeFor& replaced) {
  std::lock_guard lock(events_mu_);
  if (events_nft_fd_ < 0) return;
  std::lock_guard deaf(deaf_mu_);
  // Out of the group while any full sync is on its way; back in after the last.
  const bool was_deaf = deaf_ > 0;
  deaf_ += begin ? 1 : -1;
  if (deaf_ < 0) deaf_ = 0;
  if ((deaf_ > 0) != was_deaf) {
    Status st = sys::KernelEvents::SetNftListening(events_nft_fd_, deaf_ == 0);
    if (!st.ok()) WEFT_LOG(kWarn, "cannot change the nftables notifications' subscription", {"err", st});
  }
  if (!begin) {
    // Every pass but the table just replaced whole; a table another full
    // sync replaces meanwhile is checked too (its own wake is not taken
    // back).
    WakeFor all{true, true, !replaced.netpol, !replaced.services};
    heard_nothing_ |= all;
  }
}

void Agent::KeepLoop() {
  constexpr auto kCoalesce = std::chrono::milliseconds(50);
  KeptNames names{opts_.vxlan_device, 0, fw::NftTableName(opts_.network_name)};
  if (netpol_) names.own_netpol_commit = [this](uint32_t portid) { return netpol_->OwnCommit(portid); };
  if (proxy_) names.own_services_commit = [this](uint32_t portid) { return proxy_->OwnCommit(portid); };
  std::optional<sys::KernelEvents> events;
  // Whatever way the loop ends, the netpol thread's hook no longer uses the
  // socket once it is closed.
  ScopeGuard forget_fd([this] {
    std::lock_guard lock(events_mu_);
    events_nft_fd_ = -1;
  });
  if (auto ev = sys::KernelEvents::Open(); ev.ok()) {
    events.emplace(std::move(*ev));
    std::lock_guard lock(events_mu_);
    events_nft_fd_ = events->nft_fd();
  } else {
    WEFT_LOG(kWarn, "no kernel notifications: what goes missing comes back at the resync only", {"err", ev.status()});
  }
  auto next_pass = std::chrono::steady_clock::now();
  auto collect = [&](std::chrono::milliseconds wait, WakeFor* due) {
    bool lost = false;
    auto got = events->Wait(wait, &lost);
    if (!got.ok()) {
      WEFT_LOG(kWarn, "kernel notifications failed: what goes missing comes back at the resync only",
               {"err", got.status()});
      {
        std::lock_guard lock(events_mu_);
        events_nft_fd_ = -1;
        events.reset();
      }
      return;
    }
    names.vxlan_index = vxlan_index_.load();
    for (const auto& e : *got) *due |= Classify(e, names);
    if (lost) *due = WakeFor{true, true, true, true};  // something may have gone unseen
    // A full table went in while weftd did not listen: what else changed
    // meanwhile was not heard (DeafDuringFullSync).
    {
      std::lock_guard deaf(deaf_mu_);
      *due |= heard_nothing_;
      heard_nothing_ = WakeFor{};
    }
  };
  while (!stop_.load()) {
    auto now = std::chrono::steady_clock::now();
    WakeFor due;
    due.pods = now >= next_pass;
    if (!due.pods) {
      auto wait = std::min<std::chrono::milliseconds>(
          std::chrono::duration_cast<std::chrono::milliseconds>(next_pass - now) + std::chrono::milliseconds(1),
          std::chrono::milliseconds(500));
      if (events) {
        collect(wait, &due);
        if (due.any() && events) {
          std::this_thread::sleep_for(kCoalesce);
          collect(std::chrono::milliseconds(0), &due);
        }
      } else {
        std::this_thread::sleep_for(wait);
      }
    }
    if (stop_.load()) break;
    if (due.node) {
      node_due_ = true;
      store_.Wake();
    }
    if (due.netpol && netpol_) netpol_->CheckKernelSoon();
    if (due.services && proxy_) proxy_->CheckKernelSoon();
    if (due.pods || std::chrono::steady_clock::now() >= next_pass) {
      KeepPods();
      next_pass = std::chrono::steady_clock::now() + opts_.resync;
    }
  }
}

Status Agent::Run() {
  State st;
  WEFT_RETURN_IF_ERROR(DetectNode(st));
  ReclaimVanishedAttachments();

  std::unique_ptr<StatusServer> server;
  if (!opts_.metrics_addr.empty()) {
    StatusAuthOptions auth;
    auth.node_name = opts_.node_name;
    auth.metrics_auth = opts_.metrics_auth;
    gate_ = std::make_unique<StatusGate>(std::move(auth), std::move(reviewer_));
    WEFT_ASSIGN_OR_RETURN(server, StatusServer::Start(opts_.metrics_addr, [this](const StatusServer::Request& r) {
                            return Serve(r);
                          }));
  }
  metrics_.heartbeat_unix_ms = NowMs();
  if (opts_.drop_log) {
    drops_ = std::make_unique<DropRecorder>(netpol_.get());
    drops_->Start();
  }

  // NetworkPolicy first of all: the table an earlier weftd left stays in
  // force, and the sooner the lists are complete the sooner new pods that
  // wait in the pending group are let through.
  std::thread netpol_thread;
  if (netpol_) netpol_thread = std::thread([this] { netpol_->Run(stop_); });
  ScopeGuard join_netpol([&] {
    RequestStop();
    if (netpol_thread.joinable()) netpol_thread.join();
  });
  // The Service proxy beside it: its table replaces the one an earlier
  // weftd left only once its lists are complete.
  std::thread proxy_thread;
  if (proxy_) proxy_thread = std::thread([this] { proxy_->Run(stop_); });
  ScopeGuard join_proxy([&] {
    RequestStop();
    if (proxy_thread.joinable()) proxy_thread.join();
  });

  // The VXLAN device first: its MAC is part of what the node publishes.
  WEFT_RETURN_IF_ERROR(SetUpNode(st));
  WEFT_RETURN_IF_ERROR(RegisterNode(st));
  WEFT_RETURN_IF_ERROR(SetUpNode(st));

  std::thread keeper([this] { KeepLoop(); });
  ScopeGuard join_keeper([&] {
    RequestStop();
    keeper.join();
  });

  Status cp_status;
  std::thread watcher([&] {
    cp_status = cp_->Run(store_, stop_);
    if (!cp_status.ok()) {
      WEFT_LOG(kError, "control plane failed", {"err", cp_status});
      RequestStop();
    }
  });
  ReconcileLoop(st);
  RequestStop();
  watcher.join();
  return cp_status;
}

}  // namespace weft::agent
