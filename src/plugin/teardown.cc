#include "plugin/teardown.h"

#include "fw/source_guard.h"
#include "plugin/hostports.h"
#include "plugin/node_firewall.h"
#include "sys/crash_point.h"
#include "sys/netns.h"

namespace weft::plugin {

Status Teardown(sys::Netlink& host, ipam::Store& store, FwBackend backend, const std::string& data_dir,
                const DelegatedIpam* delegated, const DelegateCall& call, const TeardownTarget& t) {
  // Kept until the veth is gone: its nfnetlink socket closes after the
  // kernel has destroyed the deleted entries, not while it does.
  std::unique_ptr<fw::HostPortFirewall> hostports;
  UniqueFd guard_sockets[2];  // the same, for the source guard's chains (routed, bridge)
  if (t.row) {
    const bool retry = t.row->state == ipam::kStateDeleting;
    WEFT_ASSIGN_OR_RETURN(auto maps, store.PortMappingsOf(t.container_id, t.ifname));
    // "deleting" before anything is taken apart: weftd's keeper
    // (plugin/pod_state.h) puts back only what ready rows imply, so the
    // guard chain destroyed below is not "repaired" while this DEL runs.
    Status st = store.BeginDelete(t.container_id, t.ifname);
    if (!st.ok()) return st.Prefix("mark attachment deleting");
    WEFT_CRASH_POINT("del-after-unmap");
    // Attachments without mappings (the common case) do no hostPort work.
    if (retry || !maps.empty()) {
      hostports = HostPortsFor(backend, data_dir);
      auto source = [&] { return DesiredHostPorts(store); };
      // A first attempt deletes only this row's entries; a retry (the row
      // was already deleting: an earlier teardown died somewhere) cannot
      // know how far that one got, and runs the full diff.
      st = retry ? hostports->Sync(source)
                 : hostports->Remove(HostPortRulesOf(*t.row, maps), source,
                                     [&] { return store.HasLivePortMappings(); });
      WEFT_RETURN_IF_ERROR(st.Prefix("hostPorts"));
      WEFT_CRASH_POINT("del-after-hostports");
    }
  }
  if (t.row && (t.row->ip_v4 || t.row->ip_v6)) {
    // Its opt-out, if anyone set one: one lookup in the mode's `optouts`
    // set, and the set dumps only for a port that has one. Before the
    // chain's destruction: closing an nfnetlink socket after a commit that
    // deleted something waits for the kernel to destroy it (~10 ms).
    for (fw::GuardMode mode : {fw::GuardMode::kRouted, fw::GuardMode::kBridge})
      if (!t.guard_mode || *t.guard_mode == mode)
        WEFT_RETURN_IF_ERROR(fw::ClearAllowedSourcesIfAny(mode, t.host_ifname));
    // The port's source-guard chain (and a bridge port's elements): one
    // transaction in the mode's table (both tables when the mode is not
    // known), its socket closed after the link's deletion. Destroyed before
    // the link, so a reused name never inherits them.
    for (fw::GuardMode mode : {fw::GuardMode::kRouted, fw::GuardMode::kBridge}) {
      if (t.guard_mode && *t.guard_mode != mode) continue;
      UniqueFd& keep = guard_sockets[mode == fw::GuardMode::kRouted ? 0 : 1];
      WEFT_RETURN_IF_ERROR(fw::UnbindPort(mode, GuardBinding(mode, *t.row), &keep));
    }
  }
  if (t.delete_link) {
    // The kernel takes ~15 ms to unregister a veth (RCU grace periods):
    // copy the WAL into the database meanwhile, so the Release below
    // restarts it and the next plugin process opens a short one.
    ipam::BackgroundCheckpoint checkpoint(store.db().path());
    Status st = host.DeleteLink(t.host_ifname);
    if (!st.ok()) return st.Prefix("delete " + t.host_ifname);
  }
  WEFT_CRASH_POINT("del-after-link-delete");
  if (delegated) WEFT_RETURN_IF_ERROR(delegated->Del(call));
  WEFT_CRASH_POINT("del-before-release");
  Status st = store.Release(t.container_id, t.ifname);
  if (!st.ok()) return st.Prefix("release address");
  WEFT_CRASH_POINT("del-after-release");
  return Status::Ok();
}

bool AttachmentVanished(sys::Netlink& host, const ipam::PodRecord& row) {
  if (!row.netns.empty()) {
    auto ns = sys::Netns::Open(row.netns);
    // No such path, or a file that is no netns; EACCES and the like are not
    // proof of absence.
    if (ns.ok() || !sys::IsNetnsGone(ns.status())) return false;
  }
  auto link = host.GetLink(row.host_ifname);
  return link.ok() && !link->has_value();
}

}  // namespace weft::plugin
