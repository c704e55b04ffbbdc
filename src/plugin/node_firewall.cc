#include "plugin/node_firewall.h"

#include <algorithm>

#include "fw/hostport.h"
#include "fw/masquerade.h"
#include "fw/source_guard.h"
#include "plugin/hostports.h"
#include "sys/netlink.h"
#include "sys/sysctl.h"

namespace weft::plugin {

fw::MasqueradeSpec MasqSpec(const Config& cfg, const ipam::PodRecord& rec) {
  std::vector<IpPrefix> sources = cfg.delegated_ipam.empty() ? cfg.ranges : cfg.ipam_subnets;
  if (sources.empty()) {
    if (rec.ip_v4) sources.push_back(rec.ip_v4->Masked());
    if (rec.ip_v6) sources.push_back(rec.ip_v6->Masked());
  }
  return {cfg.net.name, sources, cfg.cluster_cidrs};
}

fw::GuardMode GuardModeOf(const Config& cfg) {
  return cfg.mode == Mode::kBridge ? fw::GuardMode::kBridge : fw::GuardMode::kRouted;
}

Status EnsureGuardOfNode(fw::GuardMode mode, const std::string& lock_dir, ipam::Store& store, bool* applied) {
  bool did = false;
  WEFT_RETURN_IF_ERROR(fw::EnsureGuard(mode, lock_dir, &did).Prefix("source guard"));
  if (applied) *applied = did;
  if (!did) return Status::Ok();
  // The table may be new (a first ADD, an upgrade, or after `nft flush
  // ruleset`): bind every attachment this dataDir knows again, or their
  // ports would be unguarded (routed) or cut off (bridge); then the guard
  // of an earlier release goes.
  if (auto bound = RebindPorts(store, mode); !bound.ok()) return bound.status().WithPrefix("source guard");
  return fw::RetireLegacyGuard(mode).Prefix("source guard");
}

Status NodeFirewall::EnsureSourceGuard() { return EnsureGuardOfNode(GuardModeOf(cfg_), cfg_.data_dir, store_); }

fw::PortBinding GuardBinding(fw::GuardMode mode, const ipam::PodRecord& rec) {
  fw::PortBinding b;
  b.port = rec.host_ifname;
  if (mode == fw::GuardMode::kBridge) b.mac = PodMac(rec.host_ifname);
  if (rec.ip_v4) b.v4 = rec.ip_v4->addr();
  if (rec.ip_v6) b.v6 = rec.ip_v6->addr();
  return b;
}

Result<size_t> PruneGuardOfNode(sys::Netlink& nl) {
  return fw::PruneGuard([&]() -> Result<std::vector<std::string>> {
    WEFT_ASSIGN_OR_RETURN(auto links, nl.ListLinks());
    std::vector<std::string> names;
    for (const auto& l : links) names.push_back(l.name);
    return names;
  });
}

namespace {

Result<size_t> RebindPortsOnce(ipam::Store& store, sys::Netlink& nl, fw::GuardMode mode) {
  WEFT_ASSIGN_OR_RETURN(auto rows, store.ListPods(""));
  WEFT_ASSIGN_OR_RETURN(auto links, nl.ListLinks());
  std::vector<fw::PortBinding> ports;
  for (const auto& r : rows) {
    if (!r.ip_v4 && !r.ip_v6) continue;
    // Only ports that exist (before Linux 6.16 a chain cannot name a
    // missing device) and are of this mode.
    auto l = std::find_if(links.begin(), links.end(), [&](const sys::LinkInfo& x) { return x.name == r.host_ifname; });
    if (l == links.end() || (l->master != 0) != (mode == fw::GuardMode::kBridge)) continue;
    // A bridge port made by an earlier release is locked to its pod's MAC
    // (as ADD does now) before its chain stops comparing MACs itself.
    if (mode == fw::GuardMode::kBridge) {
      WEFT_RETURN_IF_ERROR(nl.SetBridgePortFlags(l->index, /*hairpin=*/true, /*locked=*/true));
      WEFT_RETURN_IF_ERROR(nl.AddBridgeFdbStatic(l->index, PodMac(r.host_ifname)));
    }
    ports.push_back(GuardBinding(mode, r));
  }
  WEFT_RETURN_IF_ERROR(fw::BindPorts(mode, ports));
  return ports.size();
}

}  // namespace

Result<size_t> RebindPorts(ipam::Store& store, fw::GuardMode mode) {
  WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::Open());
  // Before Linux 6.16 a chain for a device that is gone fails the whole
  // transaction with ENOENT: a port a concurrent DEL removed after the
  // listing. List again rather than leave every port unguarded.
  Result<size_t> r = RebindPortsOnce(store, nl, mode);
  for (int i = 0; i < 2 && !r.ok() && r.status().sys_errno() == ENOENT; ++i) r = RebindPortsOnce(store, nl, mode);
  return r;
}

Status NodeFirewall::BindSources(const ipam::PodRecord& rec) {
  const fw::GuardMode mode = GuardModeOf(cfg_);
  Status st = fw::BindPort(mode, GuardBinding(mode, rec));
  // The table went since EnsureSourceGuard (`nft flush ruleset`, an
  // operator's script): install it again as the first ADD does (weftd may be
  // doing the same: both render the same table), then bind. Bounded: a table
  // deleted over and over fails the ADD, which the runtime retries.
  for (int i = 0; i < 2 && !st.ok() && st.sys_errno() == ENOENT; ++i) {
    WEFT_RETURN_IF_ERROR(EnsureGuardOfNode(mode, cfg_.data_dir, store_));
    st = fw::BindPort(mode, GuardBinding(mode, rec));
  }
  return st;
}

Status NodeFirewall::EnsureMasquerade(const ipam::PodRecord& rec) {
  auto fw = cfg_.masquerade_backend == FwBackend::kIptables ? fw::NewIptablesFirewall(cfg_.data_dir)
                                                            : fw::NewNftFirewall(cfg_.data_dir);
  // Its nftables read retries a dump a concurrent commit interrupts
  // (sys::RetryInterruptedNftDump): nothing to repeat here.
  Status st = fw->EnsureMasquerade(MasqSpec(cfg_, rec));
  return st.Prefix("masquerade");
}

Status NodeFirewall::SyncHostPorts(const ipam::PodRecord& rec, const std::string& localnet_dev) {
  if (rec.ip_v4) WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv4/conf/" + localnet_dev + "/route_localnet", "1"));
  // Only this pod's entries: the cost does not grow with the node.
  return AddHostPorts(cfg_.masquerade_backend, cfg_.data_dir, store_, rec);
}

Status NodeFirewall::FlushUdpConntrack(const ipam::PodRecord& rec) {
  WEFT_ASSIGN_OR_RETURN(auto maps, store_.PortMappingsOf(rec.container_id, rec.ifname));
  return fw::FlushUdpConntrack(HostPortRulesOf(rec, maps));
}

}  // namespace weft::plugin
