#include "plugin/weft_plugin.h"

#include <algorithm>
#include <map>

#include "base/crash_point.h"
#include "base/log.h"
#include "base/phase_timer.h"
#include "base/scope_guard.h"
#include "fw/hostport.h"
#include "fw/masquerade.h"
#include "ipam/store.h"
#include "plugin/bridge.h"
#include "plugin/config.h"
#include "plugin/ipam_delegate.h"
#include "plugin/pending.h"
#include "plugin/routed.h"
#include "plugin/runtime_config.h"
#include "plugin/teardown.h"
#include "sys/netlink.h"
#include "sys/netns.h"
#include "sys/sysctl.h"

namespace weft::plugin {

const std::vector<std::string>& KnownCniArgs() {
  static const std::vector<std::string> kKeys = {"K8S_POD_NAME", "K8S_POD_NAMESPACE", "K8S_POD_UID",
                                                 "K8S_POD_INFRA_CONTAINER_ID"};
  return kKeys;
}

namespace {

// WAL frames (one ADD writes about a dozen) past which ADD checkpoints in
// the background; DEL always does (see Teardown).
constexpr int kAddCheckpointFrames = 64;

// Parses the config and applies its logging settings.
Result<Config> Load(const cni::CmdArgs& args) {
  WEFT_ASSIGN_OR_RETURN(Config cfg, ParseConfig(args.conf));
  log::SetLevel(cfg.log_level);
  if (!cfg.log_file.empty() && !log::SetFile(cfg.log_file))
    WEFT_LOG(kWarn, "cannot open logFile " + cfg.log_file + "; logging to stderr");
  return cfg;
}

std::unique_ptr<fw::Firewall> FirewallFor(const Config& cfg) {
  return cfg.masquerade_backend == FwBackend::kIptables ? fw::NewIptablesFirewall(cfg.data_dir)
                                                        : fw::NewNftFirewall(cfg.data_dir);
}

// The masquerade's sources: the configured ranges, the delegated IPAM's
// subnets, or (for an IPAM plugin whose config names none) the pod's subnet.
fw::MasqueradeSpec MasqSpec(const Config& cfg, const ipam::PodRecord& rec) {
  std::vector<IpPrefix> sources = cfg.delegated_ipam.empty() ? cfg.ranges : cfg.ipam_subnets;
  if (sources.empty()) {
    if (rec.ip_v4) sources.push_back(rec.ip_v4->Masked());
    if (rec.ip_v6) sources.push_back(rec.ip_v6->Masked());
  }
  return {cfg.net.name, sources, cfg.cluster_cidrs};
}

DelegateCall CallFor(const cni::CmdArgs& args) {
  return {args.env.container_id, args.env.netns, args.env.ifname, args.env.args_raw, args.env.path};
}

std::optional<DelegatedIpam> DelegateFor(const Config& cfg, const cni::CmdArgs& args) {
  if (cfg.delegated_ipam.empty()) return std::nullopt;
  return DelegatedIpam(cfg.delegated_ipam, args.stdin_data, args.conf.cni_version);
}

// The gateway of the configured range holding `addr` (bridge mode, built-in
// IPAM): the configured one of that family, else the range's first usable.
std::optional<IpAddress> BuiltinGateway(const Config& cfg, const IpPrefix& addr) {
  for (const auto& g : cfg.gateways)
    if (g.is_v4() == addr.is_v4()) return g;
  for (const auto& r : cfg.ranges)
    if (r.Contains(addr.addr())) return FirstUsable(r);
  return std::nullopt;
}

PodAddrs RoutedPlan(const Config& cfg, const ipam::PodRecord& rec, const std::vector<cni::Route>& ipam_routes) {
  PodAddrs a;
  if (rec.ip_v4) a.v4 = rec.ip_v4->addr();
  if (rec.ip_v6) a.v6 = rec.ip_v6->addr();
  for (const auto& r : ipam_routes)
    if (r.dst.len() > 0) a.extra_routes.push_back(r.dst.Masked());
  for (const auto& p : cfg.route_via_host) a.extra_routes.push_back(p);
  return a;
}

// `ipam_routes`: the delegated plugin's routes, or nullopt with the built-in
// IPAM (a default route per family).
BridgeAddrs BridgePlan(const Config& cfg, const ipam::PodRecord& rec,
                       const std::optional<std::vector<cni::Route>>& ipam_routes) {
  BridgeAddrs a;
  a.v4 = rec.ip_v4;
  a.v6 = rec.ip_v6;
  a.gw4 = rec.gateway_v4;
  a.gw6 = rec.gateway_v6;
  if (a.v4 && !a.gw4) a.gw4 = BuiltinGateway(cfg, *a.v4);
  if (a.v6 && !a.gw6) a.gw6 = BuiltinGateway(cfg, *a.v6);
  if (ipam_routes) {
    a.routes = *ipam_routes;
  } else {
    if (a.v4) a.routes.push_back({*IpPrefix::Parse("0.0.0.0/0"), std::nullopt});
    if (a.v6) a.routes.push_back({*IpPrefix::Parse("::/0"), std::nullopt});
  }
  for (const auto& p : cfg.route_via_host) a.routes.push_back({p, std::nullopt});
  return a;
}

Status SyncHostPorts(const Config& cfg, ipam::Store& store) {
  return plugin::SyncHostPorts(cfg.masquerade_backend, cfg.data_dir, store);
}

Status TeardownFor(sys::Netlink& host, ipam::Store& store, const Config& cfg,
                   const std::optional<DelegatedIpam>& delegated, const DelegateCall& call,
                   const TeardownTarget& target) {
  return Teardown(host, store, cfg.masquerade_backend, cfg.data_dir, delegated ? &*delegated : nullptr, call,
                  target);
}

}  // namespace

Result<cni::CniResult> WeftPlugin::CmdAdd(const cni::CmdArgs& args) {
  const std::string& cid = args.env.container_id;
  const std::string& ifname = args.env.ifname;
  PhaseTimer timer;
  WEFT_ASSIGN_OR_RETURN(Config cfg, Load(args));
  WEFT_ASSIGN_OR_RETURN(cni::CniArgs kargs, cni::ParseCniArgs(args.env.args_raw, KnownCniArgs()));
  WEFT_ASSIGN_OR_RETURN(RuntimeOptions rt, ParseRuntimeConfig(args.conf));
  timer.Mark("config");
  WEFT_ASSIGN_OR_RETURN(sys::Netns pod_ns, sys::Netns::Open(args.env.netns));
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  WEFT_ASSIGN_OR_RETURN(sys::Netlink pod, sys::Netlink::OpenInOnThisThread(pod_ns));
  const int mtu = cfg.mtu ? cfg.mtu : DeriveMtu(host);
  const std::string host_ifname = HostVethName(cid, ifname);
  const bool bridge_mode = cfg.mode == Mode::kBridge;
  timer.Mark("netlink");

  // IPAM: the row is written in state "adding" before the kernel is touched.
  WEFT_ASSIGN_OR_RETURN(ipam::Store store, ipam::Store::Open(cfg.data_dir));
  ipam::PodRecord rec;
  rec.container_id = cid;
  rec.ifname = ifname;
  rec.network = cfg.net.name;
  rec.netns = args.env.netns;
  rec.host_ifname = host_ifname;
  rec.pod_name = kargs.Get("K8S_POD_NAME");
  rec.pod_namespace = kargs.Get("K8S_POD_NAMESPACE");
  rec.pod_uid = kargs.Get("K8S_POD_UID");
  rec.mtu = mtu;

  std::optional<DelegatedIpam> delegated = DelegateFor(cfg, args);
  std::optional<ScopeGuard> release_delegated;
  std::optional<std::vector<cni::Route>> ipam_routes;
  cni::Dns ipam_dns;
  if (delegated) {
    // A second ADD must not reach the IPAM plugin: its rollback DEL would
    // release the first attachment's address.
    WEFT_ASSIGN_OR_RETURN(auto existing, store.Find(cid, ifname));
    if (existing)
      return Status::Error(Code::kAlreadyAttached, "container " + cid + " already has an attachment on " + ifname,
                           "run DEL for it first");
    WEFT_ASSIGN_OR_RETURN(cni::CniResult got, delegated->Add(CallFor(args)));
    release_delegated.emplace([&] { (void)delegated->Del(CallFor(args)); });
    WEFT_ASSIGN_OR_RETURN(IpamAddrs picked, PickAddrs(got, delegated->type()));
    if (picked.v4) {
      rec.ip_v4 = picked.v4->address;
      rec.gateway_v4 = picked.v4->gateway;
    }
    if (picked.v6) {
      rec.ip_v6 = picked.v6->address;
      rec.gateway_v6 = picked.v6->gateway;
    }
    // Bridge mode needs a gateway on the bridge; the reference bridge plugin
    // takes the subnet's first address when IPAM names none.
    if (bridge_mode && rec.ip_v4 && !rec.gateway_v4) rec.gateway_v4 = FirstUsable(*rec.ip_v4);
    if (bridge_mode && rec.ip_v6 && !rec.gateway_v6) rec.gateway_v6 = FirstUsable(*rec.ip_v6);
    ipam_routes = picked.routes;
    ipam_dns = picked.dns;
    Status ins = store.Insert(rec);
    if (!ins.ok()) return ins.Prefix("record attachment");
  } else {
    ipam::AllocationRequest req{cfg.ranges, {}};
    if (bridge_mode)
      for (const auto& r : cfg.ranges)
        if (auto gw = BuiltinGateway(cfg, IpPrefix(r.addr(), r.len()))) req.exclude.push_back(*gw);
    auto reserved = store.Reserve(rec, req);
    if (!reserved.ok()) return reserved.status().WithPrefix("allocate address");
    rec = std::move(reserved).value();
  }
  timer.Mark("ipam");
  // From here on the row exists: any failure (or a crash, finished later by
  // DEL or GC) undoes everything through the same ordered teardown.
  bool link_created = false;
  ScopeGuard undo([&] {
    TeardownTarget t{cid, ifname, std::nullopt, host_ifname, link_created};
    auto row = store.Find(cid, ifname);
    if (row.ok()) t.row = *row;
    (void)TeardownFor(host, store, cfg, delegated, CallFor(args), t);
  });
  if (release_delegated) release_delegated->Dismiss();  // `undo` releases it now
  WEFT_CRASH_POINT("add-after-reserve");
  // A burst of ADDs alone would let the WAL grow and every later plugin
  // process read it all on open: copy it out while the kernel work runs.
  std::optional<ipam::BackgroundCheckpoint> checkpoint;
  if (store.db().wal_frames() >= kAddCheckpointFrames) checkpoint.emplace(store.db().path());

  // hostPorts: claimed in the database before any kernel work, so a conflict
  // fails the ADD with nothing else changed.
  std::vector<ipam::PortMapping> maps;
  for (const auto& m : rt.port_mappings) {
    const auto& c = rec.ip_v4 ? rec.ip_v4 : rec.ip_v6;
    maps.push_back({m.host_ip, m.host_port, m.protocol, c->addr().ToString(), m.container_port, cid, ifname});
  }
  WEFT_RETURN_IF_ERROR(store.AddPortMappings(cid, ifname, maps));
  WEFT_CRASH_POINT("add-after-portmaps");

  // NetworkPolicy (routed mode only): the namespaces file is read as late as
  // possible, and the group is part of the link's creation, so there is no
  // moment (nor a crash point) where the pod's veth exists outside it.
  const uint32_t host_group = HostVethGroup(cfg.network_policy, rec.pod_namespace);
  Status st = CreateVethPair(host, pod, pod_ns, host_ifname, ifname, mtu, host_group);
  if (!st.ok()) return st.Prefix("create veth");
  link_created = true;
  timer.Mark("veth");
  WEFT_CRASH_POINT("add-after-veth");
  auto host_info = host.GetLink(host_ifname);
  if (!host_info.ok()) return host_info.status().WithPrefix("read " + host_ifname);
  if (!host_info->has_value()) return Status::Error(Code::kKernel, "host interface " + host_ifname + " vanished");

  cni::CniResult result;
  std::string localnet_dev = host_ifname;  // where DNAT'd localhost traffic leaves
  if (bridge_mode) {
    const BridgeAddrs plan = BridgePlan(cfg, rec, ipam_routes);
    auto br = EnsureBridge(host, cfg.bridge, mtu);
    if (!br.ok()) return br.status().WithPrefix("bridge " + cfg.bridge);
    for (const auto& [addr, gw] : {std::pair{plan.v4, plan.gw4}, std::pair{plan.v6, plan.gw6}})
      if (addr && gw) WEFT_RETURN_IF_ERROR(EnsureBridgeAddress(host, *br, IpPrefix(*gw, addr->len())));
    WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv4/ip_forward", "1"));
    if (plan.v6) WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv6/conf/all/forwarding", "1"));
    auto host_link = ConfigureBridgePort(host, **host_info, *br);
    if (!host_link.ok()) return host_link.status().WithPrefix("attach " + host_ifname + " to " + cfg.bridge);
    WEFT_CRASH_POINT("add-after-host-side");
    auto pod_link = ConfigureBridgePodSide(pod, ifname, plan);
    if (!pod_link.ok()) return pod_link.status().WithPrefix("configure " + ifname + " in the pod");
    WEFT_CRASH_POINT("add-after-pod-side");
    auto br_now = host.GetLink(br->index);  // its MAC follows its ports
    result = BridgeResult(br_now.ok() && br_now->has_value() ? **br_now : *br, *host_link, *pod_link,
                          args.env.netns, plan);
    localnet_dev = cfg.bridge;
  } else {
    const PodAddrs plan = RoutedPlan(cfg, rec, ipam_routes.value_or(std::vector<cni::Route>{}));
    auto pod_link = ConfigurePodSide(pod, ifname, plan, (*host_info)->mac);
    if (!pod_link.ok()) return pod_link.status().WithPrefix("configure " + ifname + " in the pod");
    WEFT_CRASH_POINT("add-after-pod-side");
    auto host_link = ConfigureHostSide(host, **host_info, plan);
    if (!host_link.ok()) return host_link.status().WithPrefix("configure host side " + host_ifname);
    WEFT_CRASH_POINT("add-after-host-side");
    result = RoutedResult(*host_link, *pod_link, args.env.netns, plan);
  }

  timer.Mark("interfaces");
  if (cfg.masquerade) {
    auto fw = FirewallFor(cfg);
    Status m = RetryInterruptedDump([&] { return fw->EnsureMasquerade(MasqSpec(cfg, rec)); });
    if (!m.ok()) return m.Prefix("masquerade");
  }
  WEFT_CRASH_POINT("add-after-masquerade");
  // Pods without mappings do no firewall work at all here.
  if (!maps.empty()) {
    if (rec.ip_v4)  // DNAT of 127.0.0.1 needs it on the interface the packet leaves by
      WEFT_RETURN_IF_ERROR(sys::EnsureSysctl("net/ipv4/conf/" + localnet_dev + "/route_localnet", "1"));
    WEFT_RETURN_IF_ERROR(SyncHostPorts(cfg, store));
    WEFT_CRASH_POINT("add-after-hostports");
    WEFT_ASSIGN_OR_RETURN(auto mine, DesiredHostPorts(store));
    std::erase_if(mine, [&](const fw::HostPortRule& r) {
      return !((rec.ip_v4 && r.container == *rec.ip_v4) || (rec.ip_v6 && r.container == *rec.ip_v6));
    });
    WEFT_RETURN_IF_ERROR(fw::FlushUdpConntrack(mine));
  }
  timer.Mark("firewall");
  WEFT_CRASH_POINT("add-before-ready");
  checkpoint.reset();  // done before this commit, which then restarts the WAL
  WEFT_RETURN_IF_ERROR(store.SetState(cid, ifname, ipam::kStateReady));
  undo.Dismiss();
  timer.Mark("ready");
  WEFT_CRASH_POINT("add-after-ready");

  result.dns = EffectiveDns(cfg.net.dns, rt.dns, ipam_dns);
  WEFT_LOG(kInfo, "attached " + (rec.ip_v4 ? rec.ip_v4->ToString() : rec.ip_v6->ToString()) + " via " + host_ifname +
                      (host_group ? " (pending, group " + std::to_string(host_group) + ")" : ""));
  WEFT_LOG(kDebug, timer.Summary("ADD"));
  return result;
}

Status WeftPlugin::CmdDel(const cni::CmdArgs& args) {
  const std::string& cid = args.env.container_id;
  const std::string& ifname = args.env.ifname;
  PhaseTimer timer;
  WEFT_ASSIGN_OR_RETURN(Config cfg, Load(args));
  WEFT_ASSIGN_OR_RETURN(ipam::Store store, ipam::Store::Open(cfg.data_dir));
  WEFT_ASSIGN_OR_RETURN(auto rec, store.Find(cid, ifname));
  timer.Mark("ipam");
  // ADD writes the row before the link and every teardown deletes the link
  // before the row, so without a row there is nothing of ours in the kernel;
  // the derived name is still tried (DEL must be idempotent, and it is cheap).
  TeardownTarget target{cid, ifname, rec, rec ? rec->host_ifname : HostVethName(cid, ifname)};
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  WEFT_RETURN_IF_ERROR(TeardownFor(host, store, cfg, DelegateFor(cfg, args), CallFor(args), target));
  timer.Mark("teardown");  // the kernel's veth deletion is most of it
  WEFT_LOG(kDebug, timer.Summary("DEL"));
  return Status::Ok();
}

Status WeftPlugin::CmdCheck(const cni::CmdArgs& args) {
  const std::string& cid = args.env.container_id;
  const std::string& ifname = args.env.ifname;
  WEFT_ASSIGN_OR_RETURN(Config cfg, Load(args));
  WEFT_ASSIGN_OR_RETURN(auto prev, args.conf.PrevResult());
  WEFT_ASSIGN_OR_RETURN(ipam::Store store, ipam::Store::Open(cfg.data_dir));
  WEFT_ASSIGN_OR_RETURN(auto rec, store.Find(cid, ifname));
  if (!rec)
    return Status::Error(Code::kCheckFailed, "no attachment recorded for container " + cid + " on " + ifname);
  if (rec->state != ipam::kStateReady)
    return Status::Error(Code::kCheckFailed, "the attachment of " + cid + " on " + ifname +
                                                 " is incomplete (state " + rec->state + ")");
  if (auto delegated = DelegateFor(cfg, args)) WEFT_RETURN_IF_ERROR(delegated->Check(CallFor(args)));
  WEFT_ASSIGN_OR_RETURN(sys::Netns pod_ns, sys::Netns::Open(args.env.netns));
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  WEFT_ASSIGN_OR_RETURN(sys::Netlink pod, sys::Netlink::OpenInOnThisThread(pod_ns));
  std::vector<std::optional<IpAddress>> want;
  if (cfg.mode == Mode::kBridge) {
    // Delegated routes are not recorded: check the default routes only when
    // weft chose them.
    std::optional<std::vector<cni::Route>> routes;
    if (!cfg.delegated_ipam.empty()) routes.emplace();
    const BridgeAddrs plan = BridgePlan(cfg, *rec, routes);
    WEFT_RETURN_IF_ERROR(CheckBridge(host, pod, cfg.bridge, rec->host_ifname, ifname, plan));
  } else {
    WEFT_RETURN_IF_ERROR(CheckRouted(host, pod, rec->host_ifname, ifname, RoutedPlan(cfg, *rec, {})));
  }
  if (rec->ip_v4) want.push_back(rec->ip_v4->addr());
  if (rec->ip_v6) want.push_back(rec->ip_v6->addr());
  if (prev) {
    for (const auto& w : want) {
      bool listed = std::any_of(prev->ips.begin(), prev->ips.end(),
                                [&](const cni::IpConfig& c) { return c.address.addr() == *w; });
      if (!listed)
        return Status::Error(Code::kCheckFailed, "prevResult does not list the pod address " + w->ToString());
    }
    bool has_if = std::any_of(prev->interfaces.begin(), prev->interfaces.end(),
                              [&](const cni::Interface& i) { return i.name == ifname && !i.sandbox.empty(); });
    if (!prev->interfaces.empty() && !has_if)
      return Status::Error(Code::kCheckFailed, "prevResult has no sandbox interface " + ifname);
  }
  return Status::Ok();
}

Status WeftPlugin::CmdStatus(const cni::CmdArgs& args) {
  WEFT_ASSIGN_OR_RETURN(Config cfg, Load(args));
  auto store = ipam::Store::Open(cfg.data_dir);
  if (!store.ok())
    return Status::Error(Code::kNotAvailable, "IPAM store unavailable: " + store.status().msg(),
                         store.status().details());
  // A read-only or full dataDir fails every ADD: say so before the runtime
  // schedules pods here.
  if (Status w = store->CheckWritable(); !w.ok())
    return Status::Error(Code::kNotAvailable, "IPAM store not writable: " + w.msg(), w.details());
  if (auto delegated = DelegateFor(cfg, args)) {
    Status st = delegated->ForwardStatus(CallFor(args));
    if (!st.ok()) return Status::Error(Code::kNotAvailable, st.msg(), st.details());
    return Status::Ok();
  }
  auto usage = store->Usage(cfg.ranges);
  if (!usage.ok())
    return Status::Error(Code::kNotAvailable, "IPAM store unreadable: " + usage.status().msg());
  for (bool v6 : {false, true}) {
    uint64_t free = 0;
    bool any = false;
    std::string which;
    for (const auto& u : *usage) {
      if (u.subnet.is_v4() == v6) continue;
      any = true;
      free += u.usable - std::min(u.usable, u.used);
      which += (which.empty() ? "" : ", ") + u.subnet.ToString();
    }
    if (any && free == 0)
      return Status::Error(Code::kNotAvailable, "no free addresses left in " + which);
  }
  return Status::Ok();
}

Status WeftPlugin::CmdGc(const cni::CmdArgs& args, const std::vector<cni::Attachment>& valid) {
  WEFT_ASSIGN_OR_RETURN(Config cfg, Load(args));
  WEFT_ASSIGN_OR_RETURN(ipam::Store store, ipam::Store::Open(cfg.data_dir));
  WEFT_ASSIGN_OR_RETURN(auto rows, store.ListPods(cfg.net.name));
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  const auto delegated = DelegateFor(cfg, args);
  Status first_error;
  int reclaimed = 0;
  for (const auto& r : rows) {
    bool listed = std::any_of(valid.begin(), valid.end(), [&](const cni::Attachment& a) {
      return a.container_id == r.container_id && a.ifname == r.ifname;
    });
    // A listed attachment is kept unless it certainly cannot exist any more
    // (after a reboot the runtime may still list sandboxes whose netns and
    // veth are gone); an unlisted one goes, in whatever state it is.
    if (listed && !AttachmentVanished(host, r)) continue;
    DelegateCall call{r.container_id, "", r.ifname, args.env.args_raw, args.env.path};
    Status st = TeardownFor(host, store, cfg, delegated, call, {r.container_id, r.ifname, r, r.host_ifname});
    if (st.ok()) {
      ++reclaimed;
    } else if (first_error.ok()) {
      first_error = st.WithPrefix("GC " + r.container_id + "/" + r.ifname);
    }
  }
  WEFT_LOG(kInfo, "GC reclaimed " + std::to_string(reclaimed) + " attachment(s)");
  if (delegated) {
    Status st = delegated->ForwardGc(CallFor(args));
    if (first_error.ok()) first_error = st;
  }
  return first_error;
}

}  // namespace weft::plugin
