#pragma once
// Taking an attachment apart, shared by DEL, GC, ADD's rollback and the
// reboot reclaim (reclaim.h). The order is what makes a crash at any
// instruction recoverable by simply running the same teardown again:
//
//   1. BeginDelete: the row turns "deleting" (it keeps the address and its
//      port mappings, so nobody can claim those hostPorts yet, and the full
//      hostPort sync no longer wants them);     crash point del-after-unmap
//   2. hostPorts: the row's own entries are deleted from the kernel (one
//      netlink transaction); when the row was already "deleting" (a retry
//      after a crash) the full diff runs instead; crash point del-after-hostports
//   3. the port's source-guard chain is destroyed (weftd's keeper leaves a
//      "deleting" row's port alone: step 1 comes first for that too), then
//      the host veth is deleted (taking the pod end, the pod's addresses and
//      routes, and the host routes with it);       crash point del-after-link-delete
//   4. a delegated IPAM plugin releases its address; crash point del-before-release
//   5. the row is deleted, its port mappings by cascade. crash point del-after-release
//
// Every step is idempotent. The row outlives every kernel object and every
// rule it implies, so anything half-done is always reachable from a row, and
// the address is never free while any kernel object still uses it.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "fw/source_guard.h"
#include "ipam/store.h"
#include "plugin/config.h"
#include "plugin/ipam_delegate.h"
#include "sys/netlink.h"

namespace weft::plugin {

struct TeardownTarget {
  std::string container_id, ifname;
  // The row, if the database has one (its state and mappings decide step 2).
  std::optional<ipam::PodRecord> row;
  std::string host_ifname;
  // False only in ADD's rollback before the veth was created: a link with
  // the deterministic name that ADD did not create is not ours to delete.
  bool delete_link = true;
  // The source guard table the attachment's port is in (the config's mode):
  // only that one is touched. Unset (the reboot reclaim, which has no
  // config) touches both.
  std::optional<fw::GuardMode> guard_mode;
};

// Runs steps 1-5 above. `delegated` is the delegated IPAM plugin (nullptr
// with the built-in IPAM); `call` is what it is exec'd with.
// REQUIRES: `host` is a socket in the node's network namespace.
Status Teardown(sys::Netlink& host, ipam::Store& store, FwBackend backend, const std::string& data_dir,
                const DelegatedIpam* delegated, const DelegateCall& call, const TeardownTarget& target);

// True when the attachment can no longer exist in the kernel: its netns
// path does not name a network namespace any more (missing, or a leftover
// file that is not a netns) AND its host veth is absent. An error reading
// either (other than "absent") counts as "still there": reclaim only what is
// certainly gone.
bool AttachmentVanished(sys::Netlink& host, const ipam::PodRecord& row);

}  // namespace weft::plugin
