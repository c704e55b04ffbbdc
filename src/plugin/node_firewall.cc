#include "plugin/node_firewall.h"

#include "fw/hostport.h"
#include "fw/masquerade.h"
#include "fw/source_guard.h"
#include "plugin/teardown.h"
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

Status NodeFirewall::EnsureSourceGuard() {
  bool applied = false;
  WEFT_RETURN_IF_ERROR(fw::EnsureGuard(GuardModeOf(cfg_), cfg_.data_dir, &applied).Prefix("source guard"));
  if (!applied || cfg_.mode != Mode::kBridge) return Status::Ok();
  // The table may be new (a first ADD, or after `nft flush ruleset`): bind
  // every attachment this dataDir knows again, or their ports would drop
  // everything.
  return RebindBridgePorts(store_).Prefix("source guard");
}

Status RebindBridgePorts(ipam::Store& store) {
  WEFT_ASSIGN_OR_RETURN(auto rows, store.ListPods(""));
  std::vector<sys::NftElement> all;
  for (const auto& r : rows) {
    if (!r.ip_v4 && !r.ip_v6) continue;
    std::optional<IpAddress> v4, v6;
    if (r.ip_v4) v4 = r.ip_v4->addr();
    if (r.ip_v6) v6 = r.ip_v6->addr();
    for (auto& e : fw::PortBindings(r.host_ifname, PodMac(r.host_ifname), v4, v6)) all.push_back(std::move(e));
  }
  // Adding an element that exists is no error.
  return fw::BindPorts(all);
}

Status NodeFirewall::BindSources(const ipam::PodRecord& rec) {
  if (cfg_.mode != Mode::kBridge) return Status::Ok();
  std::optional<IpAddress> v4, v6;
  if (rec.ip_v4) v4 = rec.ip_v4->addr();
  if (rec.ip_v6) v6 = rec.ip_v6->addr();
  return fw::BindPort(rec.host_ifname, PodMac(rec.host_ifname), v4, v6);
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
