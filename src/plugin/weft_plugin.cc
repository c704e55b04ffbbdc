#include "plugin/weft_plugin.h"

#include <algorithm>
#include <cerrno>
#include <map>

#include "base/log.h"
#include "base/phase_timer.h"
#include "ipam/store.h"
#include "fw/source_guard.h"
#include "plugin/add.h"
#include "plugin/bridge.h"
#include "plugin/config.h"
#include "plugin/datapath.h"
#include "plugin/hostports.h"
#include "plugin/ipam_delegate.h"
#include "plugin/node_firewall.h"
#include "plugin/routed.h"
#include "plugin/runtime_config.h"
#include "plugin/store_ipam.h"
#include "plugin/teardown.h"
#include "sys/files.h"
#include "sys/log_file.h"
#include "sys/netlink.h"
#include "sys/netns.h"

namespace weft::plugin {

const std::vector<std::string>& KnownCniArgs() {
  static const std::vector<std::string> kKeys = {"K8S_POD_NAME", "K8S_POD_NAMESPACE", "K8S_POD_UID",
                                                 "K8S_POD_INFRA_CONTAINER_ID"};
  return kKeys;
}

Result<AddRequest> ParseAddRequest(const cni::CmdArgs& args, Config cfg) {
  AddRequest req;
  req.cfg = std::move(cfg);
  WEFT_ASSIGN_OR_RETURN(cni::CniArgs kargs, cni::ParseCniArgs(args.env.args_raw, KnownCniArgs()));
  WEFT_ASSIGN_OR_RETURN(req.rt, ParseRuntimeConfig(args.conf));
  req.container_id = args.env.container_id;
  req.ifname = args.env.ifname;
  req.netns = args.env.netns;
  req.host_ifname = HostVethName(req.container_id, req.ifname);
  req.pod_name = kargs.Get("K8S_POD_NAME");
  req.pod_namespace = kargs.Get("K8S_POD_NAMESPACE");
  req.pod_uid = kargs.Get("K8S_POD_UID");
  return req;
}

namespace {

// Parses the config and applies its logging settings.
Result<Config> Load(const cni::CmdArgs& args) {
  WEFT_ASSIGN_OR_RETURN(Config cfg, ParseConfig(args.conf));
  log::SetLevel(cfg.log_level);
  if (!cfg.log_file.empty()) {
    Status st = sys::SetLogFile(cfg.log_file);
    // The file may sit in a directory that does not exist yet (the plugin's
    // own dataDir on a new node): create it then, and only then, so every
    // other call pays one open.
    if (!st.ok() && st.sys_errno() == ENOENT) {
      st = sys::MkdirAll(cfg.log_file.substr(0, cfg.log_file.rfind('/')), 0755);
      if (st.ok()) st = sys::SetLogFile(cfg.log_file);
    }
    if (!st.ok()) WEFT_LOG(kWarn, "cannot open logFile; logging to stderr", {"path", cfg.log_file}, {"err", st});
  }
  return cfg;
}

Result<AddRequest> ParseAdd(const cni::CmdArgs& args) {
  WEFT_ASSIGN_OR_RETURN(Config cfg, Load(args));
  return ParseAddRequest(args, std::move(cfg));
}

// The datapath of `cfg.mode`. `cfg` outlives it.
std::unique_ptr<Datapath> NewDatapath(const Config& cfg, const DatapathContext& ctx) {
  if (cfg.mode == Mode::kBridge) return std::make_unique<BridgeDatapath>(cfg, ctx);
  return std::make_unique<RoutedDatapath>(cfg, ctx);
}

DelegateCall CallFor(const cni::CmdArgs& args) {
  return {args.env.container_id, args.env.netns, args.env.ifname, args.env.args_raw, args.env.path};
}

std::optional<DelegatedIpam> DelegateFor(const Config& cfg, const cni::CmdArgs& args) {
  if (cfg.delegated_ipam.empty()) return std::nullopt;
  return DelegatedIpam(cfg.delegated_ipam, args.stdin_data, args.conf.cni_version);
}

Status TeardownFor(sys::Netlink& host, ipam::Store& store, const Config& cfg,
                   const std::optional<DelegatedIpam>& delegated, const DelegateCall& call,
                   const TeardownTarget& target) {
  return Teardown(host, store, cfg.masquerade_backend, cfg.data_dir, delegated ? &*delegated : nullptr, call,
                  target);
}

}  // namespace

// parse -> kernel handles -> database -> RunAdd (add.h): allocate, arm the
// teardown, attach, firewall, ready.
Result<cni::CniResult> WeftPlugin::CmdAdd(const cni::CmdArgs& args) {
  PhaseTimer timer;
  WEFT_ASSIGN_OR_RETURN(AddRequest req, ParseAdd(args));
  timer.Mark("config");
  // The pod netns is held open (an fd) for the whole ADD, so it cannot
  // vanish mid-way; the pod socket is opened in it by this thread, which
  // switches back at once (sys::RunInNetnsOnThisThread).
  WEFT_ASSIGN_OR_RETURN(sys::Netns pod_ns, sys::Netns::Open(req.netns));
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  WEFT_ASSIGN_OR_RETURN(sys::Netlink pod, sys::Netlink::OpenInOnThisThread(pod_ns));
  req.mtu = req.cfg.mtu ? req.cfg.mtu : DeriveMtu(host);
  const auto datapath =
      NewDatapath(req.cfg, {host, pod, pod_ns, req.netns, req.host_ifname, req.ifname, req.mtu});
  timer.Mark("netlink");

  WEFT_ASSIGN_OR_RETURN(ipam::Store store, ipam::Store::Open(req.cfg.data_dir));
  const std::optional<DelegatedIpam> delegated = DelegateFor(req.cfg, args);
  StoreIpam ipam(store, req.cfg, delegated ? &*delegated : nullptr, CallFor(args));
  NodeFirewall firewall(req.cfg, store);
  auto rollback = [&](bool delete_link) { ipam.Rollback(host, req, delete_link); };
  WEFT_ASSIGN_OR_RETURN(cni::CniResult result, RunAdd(req, {ipam, *datapath, firewall, rollback}, timer));
  timer.Log("ADD");
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
  // DEL's config names the port's mode: only that guard table is touched
  // (GC, whose attachments may be of other configs, touches both).
  TeardownTarget target{cid, ifname, rec, rec ? rec->host_ifname : HostVethName(cid, ifname), true,
                        GuardModeOf(cfg)};
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  WEFT_RETURN_IF_ERROR(TeardownFor(host, store, cfg, DelegateFor(cfg, args), CallFor(args), target));
  timer.Mark("teardown");  // the kernel's veth deletion is most of it
  timer.Log("DEL");
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
    return Status::Error(Reason::kMismatch, Domain::kNone,
                         "no attachment recorded for container " + cid + " on " + ifname);
  if (rec->state != ipam::kStateReady)
    return Status::Error(Reason::kMismatch, Domain::kNone, "the attachment of " + cid + " on " + ifname +
                                                 " is incomplete (state " + rec->state + ")");
  if (auto delegated = DelegateFor(cfg, args)) WEFT_RETURN_IF_ERROR(delegated->Check(CallFor(args)));
  WEFT_ASSIGN_OR_RETURN(sys::Netns pod_ns, sys::Netns::Open(args.env.netns));
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  WEFT_ASSIGN_OR_RETURN(sys::Netlink pod, sys::Netlink::OpenInOnThisThread(pod_ns));
  WEFT_RETURN_IF_ERROR(NewDatapath(cfg, {host, pod, pod_ns, args.env.netns, rec->host_ifname, ifname})->Check(*rec));
  WEFT_RETURN_IF_ERROR(VerifyHostPorts(cfg.masquerade_backend, cfg.data_dir, store, *rec));
  std::vector<std::optional<IpAddress>> want;
  if (rec->ip_v4) want.push_back(rec->ip_v4->addr());
  if (rec->ip_v6) want.push_back(rec->ip_v6->addr());
  if (prev) {
    for (const auto& w : want) {
      bool listed = std::any_of(prev->ips.begin(), prev->ips.end(),
                                [&](const cni::IpConfig& c) { return c.address.addr() == *w; });
      if (!listed)
        return Status::Error(Reason::kMismatch, Domain::kNone,
                             "prevResult does not list the pod address " + w->ToString());
    }
    bool has_if = std::any_of(prev->interfaces.begin(), prev->interfaces.end(),
                              [&](const cni::Interface& i) { return i.name == ifname && !i.sandbox.empty(); });
    if (!prev->interfaces.empty() && !has_if)
      return Status::Error(Reason::kMismatch, Domain::kNone, "prevResult has no sandbox interface " + ifname);
  }
  return Status::Ok();
}

Status WeftPlugin::CmdStatus(const cni::CmdArgs& args) {
  WEFT_ASSIGN_OR_RETURN(Config cfg, Load(args));
  auto store = ipam::Store::Open(cfg.data_dir);
  if (!store.ok())
    return Status::Error(Reason::kUnavailable, Domain::kNone, "IPAM store unavailable: " + store.status().msg(),
                         store.status().details());
  // A read-only or full dataDir fails every ADD: say so before the runtime
  // schedules pods here.
  if (Status w = store->CheckWritable(); !w.ok())
    return Status::Error(Reason::kUnavailable, Domain::kNone, "IPAM store not writable: " + w.msg(), w.details());
  if (auto delegated = DelegateFor(cfg, args)) {
    Status st = delegated->ForwardStatus(CallFor(args));
    if (!st.ok()) return Status::Error(Reason::kUnavailable, Domain::kNone, st.msg(), st.details());
    return Status::Ok();
  }
  auto usage = store->Usage(cfg.ranges);
  if (!usage.ok())
    return Status::Error(Reason::kUnavailable, Domain::kNone, "IPAM store unreadable: " + usage.status().msg());
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
      return Status::Error(Reason::kUnavailable, Domain::kNone, "no free addresses left in " + which);
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
  WEFT_LOG(kInfo, "GC reclaimed attachments", {"count", reclaimed});
  // The source guard's chains and elements of ports that no longer exist:
  // every teardown destroys a port's before its link, so only an
  // attachment that went without one (a wiped dataDir, a link deleted by
  // hand and its row with it) leaves some.
  auto pruned = PruneGuardOfNode(host);
  if (!pruned.ok() && first_error.ok()) first_error = pruned.status().WithPrefix("GC");
  if (pruned.ok() && *pruned) WEFT_LOG(kInfo, "GC pruned source guard chains and elements", {"count", *pruned});
  // ADD and DEL touch only their own hostPort entries: the full diff is
  // here (entries no attachment wants go, missing ones come back).
  if (Status hp = SyncHostPorts(cfg.masquerade_backend, cfg.data_dir, store); !hp.ok() && first_error.ok())
    first_error = hp.WithPrefix("GC");
  if (delegated) {
    Status st = delegated->ForwardGc(CallFor(args));
    if (first_error.ok()) first_error = st;
  }
  return first_error;
}

}  // namespace weft::plugin
