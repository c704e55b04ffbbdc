#pragma once
// Brings the kernel to a desired KernelState through a Datapath, reading the
// kernel only when it has to.
//
// A full pass reads the kernel (route, ARP and FDB dumps, and the filter
// sets: Datapath::Read), diffs and applies: that is the level-triggered
// safety net, and costs ~100 ms of dumps with 1000 peers. An
// incremental pass diffs the desired state against the state the last
// successful pass left the kernel in — one peer joining is then a route, an
// ARP and an FDB entry, no dump. The agent runs a full pass at start, on
// every resync and whenever the VXLAN device changed; an incremental pass
// for every control-plane change in between. A failed incremental pass falls
// back to a full pass at once (something changed underneath: re-read).
//
// Entries changed behind weftd's back (`ip route del`) are repaired by the
// next full pass (--resync-period), no longer by the next peer change.
//
// Not thread-safe: the agent's reconcile loop owns it.

#include "base/status.h"
#include "overlay/datapath.h"
#include "overlay/reconcile.h"

namespace weft::overlay {

struct SyncResult {
  Status status;            // the last pass's first failure (OK when the kernel matches)
  bool read_kernel = false;  // a full pass ran (asked for, or after a failed incremental one)
  bool fell_back = false;    // an incremental pass failed and a full one followed
  size_t changes = 0;        // kernel entries changed successfully (both passes)
  int errors = 0;            // failed kernel changes (both passes)
  Plan plan;                 // the last pass's plan (for logging)
};

class KernelSync {
 public:
  // `dp` must outlive this object.
  explicit KernelSync(Datapath* dp) : dp_(dp) {}

  // `full`: read the kernel even if the last applied state is known.
  SyncResult Sync(const KernelState& want, bool full);

  // Forget the last applied state: the next Sync() reads the kernel.
  void Invalidate() { applied_.reset(); }
  bool knows_kernel() const { return applied_.has_value(); }

 private:
  // Applies `plan`; on success remembers `want` as the kernel's state.
  Status ApplyPlan(const KernelState& want, const Plan& plan, SyncResult* r);

  Datapath* dp_;
  std::optional<KernelState> applied_;  // our entries as the last successful pass left them
};

}  // namespace weft::overlay
