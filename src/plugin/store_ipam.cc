#include "plugin/store_ipam.h"

#include "plugin/bridge.h"
#include "plugin/node_firewall.h"
#include "plugin/teardown.h"

namespace weft::plugin {

Result<Allocation> StoreIpam::Allocate(const ipam::PodRecord& want) {
  return delegated_ ? AllocateDelegated(want) : AllocateBuiltin(want);
}

Result<Allocation> StoreIpam::AllocateBuiltin(const ipam::PodRecord& want) {
  ipam::AllocationRequest req{cfg_.ranges, {}};
  if (cfg_.mode == Mode::kBridge)  // the bridge holds the gateways
    for (const auto& r : cfg_.ranges)
      if (auto gw = BridgeGateway(cfg_, IpPrefix(r.addr(), r.len()))) req.exclude.push_back(*gw);
  auto reserved = store_.Reserve(want, req);
  if (!reserved.ok()) return reserved.status().WithPrefix("allocate address");
  ScopeGuard release([this, cid = want.container_id, ifname = want.ifname] { (void)store_.Release(cid, ifname); });
  return Allocation{std::move(reserved).value(), std::nullopt, {}, std::move(release)};
}

Result<Allocation> StoreIpam::AllocateDelegated(ipam::PodRecord rec) {
  // A second ADD must not reach the IPAM plugin: its rollback DEL would
  // release the first attachment's address.
  WEFT_ASSIGN_OR_RETURN(auto existing, store_.Find(rec.container_id, rec.ifname));
  if (existing)
    return Status::Error(Reason::kAlreadyExists, Domain::kStore,
                         "container " + rec.container_id + " already has an attachment on " + rec.ifname,
                         "run DEL for it first");
  WEFT_ASSIGN_OR_RETURN(cni::CniResult got, delegated_->Add(call_));
  // Captures only what outlives this call: the guard travels with the
  // Allocation.
  ScopeGuard release([this] { (void)delegated_->Del(call_); });
  WEFT_ASSIGN_OR_RETURN(IpamAddrs picked, PickAddrs(got, delegated_->type()));
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
  if (cfg_.mode == Mode::kBridge) {
    if (rec.ip_v4 && !rec.gateway_v4) rec.gateway_v4 = FirstUsable(*rec.ip_v4);
    if (rec.ip_v6 && !rec.gateway_v6) rec.gateway_v6 = FirstUsable(*rec.ip_v6);
  }
  Status ins = store_.Insert(rec);
  if (!ins.ok()) return ins.Prefix("record attachment");
  // The row now exists too: undoing the allocation releases both.
  release.Dismiss();
  ScopeGuard undo([this, cid = rec.container_id, ifname = rec.ifname] {
    (void)delegated_->Del(call_);
    (void)store_.Release(cid, ifname);
  });
  return Allocation{std::move(rec), std::move(picked.routes), std::move(picked.dns), std::move(undo)};
}

Status StoreIpam::ClaimPorts(const ipam::PodRecord& rec, const std::vector<ipam::PortMapping>& maps) {
  // A burst of ADDs alone would let the WAL grow and every later plugin
  // process read it all on open: copy it out while the kernel work runs.
  if (store_.db().wal_frames() >= kAddCheckpointFrames) checkpoint_.emplace(store_.db().path());
  return store_.AddPortMappings(rec.container_id, rec.ifname, maps);
}

Status StoreIpam::MarkReady(const ipam::PodRecord& rec) {
  checkpoint_.reset();  // done before this commit, which then restarts the WAL
  return store_.SetState(rec.container_id, rec.ifname, ipam::kStateReady);
}

void StoreIpam::Rollback(sys::Netlink& host, const AddRequest& req, bool delete_link) {
  checkpoint_.reset();
  TeardownTarget t{req.container_id, req.ifname, std::nullopt, req.host_ifname, delete_link, GuardModeOf(cfg_)};
  auto row = store_.Find(req.container_id, req.ifname);
  if (row.ok()) t.row = *row;
  (void)Teardown(host, store_, cfg_.masquerade_backend, cfg_.data_dir, delegated_, call_, t);
}

}  // namespace weft::plugin
