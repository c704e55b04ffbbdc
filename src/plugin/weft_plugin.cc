#include "plugin/weft_plugin.h"

#include <algorithm>

#include "base/log.h"
#include "base/scope_guard.h"
#include "fw/masquerade.h"
#include "ipam/store.h"
#include "plugin/config.h"
#include "plugin/routed.h"
#include "sys/netlink.h"
#include "sys/netns.h"

namespace weft::plugin {

const std::vector<std::string>& KnownCniArgs() {
  static const std::vector<std::string> kKeys = {"K8S_POD_NAME", "K8S_POD_NAMESPACE", "K8S_POD_UID",
                                                 "K8S_POD_INFRA_CONTAINER_ID"};
  return kKeys;
}

namespace {

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

fw::MasqueradeSpec MasqSpec(const Config& cfg) {
  return {cfg.net.name, cfg.ranges, cfg.cluster_cidrs};
}

PodAddrs AddrsOf(const ipam::PodRecord& rec) {
  PodAddrs a;
  if (rec.ip_v4) a.v4 = rec.ip_v4->addr();
  if (rec.ip_v6) a.v6 = rec.ip_v6->addr();
  return a;
}

// Removes the kernel side of an attachment (deleting the host end takes the
// pod end and the host routes with it) and then its database row.
Status Teardown(sys::Netlink& host, ipam::Store& store, const std::string& cid, const std::string& ifname,
                const std::string& host_ifname) {
  Status st = host.DeleteLink(host_ifname);
  if (!st.ok()) return st.Prefix("delete " + host_ifname);
  return store.Release(cid, ifname);
}

}  // namespace

Result<cni::CniResult> WeftPlugin::CmdAdd(const cni::CmdArgs& args) {
  const std::string& cid = args.env.container_id;
  const std::string& ifname = args.env.ifname;
  WEFT_ASSIGN_OR_RETURN(Config cfg, Load(args));
  WEFT_ASSIGN_OR_RETURN(cni::CniArgs kargs, cni::ParseCniArgs(args.env.args_raw, KnownCniArgs()));
  WEFT_ASSIGN_OR_RETURN(sys::Netns pod_ns, sys::Netns::Open(args.env.netns));
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  WEFT_ASSIGN_OR_RETURN(sys::Netlink pod, sys::Netlink::OpenIn(pod_ns));
  const int mtu = cfg.mtu ? cfg.mtu : DeriveMtu(host);
  const std::string host_ifname = HostVethName(cid, ifname);

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
  auto reserved = store.Reserve(rec, {cfg.ranges, {}});
  if (!reserved.ok()) return reserved.status().WithPrefix("allocate address");
  rec = std::move(reserved).value();
  ScopeGuard release_ip([&] { (void)store.Release(cid, ifname); });
  const PodAddrs addrs = AddrsOf(rec);

  Status st = CreateVethPair(host, pod, pod_ns, host_ifname, ifname, mtu);
  if (!st.ok()) return st.Prefix("create veth");
  ScopeGuard delete_link([&] { (void)host.DeleteLink(host_ifname); });

  auto host_info = host.GetLink(host_ifname);
  if (!host_info.ok()) return host_info.status().WithPrefix("read " + host_ifname);
  if (!host_info->has_value()) return Status::Error(Code::kKernel, "host interface " + host_ifname + " vanished");
  auto pod_link = ConfigurePodSide(pod, ifname, addrs, (*host_info)->mac);
  if (!pod_link.ok()) return pod_link.status().WithPrefix("configure " + ifname + " in the pod");
  auto host_link = ConfigureHostSide(host, **host_info, addrs);
  if (!host_link.ok()) return host_link.status().WithPrefix("configure host side " + host_ifname);

  if (cfg.masquerade) {
    Status m = FirewallFor(cfg)->EnsureMasquerade(MasqSpec(cfg));
    if (!m.ok()) return m.Prefix("masquerade");
  }
  WEFT_RETURN_IF_ERROR(store.SetState(cid, ifname, ipam::kStateReady));
  delete_link.Dismiss();
  release_ip.Dismiss();

  cni::CniResult result = RoutedResult(*host_link, *pod_link, args.env.netns, addrs);
  result.dns = cfg.net.dns;
  WEFT_LOG(kInfo, "attached " + (addrs.v4 ? addrs.v4->ToString() : addrs.v6->ToString()) + " via " + host_ifname);
  return result;
}

Status WeftPlugin::CmdDel(const cni::CmdArgs& args) {
  const std::string& cid = args.env.container_id;
  const std::string& ifname = args.env.ifname;
  WEFT_ASSIGN_OR_RETURN(Config cfg, Load(args));
  WEFT_ASSIGN_OR_RETURN(ipam::Store store, ipam::Store::Open(cfg.data_dir));
  WEFT_ASSIGN_OR_RETURN(auto rec, store.Find(cid, ifname));
  // Without a row the link may still exist (a crash between the link and
  // the row); its name is derived, so DEL finds it either way.
  std::string host_ifname = rec ? rec->host_ifname : HostVethName(cid, ifname);
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  return Teardown(host, store, cid, ifname, host_ifname);
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
  WEFT_ASSIGN_OR_RETURN(sys::Netns pod_ns, sys::Netns::Open(args.env.netns));
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  WEFT_ASSIGN_OR_RETURN(sys::Netlink pod, sys::Netlink::OpenIn(pod_ns));
  const PodAddrs addrs = AddrsOf(*rec);
  WEFT_RETURN_IF_ERROR(CheckRouted(host, pod, rec->host_ifname, ifname, addrs));
  if (prev) {
    for (const auto& want : {addrs.v4, addrs.v6}) {
      if (!want) continue;
      bool listed = std::any_of(prev->ips.begin(), prev->ips.end(),
                                [&](const cni::IpConfig& c) { return c.address.addr() == *want; });
      if (!listed)
        return Status::Error(Code::kCheckFailed, "prevResult does not list the pod address " + want->ToString());
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
  Status first_error;
  int reclaimed = 0;
  for (const auto& r : rows) {
    bool keep = std::any_of(valid.begin(), valid.end(), [&](const cni::Attachment& a) {
      return a.container_id == r.container_id && a.ifname == r.ifname;
    });
    if (keep) continue;
    Status st = Teardown(host, store, r.container_id, r.ifname, r.host_ifname);
    if (st.ok()) {
      ++reclaimed;
    } else if (first_error.ok()) {
      first_error = st.WithPrefix("GC " + r.container_id + "/" + r.ifname);
    }
  }
  WEFT_LOG(kInfo, "GC reclaimed " + std::to_string(reclaimed) + " attachment(s)");
  return first_error;
}

}  // namespace weft::plugin
